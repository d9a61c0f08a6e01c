//! `rope(T, H, D, pos0, layout)`: `optimized::kernels::{rope_into, rope_inplace}` with a
//! [`optimized::kernels::RopeTable`] vs `reference::ops::rope::rope`. Out-of-place runs write
//! into a NaN-poisoned buffer.

use ndarray::Array3;
use optimized::kernels::{rope_inplace, rope_into, RopeTable};
use optimized::{Client, DeviceTensor};
use reference::RopeLayout;

use super::embedding::{judge, skip_unsupported};
use super::outcome;
use crate::{rand_vec, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct RopeCase {
    pub t: usize,
    pub h: usize,
    pub d: usize,
    pub pos0: usize,
    pub layout: RopeLayout,
    pub base: f32,
    pub inplace: bool,
}

impl Case for RopeCase {
    fn op(&self) -> Op {
        Op::Rope
    }
    fn name(&self) -> String {
        format!(
            "rope(T={},H={},D={},pos0={},{},base={},{}f32)",
            self.t,
            self.h,
            self.d,
            self.pos0,
            match self.layout {
                RopeLayout::HalfSplit => "half-split",
                RopeLayout::Adjacent => "adjacent",
            },
            self.base,
            if self.inplace { "in-place," } else { "" }
        )
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, h, d) = (self.t, self.h, self.d);
        let x = rand_vec(t * h * d, 31);
        let Ok(mut xa) = Array3::from_shape_vec((t, h, d), x.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        reference::ops::rope::rope(xa.view_mut(), self.pos0, self.base, self.layout);
        let want: Vec<f32> = xa.iter().copied().collect();
        outcome((|| {
            // A table longer than needed, so rows past pos0 + T exist but must not matter.
            let table = RopeTable::new(client, self.pos0 + t + 3, d, self.base)?;
            let xd = DeviceTensor::from_f32(client, &x, &[t, h, d])?;
            let got = if self.inplace {
                rope_inplace(client, &xd, &table, self.pos0, self.layout)?;
                xd.to_f32(client)?
            } else {
                let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * h * d], &[t, h, d])?;
                rope_into(client, &xd, &table, self.pos0, self.layout, &out)?;
                out.to_f32(client)?
            };
            Ok(judge(&got, &want, Op::Rope, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
        for (t, h, d, pos0, base, inplace) in [
            (1, 1, 64, 0, 10_000.0, false),
            (7, 9, 128, 8180, 10_000.0, false),
            (17, 3, 20, 5, 10_000.0, true),
            (1, 32, 128, 8191, 500_000.0, false),
            (1, 8, 64, 8190, 10_000.0, true),
            (5, 2, 2, 3, 10_000.0, false),
            (33, 4, 48, 1000, 1_000_000.0, false),
            (13, 5, 96, 8000, 10_000.0, true),
        ] {
            v.push(Box::new(RopeCase { t, h, d, pos0, layout, base, inplace }));
        }
    }
    v
}

/// `qkv_rope_cache` (rope v2: split of a fused q|k|v row + RoPE + KV-cache write) vs the
/// reference's RoPE on q and k and a plain copy of v. The caches are NaN-poisoned, including
/// rows outside `pos0 .. pos0+T`, which must stay NaN. f16 caches hold the rotated k and v
/// rounded to nearest even: they are compared with the reference's values rounded the same
/// way, at f16's tolerance (a value the two sides compute a few f32 ulps apart may round to
/// neighbouring f16 values).
#[derive(Debug, Clone)]
pub struct QkvRopeCacheCase {
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    pub pos0: usize,
    pub layout: RopeLayout,
    /// The caches' element type (f32 or f16).
    pub kv: optimized::Dtype,
}

impl Case for QkvRopeCacheCase {
    fn op(&self) -> Op {
        Op::Rope
    }
    fn name(&self) -> String {
        let kv = if self.kv == optimized::Dtype::F32 { String::new() } else { format!(",kv={}", self.kv.name()) };
        format!("qkv_rope_cache_v2(T={},H={},Hkv={},D={},pos0={},{:?}{kv},f32)", self.t, self.h, self.hkv, self.d, self.pos0, self.layout)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, h, hkv, d, p0) = (self.t, self.h, self.hkv, self.d, self.pos0);
        if let Some(skip) = skip_unsupported(client, self.kv.into()) {
            return skip;
        }
        let width = (h + 2 * hkv) * d;
        let qkv = rand_vec(t * width, 41);
        let base = 10_000.0;
        let part = |lo: usize, n: usize| -> Array3<f32> {
            let mut a = Array3::zeros((t, n, d));
            for tt in 0..t {
                for j in 0..n * d {
                    a[[tt, j / d, j % d]] = qkv[tt * width + lo * d + j];
                }
            }
            a
        };
        let (mut q, mut k, v) = (part(0, h), part(h, hkv), part(h + hkv, hkv));
        reference::ops::rope::rope(q.view_mut(), p0, base, self.layout);
        reference::ops::rope::rope(k.view_mut(), p0, base, self.layout);
        let cap = p0 + t + 2;
        // Expected caches: NaN everywhere except rows p0..p0+T.
        let mut want_k = vec![f32::NAN; cap * hkv * d];
        let mut want_v = want_k.clone();
        want_k[p0 * hkv * d..(p0 + t) * hkv * d].copy_from_slice(&self.kv.round(k.as_slice().unwrap_or(&[])));
        want_v[p0 * hkv * d..(p0 + t) * hkv * d].copy_from_slice(&self.kv.round(v.as_slice().unwrap_or(&[])));
        let cache_tol = crate::tolerance(Op::Rope, if self.kv == optimized::Dtype::F32 { Dtype::F32 } else { Dtype::F16 }).0;
        outcome((|| {
            let table = RopeTable::new(client, cap, d, base)?;
            let qkvd = DeviceTensor::from_f32(client, &qkv, &[t, width])?;
            let kc = DeviceTensor::from_f32_as(client, &vec![f32::NAN; cap * hkv * d], &[cap, hkv, d], self.kv)?;
            let vc = DeviceTensor::from_f32_as(client, &vec![f32::NAN; cap * hkv * d], &[cap, hkv, d], self.kv)?;
            let qd = optimized::kernels::rope::qkv_rope_cache(client, &qkvd, h, hkv, &table, p0, self.layout, &kc, &vc)?;
            let (gq, gk, gv) = (qd.to_f32(client)?, kc.to_f32(client)?, vc.to_f32(client)?);
            // Rows outside the written range must still be NaN (nothing written out of bounds).
            let rows = |g: &[f32], w: &[f32]| -> Result<(), String> {
                let lo = p0 * hkv * d;
                let hi = (p0 + t) * hkv * d;
                if g[..lo].iter().chain(&g[hi..]).any(|x| !x.is_nan()) {
                    return Err("wrote a cache row outside pos0..pos0+T".into());
                }
                crate::compare(&g[lo..hi], &w[lo..hi], cache_tol).map(|_| ())
            };
            let verdict = rows(&gk, &want_k).and_then(|_| rows(&gv, &want_v)).map_err(|e| format!("cache: {e}"));
            Ok(match verdict {
                Err(e) => Outcome::Fail(e),
                Ok(()) => judge(&gq, q.as_slice().unwrap_or(&[]), Op::Rope, Dtype::F32),
            })
        })())
    }
}

pub fn fused_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (t, h, hkv, d, p0) in [(1, 9, 3, 64, 0), (1, 32, 4, 64, 127), (7, 4, 4, 16, 3), (5, 8, 1, 128, 8000), (3, 3, 1, 20, 1)] {
        for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
            for kv in [optimized::Dtype::F32, optimized::Dtype::F16] {
                v.push(Box::new(QkvRopeCacheCase { t, h, hkv, d, pos0: p0, layout, kv }));
            }
        }
    }
    v
}
