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

/// The RoPE configurations of the architectures, for [`RopeSpecCase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeKind {
    /// Llama 3.1's by-wavelength scaling (θ = 500000, factor 8).
    Llama3,
    /// YaRN (Qwen long-context configs): scaled ω and cos / sin times its attention factor.
    Yarn,
    /// Positions divided by 2.
    Linear,
    /// GGUF `rope_freqs.weight`: ω divided by per-pair factors.
    FreqFactors,
    /// Partial rotary, R = D/2 (Phi-3-style `partial_rotary_factor` 0.5).
    Half,
    /// Partial rotary, R = D/4.
    Quarter,
}

impl RopeKind {
    pub const ALL: [RopeKind; 6] = [RopeKind::Llama3, RopeKind::Yarn, RopeKind::Linear, RopeKind::FreqFactors, RopeKind::Half, RopeKind::Quarter];

    fn name(self) -> &'static str {
        match self {
            RopeKind::Llama3 => "llama3",
            RopeKind::Yarn => "yarn",
            RopeKind::Linear => "linear",
            RopeKind::FreqFactors => "freq-factors",
            RopeKind::Half => "rot=1/2",
            RopeKind::Quarter => "rot=1/4",
        }
    }

    /// The spec for heads of width `d`.
    pub fn spec(self, d: usize, layout: RopeLayout) -> reference::arch::RopeSpec {
        use reference::ops::rope::{yarn_attention_factor, RopeScaling};
        let (mut theta, mut rot, mut scaling, mut freq_factors) = (10_000.0, d, RopeScaling::None, None);
        match self {
            RopeKind::Llama3 => {
                theta = 500_000.0;
                scaling = RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_pos: 8192.0 };
            }
            RopeKind::Yarn => {
                theta = 1_000_000.0;
                scaling = RopeScaling::Yarn {
                    factor: 4.0,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    original_max_pos: 4096.0,
                    truncate: true,
                    attention_factor: yarn_attention_factor(4.0, None, None),
                };
            }
            RopeKind::Linear => scaling = RopeScaling::Linear { factor: 2.0 },
            RopeKind::FreqFactors => {
                theta = 500_000.0;
                freq_factors = Some((0..d / 2).map(|i| 1.0 + (i % 5) as f32 * 1.5).collect());
            }
            RopeKind::Half => rot = d / 2,
            RopeKind::Quarter => rot = d / 4,
        }
        reference::arch::RopeSpec { theta, rot, scaling, layout, freq_factors }
    }
}

/// Which launch a [`RopeSpecCase`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePath {
    /// `rope_into` (v1, into a NaN-poisoned buffer).
    Into,
    /// `rope_inplace` (v1).
    InPlace,
    /// `qkv_rope_cache` (v2, contiguous caches).
    Cache,
    /// `qkv_rope_paged` (v3, through a block table).
    Paged,
    /// `qkv_rope_ragged` (v4, a position and pool row per token).
    Ragged,
    /// `qkv_rope_ragged` into E4M3 pools: one launch where a unit's 4 pairs are whole words
    /// of codes (`ragged_e4m3`), else f32 rows and a packing launch per pool.
    RaggedE4m3,
}

/// RoPE from an architecture's spec (`RopeTable::from_spec`) through each launch vs
/// `reference::ops::rope::rope_partial` with `spec.inv_freq()` and the attention factor (as
/// `reference::arch::model` calls it): q and k rotated on their first R features, the rest and
/// v passed through. Outputs and pools are NaN-poisoned; pool rows no token owns must stay NaN.
#[derive(Debug, Clone)]
pub struct RopeSpecCase {
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    pub pos0: usize,
    pub kind: RopeKind,
    pub layout: RopeLayout,
    pub path: RopePath,
}

