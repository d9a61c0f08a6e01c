//! `qmatmul(T, in, out, scheme)`: `optimized::kernels::qmatmul::qlinear_into` (fused dequant
//! gemv for T ≤ 8, dequant + GEMM above) vs `reference::ops::qmatmul::qlinear`, i.e.
//! `reference_linear(dequant(W), x)`. The weight is quantized once by the reference; the kernel
//! reads those exact bytes, and dequantization is exact on both sides, so the bound is the f32
//! matmul's (only summation order differs). `parts > 1` stacks that many row blocks on upload
//! (as the model stacks Wq | Wk | Wv). `fusion` as in `matmul.rs` ([`Fusion`]); with SwiGLU
//! two parts are uploaded with rows interleaved (`QWeight::upload_glu`, as the model uploads
//! gate and up), want `swiglu(qlinear(x, gate), qlinear(x, up))`. Outputs are NaN-poisoned.

use ndarray::Array2;
use optimized::kernels::matmul::tc::{self, TcConfig, TcMode};
use optimized::kernels::matmul::tc_wg::WgConfig;
use optimized::kernels::matmul::GluAct;
use optimized::kernels::qmatmul::v4::MmaTune;
use optimized::kernels::qmatmul::v5;
use optimized::kernels::qmatmul::{
    default_prefetch, default_rpg, qlinear_fused_into_tuned, Fp4Decode, GemvTune, Int8Decode, Prefetch, QFormat, QLayout, QWeight, QGEMV_MAX_T,
    V5_STAGES,
};
use optimized::Client;
use reference::quant::{Granularity, QuantTensor, Scheme};

use super::matmul::{scale_per_row, Fusion, TcCase, TcWeight};
use super::{outcome, outcome_or_skip};
use crate::tolerance::tc_tolerance;
use crate::{compare, rand_vec, round_to, tolerance, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct QMatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scheme: Scheme,
    pub parts: usize,
    /// Device order (gemv v1 over `Rows`, v2 over `Tiles`).
    pub layout: QLayout,
    /// gemv v2: what is loaded one tile ahead.
    pub prefetch: Prefetch,
    /// gemv v2, mxfp4 / Q4: how 4-bit values are decoded.
    pub fp4: Fp4Decode,
    /// gemv v2, int8: how bytes are decoded.
    pub int8: Int8Decode,
    /// What the gemv fuses; with SwiGLU, two parts (gate, up) uploaded with interleaved rows.
    pub fusion: Fusion,
    /// gemv v4 (the `Mma` order): row blocks per plane, loads in flight, planes per row.
    pub mma: MmaTune,
    /// gemv v1 / v2 / v5: rows per unit group (`None`: the format's default) and planes per
    /// row (`None`: chosen to fill the device) — what `qmatmul::knobs` may choose in a model.
    pub rpg: Option<usize>,
    pub split: Option<usize>,
    /// The tiled order with this device's own choices (prefetch, int8 / fp4 decode: what
    /// `GemvTune::default_for` gives the weight as uploaded here — what a model runs) instead
    /// of the fixed `prefetch` / `int8` / `fp4`.
    pub device: bool,
}

impl QMatmulCase {
    /// A case with gemv v2's default choices on a CUDA-class device (prefetch as
    /// `default_prefetch`, fp4 pairs, int8 subnormal).
    pub fn new(t: usize, n_in: usize, n_out: usize, scheme: Scheme, parts: usize, layout: QLayout) -> Self {
        let c = Self {
            t,
            n_in,
            n_out,
            scheme,
            parts,
            layout,
            prefetch: Prefetch::Off,
            fp4: Fp4Decode::Pairs,
            int8: Int8Decode::Subnormal,
            fusion: Fusion::None,
            mma: MmaTune::default(),
            rpg: None,
            split: None,
            device: false,
        };
        Self { prefetch: default_prefetch(c.format(), n_in), ..c }
    }

    /// The case on the tiled order with the device's own choices ([`Self::device`]).
    pub fn on_device(self) -> Self {
        Self { device: true, ..self }
    }

