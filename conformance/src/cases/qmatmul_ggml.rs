//! ggml blocks kept as stored on the device (`optimized::kernels::qformat`: Q4_K, Q5_K, Q6_K,
//! Q8_0, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS), every format through every kernel it runs: the decode gemv (T ≤ 8, with the fused
//! epilogues) and dequant + the dense GEMM (T above), via `qlinear_fused_into_tuned`, against
//! `reference_linear(dequant(W), x)`; and the dequantize pass alone against
//! `reference::dequant::dequantize_into` on random blocks (any finite f16 scales, every code
//! and scale byte), bounded by `tolerance::ggml_dequant_ok`. The blocks are random bytes with
//! their f16 scales set (small for the matmuls, so that outputs stay moderate); the reference
//! reads the same bytes. Outputs are NaN-poisoned.

use optimized::config::{KernelConfig, QGemm};
use optimized::kernels::qformat::{self, GgmlKind};
use optimized::kernels::qmatmul::{QLayout, QWeight, QGEMV_MAX_T};
use optimized::{Client, DeviceTensor};
use reference::dequant::{dequantize_into, GgmlType};
use reference::quant::QuantTensor;

use super::matmul::Fusion;
use super::outcome;
use super::qmatmul_kept::{kept_name, run_kept};
use crate::tolerance::{ggml_dequant_ok, GGML_DEQUANT_REASON};
use crate::{rand_vec, Case, Metrics, Op, Outcome};

/// Byte offsets of a block's f16 scales (d, and Q4_K / Q5_K's dmin, Q5_1's m): ggml's layouts.
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    ty.traits().f16_scales
}

/// `n` random blocks of `ty` (salt `salt`): random bytes, then each f16 scale set by `scale`
/// (block index, scale index, a random unit) — finite f16 bits.
fn random_blocks(ty: GgmlType, n: usize, salt: u32, scale: impl Fn(usize, usize, f32) -> u16) -> Vec<u8> {
    let bb = ty.block_bytes();
    let r = rand_vec(n * bb, salt);
    let mut b: Vec<u8> = r.iter().map(|v| ((v * 1.0e4) as i64 & 255) as u8).collect();
    let u = rand_vec(n * 2, salt + 1);
    for (i, blk) in b.chunks_mut(bb).enumerate() {
        for (k, &o) in scale_offsets(ty).iter().enumerate() {
            blk[o..o + 2].copy_from_slice(&scale(i, k, u[2 * i + k]).to_le_bytes());
        }
    }
    b
}

/// Moderate scales for a matmul: d about 2^-10 (Q6_K 2^-12, Q8_0 and IQ4_NL — codes to ±127 —
/// 2^-7, IQ4_XS — ±127 times sub-scales to ±32 — 2^-12), dmin / m half of it, signs mixed, so
/// that outputs are O(1).
fn matmul_scale(ty: GgmlType) -> impl Fn(usize, usize, f32) -> u16 {
    let e = match ty {
        GgmlType::Q6K | GgmlType::IQ4XS => -12,
        GgmlType::Q8_0 | GgmlType::IQ4NL => -7,
        _ => -10,
    };
    move |_, k, u| half::f16::from_f32(2f32.powi(e - k as i32) * (0.5 + u.abs()) * if u < -0.5 { -1.0 } else { 1.0 }).to_bits()
}

fn ggml(ty: GgmlType, out: usize, in_dim: usize, salt: u32, scale: impl Fn(usize, usize, f32) -> u16) -> Result<QuantTensor, String> {
    let bytes = random_blocks(ty, out * in_dim / ty.block_elems(), salt, scale);
    QuantTensor::ggml("w", ty, out, in_dim, bytes).map_err(|e| e.to_string())
}

