//! Logit soft-cap in place: `z ← c · tanh(z / c)` over logits `[T, V]` f32 (Gemma's
//! `final_logit_softcapping`), in the reference's order (`reference::ops::softcap::softcap`:
//! divide, tanh, multiply, f32).
//!
//! v1: one unit per logit (256 per cube, the grid of [`Elementwise`]); `pdl`:
//! [`await_predecessor`] first (it follows the output gemv on the decode path).

use cubecl::prelude::*;

use super::pdl::await_predecessor;
use super::swiglu::{check_f32, Elementwise};
use crate::{Client, DeviceTensor, Error};

/// v1 kernel: the first `len` values of `z` capped at `c`.
#[cube(launch)]
pub fn softcap_v1(z: &mut [f32], c: f32, len: u32, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < len as usize {
        z[i] = (z[i] / c).tanh() * c;
    }
}

/// `z ← c · tanh(z / c)` in place for every value of `z` (f32, any shape); `c` finite and > 0.
pub fn softcap_inplace(client: &Client, z: &DeviceTensor, c: f32) -> Result<(), Error> {
    check_f32("softcap", "z", z)?;
    if !(c.is_finite() && c > 0.0) {
        return Err(Error::Shape(format!("softcap: cap {c} must be finite and > 0")));
    }
    let e = Elementwise::with_vec(client, "softcap", z.numel(), 1)?;
    if e.n == 0 {
        return Ok(());
    }
    unsafe {
        softcap_v1::launch(client, e.count, e.dim, z.as_arg(1), c, e.n, super::pdl::enabled(client));
    }
    Ok(())
}
