//! What the matmul cases of the formats kept as stored (`optimized::kernels::qformat`: ggml
//! blocks in `qmatmul_ggml.rs`, FP8 in `qmatmul_fp8.rs`) share: upload, run through every
//! kernel `qlinear` takes for them, compare against the reference on the same weights.

use ndarray::Array2;
use optimized::kernels::qformat;
use optimized::kernels::qmatmul::parts::parts_into;
use optimized::kernels::qmatmul::{default_rpg, qlinear_fused_into_tuned, GemvTune, QWeight, QGEMV_MAX_T};
use optimized::Client;
use reference::quant::QuantTensor;

use super::matmul::Fusion;
use super::outcome;
use crate::tolerance::tc_tolerance;
use crate::{compare, rand_vec, round_to, tolerance, Dtype, Op, Outcome};

/// A kept-format matmul case's name: `qmatmul(T=…,in=…,out=…,FORMAT[,stacked×P]FUSION,PATH)`.
pub(crate) fn kept_name(t: usize, n_in: usize, n_out: usize, format: &str, parts: usize, fusion: Fusion, path: &str) -> String {
    let p = if parts > 1 && !fusion.glu() { format!(",stacked×{parts}") } else { String::new() };
    format!("qmatmul(T={t},in={n_in},out={n_out},{format}{p}{},{path})", fusion.tag())
}

/// `qlinear` of `parts` weights `[n_out, n_in]` (part `p` made by `part(p)`) stacked, or with
/// SwiGLU two interleaved, against
/// `reference_linear(dequant(W), x)` (x random from `x_salt`, outputs NaN-poisoned by
/// `fusion.run_device`): the decode gemv for T ≤ 8 (with `fusion`'s prologue / epilogues), the
/// GEMMs above, via `qlinear_fused_into_tuned` at the format's default rows per group. `check`
/// sees each uploaded weight first; an outcome it returns (a wrong format or order, a skip) is
/// the case's. Parts of different formats go through `qmatmul::parts` (`Weight::Parts`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_kept(
    client: &Client,
    t: usize,
    n_in: usize,
    n_out: usize,
    parts: usize,
    fusion: Fusion,
    x_salt: u32,
    part: impl Fn(usize) -> Result<QuantTensor, String>,
    check: impl FnMut(&QWeight) -> Option<Outcome>,
) -> Outcome {
    let glu = fusion.glu();
    let parts = match (0..if glu { 2 } else { parts.max(1) }).map(part).collect::<Result<Vec<_>, _>>() {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("reference weights: {e}")),
    };
    let refs: Vec<&QuantTensor> = parts.iter().collect();
    // Parts of different formats (a llama-quantize mix's q|k|v) stay apart, as the loader
    // keeps them (`Weight::Parts`).
    let mixed = !glu && refs.iter().any(|p| p.label() != refs[0].label());
    let uploaded = match (glu, &refs[..]) {
        (true, [g, u]) => QWeight::upload_glu(client, g, u, None).map(|w| vec![w]),
        _ if mixed => refs.iter().map(|p| QWeight::upload(client, &[*p])).collect(),
        _ => QWeight::upload(client, &refs).map(|w| vec![w]),
    };
    let ws = match uploaded {
        Ok(ws) => ws,
        Err(e) => return Outcome::Fail(format!("upload: {e}")),
    };
    if let Some(o) = ws.iter().find_map(check) {
        return o;
    }
    let rows = n_out * parts.len();
    // Above the gemv the dense GEMM reads the dequantized scratch, in the tensor cores' 16-bit
    // type where they apply (x rounded to it too; the reference multiplies the same rounded
    // values: `tc_tolerance`), f32 elsewhere (exact).
    let e = match qformat::dense_dtype(client, n_in) {
        optimized::Dtype::F32 => None,
        d => Some(Dtype::from(d)),
    };
    let tc_path = t > QGEMV_MAX_T && e.is_some();
    let rounded = |v: &[f32]| match (tc_path, e) {
        (true, Some(e)) => round_to(v, e),
        _ => v.to_vec(),
    };
    let x = rand_vec(t * n_in, x_salt);
    let lin = |inp: &[f32]| -> Result<Array2<f32>, String> {
        let xa = Array2::from_shape_vec((t, n_in), rounded(inp)).map_err(|e| e.to_string())?;
        let mut y = Array2::<f32>::zeros((t, rows));
        for (pi, p) in parts.iter().enumerate() {
            let wa = Array2::from_shape_vec((n_out, n_in), rounded(&p.dequant())).map_err(|e| e.to_string())?;
            let yp = reference::ops::matmul::linear(xa.view(), wa.view()).map_err(|e| e.to_string())?;
            super::qmatmul::place_part(&mut y, &yp, pi, glu);
        }
        Ok(y)
    };
    let io = match fusion.io(t, n_in, rows, &x, lin) {
        Ok(io) => io,
        Err(e) => return Outcome::Fail(format!("reference: {e}")),
    };
    outcome((|| {
        let y = fusion.run_device(client, t, n_in, rows, &x, &io, |xd, yd, fuse| match &ws[..] {
            [w] => qlinear_fused_into_tuned(client, xd, w, yd, &GemvTune { rpg: default_rpg(w.format), ..GemvTune::default_for(client, w) }, fuse),
            _ => parts_into(client, xd, &ws, yd, fuse),
        })?;
        let (tol, _) = if tc_path { tc_tolerance() } else { tolerance(Op::Matmul, Dtype::F32) };
        Ok(match compare(&y, &io.want, tol) {
            Ok(m) => Outcome::Pass(m),
            Err(e) => Outcome::Fail(e),
        })
    })())
}