impl Case for RopeSpecCase {
    fn op(&self) -> Op {
        Op::Rope
    }
    fn name(&self) -> String {
        format!(
            "rope_spec(T={},H={},Hkv={},D={},pos0={},{},{:?},{:?},f32)",
            self.t,
            self.h,
            self.hkv,
            self.d,
            self.pos0,
            self.kind.name(),
            self.layout,
            self.path
        )
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, h, hkv, d, p0) = (self.t, self.h, self.hkv, self.d, self.pos0);
        let spec = self.kind.spec(d, self.layout);
        let (omega, m) = (spec.inv_freq(), spec.scaling.attention_factor());
        let width = (h + 2 * hkv) * d;
        let qkv = rand_vec(t * width, 71);
        let part = |lo: usize, n: usize| -> Array3<f32> {
            let v: Vec<f32> = qkv.chunks(width).flat_map(|row| row[lo * d..(lo + n) * d].iter().copied()).collect();
            Array3::from_shape_vec((t, n, d), v).unwrap_or_else(|_| Array3::zeros((t, n, d)))
        };
        let (q_in, mut k, v) = (part(0, h), part(h, hkv), part(h + hkv, hkv));
        let mut q = q_in.clone();
        reference::ops::rope::rope_partial(q.view_mut(), p0, &omega, m, self.layout);
        reference::ops::rope::rope_partial(k.view_mut(), p0, &omega, m, self.layout);
        let q_in: Vec<f32> = q_in.iter().copied().collect();
        let mut want: Vec<f32> = q.iter().copied().collect();
        outcome((|| {
            let table = RopeTable::from_spec(client, p0 + t + 3, d, &spec)?;
            let nan = |n: usize, shape: &[usize]| DeviceTensor::from_f32(client, &vec![f32::NAN; n], shape);
            // Pool rows of the tokens and the pools' row count, for the k / v writing paths.
            let (rows_of, pool_rows): (Vec<usize>, usize) = match self.path {
                RopePath::Into | RopePath::InPlace => {
                    let xd = DeviceTensor::from_f32(client, &q_in, &[t, h, d])?;
                    let got = if self.path == RopePath::InPlace {
                        optimized::kernels::rope_inplace(client, &xd, &table, p0, self.layout)?;
                        xd.to_f32(client)?
                    } else {
                        let out = nan(t * h * d, &[t, h, d])?;
                        rope_into(client, &xd, &table, p0, self.layout, &out)?;
                        out.to_f32(client)?
                    };
                    return Ok(judge(&got, &want, Op::Rope, Dtype::F32));
                }
                RopePath::Cache => ((p0..p0 + t).collect(), p0 + t + 2),
                // Blocks of 16 taken in reverse order (block 0 unused): rows follow the table.
                RopePath::Paged => {
                    let blocks = (p0 + t).div_ceil(16);
                    ((p0..p0 + t).map(|p| (blocks - p / 16) * 16 + p % 16).collect(), (blocks + 1) * 16)
                }
                // Token i's k / v go to pool row (3i + 1) mod rows: not the positions' order.
                RopePath::Ragged | RopePath::RaggedE4m3 => ((0..t).map(|i| (3 * i + 1) % (3 * t + 2)).collect(), 3 * t + 2),
            };
            let n = pool_rows * hkv * d;
            let kv = if self.path == RopePath::RaggedE4m3 { optimized::Dtype::E4M3 } else { optimized::Dtype::F32 };
            let pool = || DeviceTensor::from_f32_as(client, &vec![f32::NAN; n], &[pool_rows, hkv, d], kv);
            let (kp, vp) = (pool()?, pool()?);
            let qkv_d = DeviceTensor::from_f32(client, &qkv, &[t, width])?;
            let qd = match self.path {
                RopePath::Cache => optimized::kernels::rope::qkv_rope_cache(client, &qkv_d, h, hkv, &table, p0, self.layout, &kp, &vp)?,
                RopePath::Paged => {
                    let blocks = (p0 + t).div_ceil(16);
                    let ids: Vec<u32> = (0..blocks).map(|j| (blocks - j) as u32).collect();
                    let tables = optimized::kv_cache::BlockTables::upload(client, &[&ids], &[p0 + t], 16, blocks + 1)?;
                    optimized::kernels::rope::qkv_rope_paged(client, &qkv_d, h, hkv, &table, p0, self.layout, &kp, &vp, &tables)?
                }
                _ => {
                    let pos: Vec<u32> = (0..t).map(|i| (p0 + i) as u32).collect();
                    let slots: Vec<u32> = rows_of.iter().map(|&r| r as u32).collect();
                    let (pos, slots) = (DeviceTensor::from_u32(client, &pos, &[t])?, DeviceTensor::from_u32(client, &slots, &[t])?);
                    optimized::kernels::rope::qkv_rope_ragged(client, &qkv_d, h, hkv, &table, self.layout, &kp, &vp, &pos, &slots)?
                }
            };
            let (kh, vh) = (kp.to_f32(client)?, vp.to_f32(client)?);
            let row_len = hkv * d;
            let untouched =
                |pool: &[f32]| pool.chunks(row_len).enumerate().filter(|(r, _)| !rows_of.contains(r)).all(|(_, row)| row.iter().all(|x| x.is_nan()));
            if !untouched(&kh) || !untouched(&vh) {
                return Ok(Outcome::Fail("wrote a pool row no token owns".into()));
            }
            let mut got = qd.to_f32(client)?;
            if self.path == RopePath::RaggedE4m3 {
                return Ok(e4m3_rows(judge(&got, &want, Op::Rope, Dtype::F32), &[(&kh, &k), (&vh, &v)], &rows_of, row_len));
            }
            for (i, &r) in rows_of.iter().enumerate() {
                got.extend_from_slice(&kh[r * row_len..(r + 1) * row_len]);
                got.extend_from_slice(&vh[r * row_len..(r + 1) * row_len]);
                want.extend(k.slice(ndarray::s![i, .., ..]).iter());
                want.extend(v.slice(ndarray::s![i, .., ..]).iter());
            }
            Ok(judge(&got, &want, Op::Rope, Dtype::F32))
        })())
    }
}