    fn format(&self) -> QFormat {
        match self.scheme {
            Scheme::Int8(g) => QFormat::Int8 { group: g.group_len(self.n_in) },
            Scheme::Mxfp4 => QFormat::Mxfp4,
            Scheme::Q4_0 => QFormat::Q4 { offset: false },
            Scheme::Q4_1 => QFormat::Q4 { offset: true },
            // FP8's cases are `qmatmul_fp8`'s (per-channel scales: a scale per row).
            Scheme::Fp8 => QFormat::Fp8 { srows: 1, scols: self.n_in },
        }
    }
}

/// A 4-bit scheme (mxfp4, Q4_0, Q4_1): 32 values a 16-byte chunk, decoded by table or f16 pairs.
pub(crate) fn nibbles(s: Scheme) -> bool {
    matches!(s, Scheme::Mxfp4 | Scheme::Q4_0 | Scheme::Q4_1)
}

/// GGUF's Q4 formats: the tiled order only (the input order is refused: a skip, with the reason).
fn tiles_only(s: Scheme) -> bool {
    matches!(s, Scheme::Q4_0 | Scheme::Q4_1)
}

impl Case for QMatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let p = match (self.fusion.glu(), self.parts) {
            (false, n) if n > 1 => format!(",stacked×{n}{}", self.fusion.tag()),
            _ => self.fusion.tag().to_string(),
        };
        let v = match self.layout {
            QLayout::Rows => "rows/v1".to_string(),
            QLayout::Tiles if self.device => "tiles/device".to_string(),
            QLayout::Tiles => {
                let fp4 = if nibbles(self.scheme) { format!(",fp4-{:?}", self.fp4) } else { format!(",int8-{:?}", self.int8) }.to_lowercase();
                let pre = match self.prefetch {
                    Prefetch::Off => "v2,no-prefetch".to_string(),
                    Prefetch::W => "v2,prefetch-w".to_string(),
                    Prefetch::WX => "v2,prefetch-wx".to_string(),
                    Prefetch::Pipelined => "v2,pipelined/v3".to_string(),
                    Prefetch::Async(s) => format!("v5,cp.async×{s}"),
                };
                format!("tiles/{pre}{fp4}")
            }
            QLayout::Mma => {
                let MmaTune { blocks, depth, split, prefetch } = self.mma;
                let split = split.map_or(String::new(), |s| format!(",split={s}"));
                let pre = if prefetch { ",prefetch" } else { "" };
                format!("mma/v4,blocks={blocks},depth={depth}{split}{pre}")
            }
        };
        let rpg = self.rpg.map_or(String::new(), |r| format!(",rpg={r}"));
        let split = self.split.map_or(String::new(), |s| format!(",split={s}"));
        format!("qmatmul(T={},in={},out={},{}{p},{v}{rpg}{split})", self.t, self.n_in, self.n_out, self.scheme)
    }
    /// Rows per group other than the format's default: a launch choice that measured no faster
    /// (an H200 sweep of 2, 4 and 8), kept for `--features lab`.
    fn lab(&self) -> bool {
        self.rpg.is_some_and(|r| r != default_rpg(self.format()))
    }
    fn run(&self, client: &Client) -> Outcome {
        // gemv v5 where the device has no cp.async: skipped (with the reason) before any work.
        if let (QLayout::Tiles, Prefetch::Async(stages), false) = (self.layout, self.prefetch, self.device) {
            if let Err(optimized::Error::Unsupported(why)) = v5::require(client, stages) {
                return Outcome::Skip(why);
            }
        }
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        let x = rand_vec(t * n_in, 21);
        let glu = self.fusion.glu();
        let nparts = if glu { 2 } else { self.parts.max(1) };
        let parts: Result<Vec<QuantTensor>, _> = (0..nparts)
            .map(|p| {
                // Rows of different magnitude per part and per row, so scales differ.
                let w: Vec<f32> = rand_vec(n_out * n_in, 22 + p as u32).iter().enumerate().map(|(i, v)| v * (1.0 + (i / n_in % 7) as f32)).collect();
                self.scheme.quantize(&w, n_out, n_in)
            })
            .collect();
        let parts = match parts {
            Ok(p) => p,
            Err(e) => return Outcome::Fail(format!("reference quantize: {e}")),
        };
        let refs: Vec<&QuantTensor> = parts.iter().collect();
        let uploaded = match (glu, &refs[..]) {
            (true, [g, u]) => QWeight::upload_glu(client, g, u, Some(self.layout)),
            _ => QWeight::upload_as(client, &refs, Some(self.layout)),
        };
        let w = match uploaded {
            Ok(w) => w,
            Err(optimized::Error::Unsupported(why)) => return Outcome::Skip(why),
            Err(e) => return Outcome::Fail(format!("upload: {e}")),
        };
        // The weight's rows: parts stacked (y = [y_0 | y_1 | ..] along out), or with SwiGLU
        // gate and up interleaved (columns 2j, 2j + 1).
        let rows = n_out * parts.len();
        // Above the gemv's T, tc v1 takes the weight where the device has tensor cores: it
        // rounds x (and int8-group / mxfp4 weights) to its 16-bit type, and the reference
        // multiplies the same rounded values (`tolerance::tc_tolerance`).
        // So does an unfused step of more rows than the configured crossover (`qgemv-rows`).
        let unfused = matches!(self.fusion, Fusion::None | Fusion::Glu | Fusion::GeluGlu);
        let gemm = t > QGEMV_MAX_T || (unfused && t > client.kernels().qgemv_rows);
        let tc_path = gemm && tc::quant_applies(client, &w);
        let e = match tc::quant_dtype(client, TcMode::Tensor) {
            optimized::Dtype::F16 => Dtype::F16,
            _ => Dtype::BF16,
        };
        let lin = |inp: &[f32]| -> Result<Array2<f32>, String> {
            let inp = if tc_path { round_to(inp, e) } else { inp.to_vec() };
            let xa = Array2::from_shape_vec((t, n_in), inp).map_err(|e| e.to_string())?;
            let mut y = Array2::<f32>::zeros((t, rows));
            for (pi, p) in parts.iter().enumerate() {
                let yp = if tc_path {
                    let deq = p.dequant();
                    let wr = if scale_per_row(self.scheme, n_in) { deq } else { round_to(&deq, e) };
                    let wa = Array2::from_shape_vec((n_out, n_in), wr).map_err(|e| e.to_string())?;
                    reference::ops::matmul::linear(xa.view(), wa.view()).map_err(|e| e.to_string())?
                } else {
                    reference::ops::qmatmul::qlinear(xa.view(), p).map_err(|e| e.to_string())?
                };
                place_part(&mut y, &yp, pi, glu);
            }
            Ok(y)
        };
        let io = match self.fusion.io(t, n_in, rows, &x, lin) {
            Ok(io) => io,
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        let fixed = self.layout == QLayout::Tiles && !self.device;
        if fixed && nibbles(self.scheme) && self.fp4 == Fp4Decode::Pairs && !w.pairs {
            return Outcome::Skip(
                "the f16-pair 4-bit decode is not exact on this device (no f16, or its u32 → f16×2 bitcast failed the probe)".into(),
            );
        }
        if fixed && !nibbles(self.scheme) && self.int8 == Int8Decode::Subnormal && !w.subnormal {
            return Outcome::Skip("the subnormal int8 decode is not exact on this device (subnormal f32s flushed: the probe failed)".into());
        }
        // A fixed choice the format cannot take (the mantissa decode on mxfp4) is a skip with
        // the kernel's reason; what the device picks itself must run.
        let finish = if fixed { outcome_or_skip } else { outcome };
        finish((|| {
            let tune = if self.device {
                let d = GemvTune::default_for(client, &w);
                GemvTune { rpg: self.rpg.unwrap_or(d.rpg), split: self.split, ..d }
            } else {
                GemvTune {
                    rpg: self.rpg.unwrap_or(default_rpg(w.format)),
                    split: self.split,
                    prefetch: self.prefetch,
                    fp4: self.fp4,
                    int8: self.int8,
                    mma: self.mma,
                }
            };
            let y =
                self.fusion.run_device(client, t, n_in, rows, &x, &io, |xd, yd, fuse| qlinear_fused_into_tuned(client, xd, &w, yd, &tune, fuse))?;
            let (tol, _) = if tc_path { tc_tolerance() } else { tolerance(Op::Matmul, Dtype::F32) };
            Ok(match compare(&y, &io.want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// The formats of the grids: int8 per channel and in groups of 32 (Q8_0's) and 128, mxfp4, Q4_0, Q4_1.
const SCHEMES: [Scheme; 6] = [
    Scheme::Int8(Granularity::PerChannel),
    Scheme::Int8(Granularity::Group(32)),
    Scheme::Int8(Granularity::Group(128)),
    Scheme::Mxfp4,
    Scheme::Q4_0,
    Scheme::Q4_1,
];

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let schemes = SCHEMES;
    // A fixed choice over the tiled order runs int8 with both decodes (the magic one is the
    // fallback where subnormals are flushed).
    let push = |v: &mut Vec<Box<dyn Case>>, c: QMatmulCase| {
        if c.layout == QLayout::Tiles && !nibbles(c.scheme) && !c.device {
            v.push(Box::new(QMatmulCase { int8: Int8Decode::Magic, ..c.clone() }));
        }
        v.push(Box::new(c));
    };
    // The grid over the tiled order runs what a model runs on the device at hand (v5's
    // cp.async ring and the subnormal decode on an H200, v2 with the magic decode where
    // neither exists); the other choices run on the decode shapes below.
    let push_grid = |v: &mut Vec<Box<dyn Case>>, c: QMatmulCase| {
        let c = if c.layout == QLayout::Tiles { c.on_device() } else { c };
        push(v, c);
    };
    for layout in [QLayout::Rows, QLayout::Tiles] {
        for scheme in schemes.into_iter().filter(|&s| layout == QLayout::Tiles || !tiles_only(s)) {
            let mut add = |t, n_in, n_out, parts| push_grid(&mut v, QMatmulCase::new(t, n_in, n_out, scheme, parts, layout));
            for t in [1usize, 3, 8, 9, 33] {
                for (n_in, n_out) in [(128, 48), (256, 1031), (1536, 576), (640, 7)] {
                    add(t, n_in, n_out, 1);
                }
            }
            // Stacked like the model's q|k|v, and a decode-sized layer (TinyLlama's MLP).
            add(1, 256, 96, 3);
            add(1, 2048, 5632, 1);
            // Few long rows: the gemv splits each row over several planes.
            add(2, 8192, 40, 1);
            // Rows whose last tile is partial (v2): SmolLM2's 576, GPT-OSS's 2880, TinyLlama's
            // 5632 (fp4 tiles are 1024 inputs), prefill too.
            // (2944 and 640 where groups of 128 must divide in.)
            let g128 = scheme == Scheme::Int8(Granularity::Group(128));
            for (t, n_in) in [(1usize, if g128 { 640 } else { 576 }), (1, if g128 { 2944 } else { 2880 }), (2, 5632), (17, 2944)] {
                add(t, n_in, 72, 1);
            }
            // The decode gemv's fusions (T ≤ 8; 8192 inputs: rows split over planes); SwiGLU
            // after dequant + GEMM too (T = 9).
            // GELU-tanh gating (Gemma): in the gemvs' and (T = 9 where the device has tensor
            // cores) the GEMM's epilogue; the sums, then the pairs kernel, elsewhere.
            for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual, Fusion::GeluGlu, Fusion::NormGeluGlu] {
                for (t, n_in, n_out) in [(1usize, 256usize, 96usize), (3, 1536, 577), (2, 8192, 20), (9, 256, 40)] {
                    if t <= 8 || matches!(fusion, Fusion::Glu | Fusion::GeluGlu) {
                        push_grid(&mut v, QMatmulCase { fusion, ..QMatmulCase::new(t, n_in, n_out, scheme, 1, layout) });
                    }
                }
            }
        }
    }
    // Each fixed choice of the tiled gemvs (every prefetch — v5's default ring included —
    // with both int8 decodes; for mxfp4 also the shared-table decode) on decode shapes with
    // full and partial last tiles: what another device's default or an audit step runs.
    for scheme in schemes {
        let g128 = scheme == Scheme::Int8(Granularity::Group(128));
        for (t, n_in, n_out) in [
            (1usize, 256usize, 1031usize),
            (3, 1536, 576),
            (1, if g128 { 640 } else { 576 }, 72),
            (2, 5632, 72),
            (1, if g128 { 2944 } else { 2880 }, 72),
        ] {
            let c = QMatmulCase::new(t, n_in, n_out, scheme, 1, QLayout::Tiles);
            let fp4s: &[Fp4Decode] = match scheme {
                Scheme::Q4_0 | Scheme::Q4_1 => &[Fp4Decode::Table, Fp4Decode::Pairs, Fp4Decode::Mantissa],
                Scheme::Mxfp4 => &[Fp4Decode::Table, Fp4Decode::Pairs],
                Scheme::Int8(_) | Scheme::Fp8 => &[Fp4Decode::Pairs],
            };
            for &fp4 in fp4s {
                // gemv v3 (pipelined) and v5 (cp.async ring, other slot counts) are int8 only.
                let v3: &[Prefetch] = if nibbles(scheme) {
                    &[]
                } else {
                    &[Prefetch::Pipelined, Prefetch::Async(V5_STAGES), Prefetch::Async(3), Prefetch::Async(4), Prefetch::Async(8)]
                };
                for &prefetch in [Prefetch::Off, Prefetch::W, Prefetch::WX].iter().chain(v3) {
                    push(&mut v, QMatmulCase { prefetch, fp4, ..c.clone() });
                }
            }
        }
    }
    // The launch choices a model's gemvs may take (planes per row 1 / 2 / 4 or chosen; rows
    // per group 2 / 8 beside the default 4 only with `--features lab`: `qmatmul::knobs`) on
    // the device's own kernels (per-channel int8, int8 groups, mxfp4), with the norm + SwiGLU
    // and residual fusions, full and partial row groups; and v5's three-slot ring (lab).
    for (scheme, prefetch, device) in [
        (schemes[0], Prefetch::Async(V5_STAGES), true),
        (schemes[0], Prefetch::Async(3), false),
        (schemes[2], Prefetch::Off, true),
        (Scheme::Mxfp4, Prefetch::W, true),
        (Scheme::Q4_1, Prefetch::W, true),
    ] {
        for rpg in [2usize, 4, 8] {
            for split in [None, Some(1), Some(2), Some(4)] {
                if rpg == 4 && split.is_none() {
                    continue;
                }
                for (t, n_in, n_out, fusion) in [(1usize, 2048usize, 577usize, Fusion::NormGlu), (3, 4096, 96, Fusion::Residual)] {
                    push(
                        &mut v,
                        QMatmulCase {
                            fusion,
                            prefetch,
                            rpg: Some(rpg),
                            split,
                            device,
                            ..QMatmulCase::new(t, n_in, n_out, scheme, 1, QLayout::Tiles)
                        },
                    );
                }
            }
        }
    }
    // gemv v4 (tensor cores; per-channel int8, rows in blocks of 16, inputs in chunks of 32):
    // T = 1..8 (one or two B fragments) and the dequant + GEMM above, stacked, few long rows
    // (planes split), every fusion, and each launch choice. Skipped where there is no mma.
    let int8 = Scheme::Int8(Granularity::PerChannel);
    let mma = |t, n_in, n_out, parts| QMatmulCase::new(t, n_in, n_out, int8, parts, QLayout::Mma);
    for t in [1usize, 2, 3, 4, 5, 8, 9] {
        for (n_in, n_out) in [(128usize, 48usize), (256, 1040), (1536, 576), (640, 16), (4096, 64)] {
            v.push(Box::new(mma(t, n_in, n_out, 1)));
        }
    }
    v.push(Box::new(mma(1, 256, 96, 3)));
    v.push(Box::new(mma(1, 2048, 5632, 1)));
    v.push(Box::new(mma(2, 8192, 32, 1)));
    v.push(Box::new(mma(1, 14336, 64, 1)));
    for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual] {
        for (t, n_in, n_out) in [(1usize, 256usize, 96usize), (3, 1536, 576), (2, 8192, 32), (5, 576, 48), (9, 256, 48)] {
            if t <= 8 || fusion == Fusion::Glu {
                v.push(Box::new(QMatmulCase { fusion, ..mma(t, n_in, n_out, 1) }));
            }
        }
    }
    for blocks in [1usize, 2, 4] {
        for depth in [1usize, 2, 4] {
            for split in [None, Some(1), Some(16)] {
                for prefetch in [false, true] {
                    let tune = MmaTune { blocks, depth, split, prefetch };
                    if tune != MmaTune::default() {
                        for (t, n_in, n_out, fusion) in
                            [(1usize, 1536usize, 576usize, Fusion::None), (3, 576, 80, Fusion::NormGlu), (4, 2048, 48, Fusion::Residual)]
                        {
                            v.push(Box::new(QMatmulCase { fusion, mma: tune, ..mma(t, n_in, n_out, 1) }));
                        }
                    }
                }
            }
        }
    }
    // What v4 cannot take: reported as skipped, with the reason.
    v.push(Box::new(mma(1, 256, 1031, 1)));
    v.push(Box::new(mma(1, 48, 16, 1)));
    v.push(Box::new(QMatmulCase::new(1, 256, 48, Scheme::Int8(Granularity::Group(32)), 1, QLayout::Mma)));
    // Rows the 16-byte int8 reader cannot split: reported as skipped, with the reason.
    v.push(Box::new(QMatmulCase::new(1, 40, 8, Scheme::Int8(Granularity::PerChannel), 1, QLayout::Tiles)));
    // int8 groups that are not a power of two cannot take the tiled order: skipped, with the
    // reason (the model uploads them in input order).
    v.push(Box::new(QMatmulCase::new(1, 96, 8, Scheme::Int8(Granularity::Group(48)), 1, QLayout::Tiles)));
    v.push(Box::new(QMatmulCase::new(1, 96, 8, Scheme::Int8(Granularity::Group(48)), 1, QLayout::Rows)));
    // The mantissa decode reads Q4 codes, not e2m1: refused (a skip, with the reason).
    v.push(Box::new(QMatmulCase { fp4: Fp4Decode::Mantissa, ..QMatmulCase::new(1, 256, 8, Scheme::Mxfp4, 1, QLayout::Tiles) }));
    // Q4 in input order (gemv v1 does not read it): skipped, with the reason.
    v.push(Box::new(QMatmulCase::new(1, 256, 8, Scheme::Q4_0, 1, QLayout::Rows)));
    v.extend(tc_cases());
    v
}

/// tc v1 over quantized weights (the dequantization in its tile loads), called directly:
/// every format and order it takes at M = 9, 17, 127, 513 with rows whose last tiled-order
/// tile is partial (int8 576 / 640, mxfp4 and Q4 2880) and N off the tile; every tile preset (the unpicked ones: lab); the
/// emulated tiles (lavapipe); and the orders it refuses (skipped, with the reason). The grid's
/// T = 9 / 17 / 33 cases above reach it through `qlinear` wherever the device has tensor cores.
pub fn tc_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let schemes = SCHEMES;
    for scheme in schemes {
        let layouts: &[QLayout] = if nibbles(scheme) { &[QLayout::Tiles] } else { &[QLayout::Rows, QLayout::Tiles] };
        let g128 = scheme == Scheme::Int8(Granularity::Group(128));
        let mx = nibbles(scheme);
        for &layout in layouts {
            let q = |t, n_in, n_out, mode| TcCase::new(t, n_in, n_out, TcWeight::Quant(scheme, layout), mode);
            for (t, n_in, n_out) in [
                (5usize, 256usize, 72usize),
                (9, 256, 72),
                (
                    17,
                    if mx {
                        2880
                    } else if g128 {
                        640
                    } else {
                        576
                    },
                    130,
                ),
                (127, 1536, 200),
                (513, if g128 { 384 } else { 320 }, 1031),
            ] {
                v.push(Box::new(q(t, n_in, n_out, TcMode::Tensor)));
            }
            v.push(Box::new(TcCase { glu: true, ..q(33, 512, 258, TcMode::Tensor) }));
            // GELU-tanh gating in the epilogue (after the per-channel scales).
            v.push(Box::new(q(33, 512, 258, TcMode::Tensor).gated(GluAct::GeluTanh)));
            // Emulated (lavapipe-sized tiles): a partial last tile of the tiled order.
            v.push(Box::new(TcCase {
                config: Some(TcConfig::T32X32),
                ..q(
                    17,
                    if mx {
                        1088
                    } else if g128 {
                        640
                    } else {
                        576
                    },
                    40,
                    TcMode::Emulated,
                )
            }));
            v.push(Box::new(TcCase { config: Some(TcConfig::T32X32), glu: true, ..q(9, 256, 40, TcMode::Emulated) }));
            v.push(Box::new(TcCase { config: Some(TcConfig::T32X32), ..q(9, 256, 40, TcMode::Emulated) }.gated(GluAct::GeluTanh)));
        }
        for config in TcConfig::ALL {
            v.push(Box::new(TcCase { config: Some(config), ..TcCase::new(300, 512, 520, TcWeight::Quant(scheme, QLayout::Tiles), TcMode::Tensor) }));
        }
        for config in TcConfig::VARIANTS.iter().filter(|c| c.pipe) {
            v.push(Box::new(TcCase { config: Some(*config), ..TcCase::new(300, 512, 520, TcWeight::Quant(scheme, QLayout::Tiles), TcMode::Tensor) }));
        }
        v.push(Box::new(TcCase {
            config: Some(TcConfig::T32X32.with_pipe()),
            ..TcCase::new(20, 640, 40, TcWeight::Quant(scheme, QLayout::Tiles), TcMode::Emulated)
        }));
        // Split-K (per-channel scales and SwiGLU or GELU-tanh gating applied after the partial
        // sums are added).
        for act in [None, Some(GluAct::Silu), Some(GluAct::GeluTanh)] {
            let gate = |c: TcCase| match act {
                Some(a) => c.gated(a),
                None => c,
            };
            v.push(Box::new(gate(TcCase {
                config: Some(TcConfig::T32X32.with_splits(3)),
                ..TcCase::new(20, 640, 40, TcWeight::Quant(scheme, QLayout::Tiles), TcMode::Emulated)
            })));
            v.push(Box::new(gate(TcCase {
                config: Some(TcConfig::T128X128.with_splits(3)),
                ..TcCase::new(127, 2048, 200, TcWeight::Quant(scheme, QLayout::Tiles), TcMode::Tensor)
            })));
        }
    }
    // tc v3 over quantized weights (`wgmma`, sm_90a; skipped elsewhere with the reason): one
    // row and partial M and N tiles, a partial last tile of the tiled order (int8 576 / 640,
    // mxfp4 2880) and K past the last k-block, several tiles each way, the SwiGLU epilogue, 3
    // and 5 stages, split-K with an uneven last slice (per-channel scales and SwiGLU after the
    // sum); int8 groups that are not a power of two are refused (skipped, with the reason).
    for scheme in schemes {
        let layouts: &[QLayout] = if nibbles(scheme) { &[QLayout::Tiles] } else { &[QLayout::Rows, QLayout::Tiles] };
        let g128 = scheme == Scheme::Int8(Granularity::Group(128));
        let mx = nibbles(scheme);
        for &layout in layouts {
            let wg = |t, n_in, n_out, glu, cfg: WgConfig| {
                Box::new(TcCase { glu, wg: Some(cfg), ..TcCase::new(t, n_in, n_out, TcWeight::Quant(scheme, layout), TcMode::Tensor) })
                    as Box<dyn Case>
            };
            let odd_k = if mx {
                2880
            } else if g128 {
                640
            } else {
                576
            };
            for (t, n_in, n_out) in
                [(1usize, 256usize, 72usize), (33, odd_k, 130), (127, 1536, 200), (300, 512, 520), (513, if g128 { 384 } else { 320 }, 1031)]
            {
                v.push(wg(t, n_in, n_out, false, WgConfig::F4));
            }
            v.push(wg(130, 512, 258, true, WgConfig::F4));
            v.push(wg(300, odd_k, 520, false, WgConfig::F5));
            v.push(wg(200, 1024, 136, false, WgConfig::F4.with_stages(3)));
            for glu in [false, true] {
                v.push(wg(127, 2048, 200, glu, WgConfig::F4.with_splits(3)));
            }
            // GELU-tanh gating: tc v3's epilogue (after the per-channel scales) and split-K's
            // reduce.
            for (t, n_in, n_out, cfg) in [(130usize, 512usize, 258usize, WgConfig::F4), (127, 2048, 200, WgConfig::F4.with_splits(3))] {
                v.push(Box::new(
                    TcCase { wg: Some(cfg), ..TcCase::new(t, n_in, n_out, TcWeight::Quant(scheme, layout), TcMode::Tensor) }.gated(GluAct::GeluTanh),
                ));
            }
            // tc v4 (decoder warps, A by TMA, mbarriers): the same edges, 2 and 4 stages.
            for (t, n_in, n_out) in [(1usize, 256usize, 72usize), (33, odd_k, 130), (300, 512, 520), (513, if g128 { 384 } else { 320 }, 1031)] {
                v.push(wg(t, n_in, n_out, false, WgConfig::T4));
            }
            v.push(wg(130, 512, 258, true, WgConfig::T4));
            v.push(wg(200, 1536, 136, false, WgConfig::T4.with_stages(2)));
            v.push(wg(127, 2048, 200, true, WgConfig::T4.with_splits(3)));
        }
    }
    v.push(Box::new(TcCase {
        wg: Some(WgConfig::F4),
        ..TcCase::new(130, 96, 72, TcWeight::Quant(Scheme::Int8(Granularity::Group(48)), QLayout::Rows), TcMode::Tensor)
    }));
    // int8 groups with f16 scales (GGUF Q8_0) on tc v3: both orders, a partial last tile,
    // split-K and SwiGLU; and through `qlinear`'s own choice.
    for layout in [QLayout::Rows, QLayout::Tiles] {
        for g in [32usize, 128] {
            let q = |t, n_in, n_out, glu, wg| {
                Box::new(TcCase {
                    glu,
                    wg,
                    f16_scales: true,
                    ..TcCase::new(t, n_in, n_out, TcWeight::Quant(Scheme::Int8(Granularity::Group(g)), layout), TcMode::Tensor)
                }) as Box<dyn Case>
            };
            v.push(q(300, 640, 520, false, Some(WgConfig::F4.with_stages(3))));
            v.push(q(130, 512, 258, true, Some(WgConfig::F4.with_stages(3))));
            v.push(q(127, 2048, 200, true, Some(WgConfig::F4.with_stages(3).with_splits(3))));
            v.push(q(513, 1536, 200, false, None));
            v.push(q(300, 640, 520, false, Some(WgConfig::T4)));
            v.push(q(127, 2048, 200, true, Some(WgConfig::T4.with_splits(3))));
        }
    }
    // What tc v1 does not read: mxfp4 (Q4) in input order, the gemv v4 order (skipped, with the reason;
    // `qlinear` keeps dequant + GEMM for them).
    v.push(Box::new(TcCase::new(17, 256, 72, TcWeight::Quant(Scheme::Mxfp4, QLayout::Rows), TcMode::Tensor)));
    v.push(Box::new(TcCase::new(17, 256, 72, TcWeight::Quant(Scheme::Q4_1, QLayout::Rows), TcMode::Tensor)));
    v.push(Box::new(TcCase::new(17, 256, 64, TcWeight::Quant(Scheme::Int8(Granularity::PerChannel), QLayout::Mma), TcMode::Tensor)));
    v
}

/// Part `pi`'s outputs `yp [T, n_out]` into the stacked weight's `y [T, rows]`: its own block of
/// columns (q|k|v), or every other column from `pi` (gate|up interleaved, `glu`).
pub(crate) fn place_part(y: &mut Array2<f32>, yp: &Array2<f32>, pi: usize, glu: bool) {
    let n_out = yp.ncols();
    for ((ti, o), &v) in yp.indexed_iter() {
        let col = if glu { 2 * o + pi } else { pi * n_out + o };
        y[[ti, col]] = v;
    }
}