/// `qlinear` of a ggml weight: `parts` stacked (or, with SwiGLU, two interleaved).
#[derive(Debug, Clone)]
pub struct GgmlMatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub kind: GgmlKind,
    pub parts: usize,
    pub fusion: Fusion,
    /// Above the gemv: the GEMM decoding the blocks in its B tile (`qgemm=fused`,
    /// `qformat::gemm`; skipped where the device has no `wgmma`), not dequant + the GEMM.
    pub fused: bool,
}

impl Case for GgmlMatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let path = match (self.t <= QGEMV_MAX_T, self.fused) {
            (true, _) => "gemv",
            (false, false) => "dequant+gemm",
            (false, true) => "fused gemm",
        };
        kept_name(self.t, self.n_in, self.n_out, self.kind.ty().name(), self.parts, self.fusion, path)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, n_in, n_out, ty) = (self.t, self.n_in, self.n_out, self.kind.ty());
        // The kernel choice this case names: `qgemm=fused` for the fused GEMM, `qgemm=wgmma`
        // (dequant + the GEMM) otherwise, whatever the default.
        let qgemm = if self.fused { QGemm::Fused } else { QGemm::Wgmma };
        let client = &client.with_kernels(KernelConfig { qgemm, ..*client.kernels() });
        let part = |p: usize| ggml(ty, n_out, n_in, 40 + 3 * p as u32, matmul_scale(ty));
        run_kept(client, t, n_in, n_out, self.parts, self.fusion, 21, part, |w| {
            if w.layout != QLayout::Rows {
                return Some(Outcome::Fail(format!("upload: {:?} order, expected the input order", w.layout)));
            }
            if self.fused && t > QGEMV_MAX_T {
                if let Some(why) = qformat::gemm::refusal(client, w) {
                    return Some(Outcome::Skip(format!("the fused ggml GEMM: {why}")));
                }
            }
            None
        })
    }
}

/// A q|k|v stack whose parts differ in format, as a llama-quantize mix writes it (`kinds`:
/// the parts' formats, e.g. Q4_K_M's Q4_K q and k with a Q6_K v): each part kept as stored
/// (`Weight::Parts`), against the reference over the same blocks.
#[derive(Debug, Clone)]
pub struct GgmlPartsCase {
    pub t: usize,
    pub kinds: [GgmlKind; 3],
    pub fusion: Fusion,
}

impl Case for GgmlPartsCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let names: Vec<&str> = self.kinds.iter().map(|k| k.ty().name()).collect();
        let path = if self.t <= QGEMV_MAX_T { "gemv" } else { "dequant+gemm" };
        kept_name(self.t, 512, 40, &names.join("|"), 3, self.fusion, path)
    }
    fn run(&self, client: &Client) -> Outcome {
        let client = &client.with_kernels(KernelConfig { qgemm: QGemm::Wgmma, ..*client.kernels() });
        let part = |p: usize| ggml(self.kinds[p].ty(), 40, 512, 60 + 5 * p as u32, matmul_scale(self.kinds[p].ty()));
        if self.t == 1 && self.fusion == Fusion::None {
            if let Some(o) = parts_refusals(client, &part) {
                return o;
            }
        }
        run_kept(client, self.t, 512, 40, 3, self.fusion, 23, part, |w| {
            (w.layout != QLayout::Rows).then(|| Outcome::Fail(format!("upload: {:?} order, expected the input order", w.layout)))
        })
    }
}