/// q's outcome, then every k / v value of token i in pool row `rows_of[i]` as the reference's
/// E4M3 code of it (`fp8::encode`) — or a neighbouring code where the value lies within 1e-6
/// of a rounding boundary (the device's f32 rotation may differ from the reference's by an ulp).
fn e4m3_rows(q: Outcome, pools: &[(&[f32], &Array3<f32>)], rows_of: &[usize], row_len: usize) -> Outcome {
    use reference::quant::fp8;
    let code_of = |x: f32| fp8::decode(fp8::encode(x));
    let near = |x: f32, have: f32| [x, x * (1.0 + 1e-6), x * (1.0 - 1e-6)].iter().any(|&y| code_of(y).to_bits() == have.to_bits());
    if !matches!(q, Outcome::Pass(_)) {
        return q;
    }
    for (i, &r) in rows_of.iter().enumerate() {
        for (which, (pool, want)) in pools.iter().enumerate() {
            let row = &pool[r * row_len..(r + 1) * row_len];
            for (j, (&have, &x)) in row.iter().zip(want.slice(ndarray::s![i, .., ..]).iter()).enumerate() {
                if !near(x, have) {
                    let kv = if which == 0 { "k" } else { "v" };
                    return Outcome::Fail(format!("token {i} {kv}[{j}]: code value {have:e}, the reference's {:e} (of {x:e})", code_of(x)));
                }
            }
        }
    }
    q
}

/// Every spec kind × layout × launch, at a decode step far into the sequence (D = 64) and a
/// short prefill with D = 24 (R/4 = 6: three rotated pairs).
pub fn spec_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for path in [RopePath::Into, RopePath::InPlace, RopePath::Cache, RopePath::Paged, RopePath::Ragged, RopePath::RaggedE4m3] {
        for kind in RopeKind::ALL {
            for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
                for (t, h, hkv, d, pos0) in [(5, 3, 1, 24, 300), (1, 4, 2, 64, 1000)] {
                    v.push(Box::new(RopeSpecCase { t, h, hkv, d, pos0, kind, layout, path }));
                }
            }
        }
    }
    v
}
