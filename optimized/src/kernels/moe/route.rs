//! The router's top-K and the softmax over the K chosen logits (route v1), on the device.

use cubecl::prelude::*;

use super::Routes;
use crate::kernels::swiglu::{check_f32, Elementwise};
use crate::{Client, DeviceTensor, Error};

/// route v1: one unit per token. Rank r takes the largest logit among those ranked after rank
/// r − 1 in (value descending, index ascending) order — the reference's stable sort — so equal
/// logits rank the lower expert first. Then `w_r = e^(z_r − z_0) / Σ e^(z_r' − z_0)` in rank
/// order (z_0 is the maximum), the reference softmax's arithmetic. `z [T, E]`, `ids` /
/// `w` `[T, K]`.
#[cube(launch)]
pub fn moe_route_v1(z: &[f32], ids: &mut [u32], w: &mut [f32], n_tok: u32, n_exp: u32, #[comptime] k: usize) {
    let t = ABSOLUTE_POS;
    if t < n_tok as usize {
        let e_n = n_exp as usize;
        let base = t * e_n;
        let mut sel = Array::<f32>::new(k);
        let mut prev_v = f32::new(0.0);
        let mut prev_i = 0usize;
        #[unroll]
        for r in 0..k {
            let mut best = f32::new(0.0);
            // A mutable run-time variable initialised by the literal itself (see docs/gpu-build.md).
            let mut bi = 4294967295u32;
            for j in 0..e_n {
                let v = z[base + j];
                let mut after = v < prev_v || (v == prev_v && j > prev_i);
                if r == 0 {
                    after = true;
                }
                if after && (bi == 4294967295u32 || v > best) {
                    best = v;
                    bi = j as u32;
                }
            }
            ids[t * k + r] = bi;
            sel[r] = best;
            prev_v = best;
            prev_i = bi as usize;
        }
        let m = sel[0];
        let mut s = f32::new(0.0);
        #[unroll]
        for r in 0..k {
            let e = (sel[r] - m).exp();
            sel[r] = e;
            s += e;
        }
        #[unroll]
        for r in 0..k {
            w[t * k + r] = sel[r] / s;
        }
    }
}

/// The routes of `z [T, E]` (router logits, f32): each token's `k` largest logits, their
/// experts and softmax weights (route v1).
pub fn route(client: &Client, z: &DeviceTensor, k: usize) -> Result<Routes, Error> {
    check_f32("moe_route", "z", z)?;
    let [t, e] = z.shape[..] else {
        return Err(Error::Shape(format!("moe_route: z {:?}, expected [T, E]", z.shape)));
    };
    if k == 0 || k > e || k > super::MAX_K {
        return Err(Error::Shape(format!("moe_route: top-{k} of {e} experts (1 ≤ K ≤ min(E, {}))", super::MAX_K)));
    }
    // ids are u32 words in an f32-sized buffer (as `DeviceTensor::from_u32` makes them).
    let routes = Routes { ids: DeviceTensor::empty_f32(client, &[t * k]), weights: DeviceTensor::empty_f32(client, &[t * k]), tokens: t, k };
    if t == 0 {
        return Ok(routes);
    }
    let g = Elementwise::with_vec(client, "moe_route", t, 1)?;
    unsafe {
        moe_route_v1::launch(client, g.count, g.dim, z.as_arg(1), routes.ids.as_arg(1), routes.weights.as_arg(1), t as u32, e as u32, k);
    }
    Ok(routes)
}