/// What a stack of parts does not take is refused by name, never computed wrong: a gating
/// epilogue, an output of another shape. `None` where both are.
fn parts_refusals(client: &Client, part: &dyn Fn(usize) -> Result<QuantTensor, String>) -> Option<Outcome> {
    use optimized::kernels::matmul::Fuse;
    use optimized::kernels::qmatmul::parts::parts_into;
    let ws: Vec<QWeight> = match (0..3).map(|p| part(p).map_err(optimized::Error::Shape).and_then(|q| QWeight::upload(client, &[&q]))).collect() {
        Ok(ws) => ws,
        Err(e) => return Some(Outcome::Fail(format!("upload: {e}"))),
    };
    let x = DeviceTensor::empty_f32(client, &[1, 512]);
    match parts_into(client, &x, &ws, &DeviceTensor::empty_f32(client, &[1, 60]), &Fuse { glu: true, ..Fuse::default() }) {
        Err(optimized::Error::Unsupported(m)) if m.contains("gating") => {}
        other => return Some(Outcome::Fail(format!("a gated stack of parts not refused: {other:?}"))),
    }
    match parts_into(client, &x, &ws, &DeviceTensor::empty_f32(client, &[1, 119]), &Fuse::default()) {
        Err(optimized::Error::Shape(m)) if m.contains("120") => None,
        other => Some(Outcome::Fail(format!("an output of 119 columns for 120 rows not refused: {other:?}"))),
    }
}

/// The dequantize pass alone on random blocks (seed `seed`): any finite f16 scales (normal,
/// subnormal, zero, negative; Q4_K / Q5_K's dmin too), every code and scale byte.
#[derive(Debug, Clone)]
pub struct GgmlDequantCase {
    pub kind: GgmlKind,
    pub rows: usize,
    pub blocks: usize,
    pub seed: u32,
}

/// Random finite f16 bits (exponent 31 — ∞ and NaN — moved to 30).
fn any_finite_f16(u: f32) -> u16 {
    let b = ((u * 1.0e6) as i64 & 0xFFFF) as u16;
    if (b >> 10) & 31 == 31 {
        b & !(1 << 10)
    } else {
        b
    }
}

impl Case for GgmlDequantCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!("qdequant(rows={},blocks={},{},seed={})", self.rows, self.blocks, self.kind.ty().name(), self.seed)
    }
    fn run(&self, client: &Client) -> Outcome {
        let ty = self.kind.ty();
        let (out, in_dim) = (self.rows, self.blocks * ty.block_elems());
        let q = match ggml(ty, out, in_dim, 1000 + self.seed, |_, _, u| any_finite_f16(u)) {
            Ok(q) => q,
            Err(e) => return Outcome::Fail(format!("reference blocks: {e}")),
        };
        let QuantTensor::Ggml { bytes, .. } = &q else {
            return Outcome::Fail("reference blocks: not ggml".into());
        };
        let want = q.dequant();
        // The products (d·sc)·q alone: the same blocks with dmin zeroed (Q4_K / Q5_K).
        let mut no_min = bytes.clone();
        if let [_, m] = scale_offsets(ty) {
            no_min.chunks_mut(ty.block_bytes()).for_each(|b| b[*m..*m + 2].fill(0));
        }
        let mut product = Vec::new();
        dequantize_into(ty, &no_min, &mut product);
        outcome((|| {
            let w = QWeight::upload(client, &[&q])?;
            let dst = DeviceTensor::from_f32(client, &vec![f32::NAN; out * in_dim], &[out, in_dim])?;
            qformat::dequant_into(client, &w, &dst)?;
            let got = dst.to_f32(client)?;
            if got.len() != want.len() {
                return Ok(Outcome::Fail(format!("length {} != {}", got.len(), want.len())));
            }
            let mut max_abs = 0f64;
            for (i, ((&g, &wv), &p)) in got.iter().zip(&want).zip(&product).enumerate() {
                if !ggml_dequant_ok(g, wv, p) {
                    return Ok(Outcome::Fail(format!("element {i}: {g} vs the reference's {wv} ({GGML_DEQUANT_REASON})")));
                }
                max_abs = max_abs.max(((g as f64) - (wv as f64)).abs());
            }
            Ok(Outcome::Pass(Metrics { max_abs, nmse: 0.0, n: got.len() }))
        })())
    }
}

/// Step sizes of the quantized GEMM (issue 51's 16–512 rows) the grid covers beyond the gemv.
pub const GEMM_STEPS: [usize; 4] = [16, 64, 128, 512];

/// The quantized GEMM's steps (16, 64, 128, 512 rows) for every format, K and N at block and
/// tile edges: K one block, three, 17 (an odd count); N one past a 64-wide tile, one past a
/// 128-wide one, a whole tile. 512 rows only at the smaller K (software runtimes stay quick).
pub fn gemm_step_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for kind in GgmlKind::ALL {
        let b = kind.ty().block_elems();
        for t in GEMM_STEPS {
            for (n_in, n_out) in [(b, 65usize), (3 * b, 129), (17 * b, 64)] {
                if t > 128 && n_in > 3 * b {
                    continue;
                }
                for fused in [false, true] {
                    v.push(Box::new(GgmlMatmulCase { t, n_in, n_out, kind, parts: 1, fusion: Fusion::None, fused }));
                }
            }
        }
        // The fused GEMM's SwiGLU / GELU epilogues and its split-K sum (a long K over few tiles).
        for fusion in [Fusion::Glu, Fusion::GeluGlu] {
            v.push(Box::new(GgmlMatmulCase { t: 16, n_in: 256, n_out: 20, kind, parts: 1, fusion, fused: true }));
        }
        v.push(Box::new(GgmlMatmulCase { t: 64, n_in: 32 * 256, n_out: 64, kind, parts: 1, fusion: Fusion::None, fused: true }));
    }
    v
}

/// The whole grid: [`gemm_step_cases`], then [`grid_cases`].
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v = gemm_step_cases();
    v.extend(grid_cases());
    v
}

/// Every format through the gemv and dequantize + GEMM at block-edge shapes, the fusions, and
/// the dequantize pass on random blocks (the grid without the GEMM's step sizes).
pub fn grid_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for kind in GgmlKind::ALL {
        // in: one block, two, 17 (4352: a row of an odd count of blocks); out: 1, odd, not a
        // multiple of the 4 rows per group; the 32-value formats also at one block and three.
        let mut shapes = vec![(256usize, 1usize), (256, 7), (512, 33), (4352, 5), (1024, 130)];
        if kind.ty().block_elems() == 32 {
            shapes.extend([(32, 3), (96, 5)]);
        }
        for t in [1usize, 2, 8, 9, 64, 300] {
            for &(n_in, n_out) in &shapes {
                if t > 64 && n_in > 1024 {
                    continue;
                }
                v.push(Box::new(GgmlMatmulCase { t, n_in, n_out, kind, parts: 1, fusion: Fusion::None, fused: false }));
            }
        }
        // Stacked like q|k|v; the gemv's fusions (T ≤ 8) and SwiGLU after dequant + GEMM.
        v.push(Box::new(GgmlMatmulCase { t: 1, n_in: 512, n_out: 48, kind, parts: 3, fusion: Fusion::None, fused: false }));
        for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual, Fusion::GeluGlu] {
            for (t, n_in, n_out) in [(1usize, 512usize, 37usize), (3, 4352, 9), (9, 256, 20)] {
                if t <= QGEMV_MAX_T || fusion.glu() && fusion != Fusion::NormGlu {
                    v.push(Box::new(GgmlMatmulCase { t, n_in, n_out, kind, parts: 1, fusion, fused: false }));
                }
            }
        }
        for seed in 0..4u32 {
            v.push(Box::new(GgmlDequantCase { kind, rows: 3 + seed as usize, blocks: 1 + 2 * seed as usize, seed }));
        }
    }
    // Mixed stacks: Q4_K_M's and Q5_K_M's q|k|v, and the 32-value fallbacks of a small width's.
    use GgmlKind::*;
    for kinds in [[Q4K, Q4K, Q6K], [Q5K, Q5K, Q6K], [Q5_0, Q5_0, Q8_0]] {
        for (t, fusion) in [(1, Fusion::None), (1, Fusion::Norm), (3, Fusion::Norm), (9, Fusion::None), (64, Fusion::None)] {
            v.push(Box::new(GgmlPartsCase { t, kinds, fusion }));
        }
    }
    v
}
