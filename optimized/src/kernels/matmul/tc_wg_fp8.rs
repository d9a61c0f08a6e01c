//! W8A8 on Hopper's FP8 tensor cores: `y[T, N] = (qx · qWᵀ) ⊙ (s_x ⊗ s_w)` for an FP8 weight
//! with a scale per output channel (`QFormat::Fp8` with tensor or channel scales), the
//! activations quantized per token on the fly — what vLLM runs for FP8 checkpoints by default
//! (`scaled_fp8_quant` per token, then CUTLASS's sm90 FP8 GEMM with fast accumulation).
//!
//! ```text
//! s_x[t]    = max(amax_t(x) / 448, 2⁻¹²⁶)                  (reference::quant::fp8::quantize_rows)
//! qx[t, k]  = encode(x[t, k] / s_x[t])                    E4M3, ties to even, saturating
//! y[t, n]   = s_x[t] · s_w[n] · Σ_k decode(qx[t, k]) · decode(qW[n, k])
//! ```
//! 1. [`quantize_rows_e4m3`]: a cube per row, its amax by plane and shared maxima, then each unit
//!    encodes words of 4 codes (`kv_elem::e4m3_code`: the reference's `encode`, bit for bit).
//! 2. tc v4's kernel (`tc_wg_tma.rs`, `fp8`): both code matrices read as 16-bit matrices of
//!    half as many columns, so its tensor maps, 128-byte-swizzled boxes and descriptors are
//!    tc v4's unchanged — a k-block of 64 16-bit columns is 128 codes — and each k-block runs
//!    four `wgmma.m64n128k32.f32.e4m3.e4m3` (`wgmma::wgmma_k128_e4m3_acc`) instead of four
//!    k16 ones. Twice the k per instruction at the tensor cores' doubled FP8 rate, half the
//!    bytes staged per product.
//! 3. The epilogue multiplies each sum by its row's and column's scale ([`scaled`]) before
//!    tc v4's stores (SwiGLU, bounds, split-K partial sums: the scaling is linear).
//!
//! The products of two E4M3 values are exact; the tensor cores add them with less than f32's
//! precision (no per-k-block promotion), so the result differs from the exact W8A8 sum by more
//! than a 16-bit GEMM's rounding: conformance's tolerance says by how much.

use cubecl::prelude::*;
use cubecl::zspace::{Shape, Strides};

use super::tc::{grid, quant_dims, reduce, target, u32_of};
use super::tc_kernel::BK;
use super::tc_wg::{WgConfig, WG_BN};
use super::tc_wg_tma::{check, Kernel};
use super::wgmma::Acc;
use crate::kernels::attention::kv_elem::{e4m3_code, e4m3_dynamic_scale};
use crate::kernels::qmatmul::{QFormat, QLayout, QWeight};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units of a quantizing cube (one row): 8 planes of 32.
const QUANT_UNITS: usize = 256;

/// Whether W8A8 runs `w` on `client`, and why not: CUDA sm_90a (`wgmma`), an FP8 weight with a
/// scale per output row (tensor or channel scales; block scales take the dequantize path) in
/// the input order, `in` a multiple of 16 (the tensor maps' 16-byte row strides).
pub fn applies(client: &Client, w: &QWeight) -> Result<(), Error> {
    super::tc_wg::require(client, Dtype::BF16)?;
    match w.format {
        QFormat::Fp8 { srows: 1, scols } if scols == w.in_dim && w.layout == QLayout::Rows => {}
        f => {
            return Err(Error::Unsupported(format!(
                "W8A8 takes FP8 weights with a scale per output channel in the input order, not {f:?} ({:?})",
                w.layout
            )))
        }
    }
    if !w.in_dim.is_multiple_of(16) {
        return Err(Error::Unsupported(format!("W8A8: in = {} is not a multiple of 16 (the tensor maps' row strides)", w.in_dim)));
    }
    Ok(())
}

/// `acc` (a warpgroup's 64 × 128 block, tc v2's register order: rows `row0 + 16·warp + g +
/// 8h`, columns `n0 + 8j + 2c + e`) with each sum times `sx[row] · sw[col]` (sw as f32 bits;
/// rows and columns past the ends take the last).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scaled(acc: Acc, sx: &[f32], sw: &[u32], row0: usize, n0: usize, m: usize, n: usize, warp: usize, lane: usize) -> Acc {
    let mut out = acc;
    let g = lane / 4;
    let c = lane % 4;
    let r0 = sx[min(row0 + 16 * warp + g, m - 1)];
    let r1 = sx[min(row0 + 16 * warp + g + 8, m - 1)];
    #[unroll]
    for j in 0..WG_BN / 8 {
        let col = n0 + 8 * j + 2 * c;
        let s0 = f32::reinterpret(sw[min(col, n - 1)]);
        let s1 = f32::reinterpret(sw[min(col + 1, n - 1)]);
        out.insert(4 * j, acc.extract(4 * j) * (r0 * s0));
        out.insert(4 * j + 1, acc.extract(4 * j + 1) * (r0 * s1));
        out.insert(4 * j + 2, acc.extract(4 * j + 2) * (r1 * s0));
        out.insert(4 * j + 3, acc.extract(4 * j + 3) * (r1 * s1));
    }
    out
}

/// Row `CUBE_POS` of `x` (`[rows, k]` f32, k % 4 = 0) as E4M3 codes (4 to a word) and its
/// scale (module doc, step 1).
#[cube(launch_unchecked)]
pub fn quantize_rows_e4m3(x: &[f32], codes: &mut [u32], scales: &mut [f32], rows: u32, k: u32) {
    let row = CUBE_POS;
    if row < rows as usize {
        let tid = UNIT_POS as usize;
        let k = k as usize;
        let words = k / 4;
        let base = row * k;
        let mut amax = 0.0f32;
        let mut w = tid;
        while w < words {
            #[unroll]
            for e in 0..4usize {
                amax = max(amax, f32::abs(x[base + 4 * w + e]));
            }
            w += comptime!(QUANT_UNITS);
        }
        let mut sh = Shared::<[f32]>::new_slice(comptime!(QUANT_UNITS / 32));
        let pm = plane_max(amax);
        if UNIT_POS_PLANE == 0 {
            sh[tid / 32] = pm;
        }
        sync_cube();
        let mut all = sh[0];
        #[unroll]
        for p in 1..QUANT_UNITS / 32 {
            all = max(all, sh[p]);
        }
        let s = e4m3_dynamic_scale(all);
        if tid == 0 {
            scales[row] = s;
        }
        let mut w = tid;
        while w < words {
            let at = base + 4 * w;
            codes[row * words + w] =
                e4m3_code(x[at] / s) | (e4m3_code(x[at + 1] / s) << 8u32) | (e4m3_code(x[at + 2] / s) << 16u32) | (e4m3_code(x[at + 3] / s) << 24u32);
            w += comptime!(QUANT_UNITS);
        }
    }
}

/// `x` (`[T, K]` f32) quantized per row: the codes (`[T, K]` E4M3) and the scales (`[T]`).
pub fn quantize_rows(client: &Client, x: &DeviceTensor) -> Result<(DeviceTensor, DeviceTensor), Error> {
    let [t, k] = x.shape[..] else {
        return Err(Error::Shape(format!("quantize_rows: x {:?} is not [T, K]", x.shape)));
    };
    if x.dtype != Dtype::F32 || !k.is_multiple_of(4) {
        return Err(Error::Shape(format!("quantize_rows: x {:?} {}: f32 with K a multiple of 4", x.shape, x.dtype.name())));
    }
    if crate::kernels::uniform_plane_size(client) != Some(32) {
        return Err(Error::Unsupported(format!(
            "quantize_rows: the per-token amax reduces over planes of 32 units; {} has none",
            client.properties().identity.name
        )));
    }
    let codes = DeviceTensor::empty(client, &[t, k], Dtype::E4M3);
    let scales = DeviceTensor::empty_f32(client, &[t]);
    if t == 0 {
        return Ok((codes, scales));
    }
    unsafe {
        quantize_rows_e4m3::launch_unchecked(
            client,
            CubeCount::Static(u32_of("T", t)?, 1, 1),
            CubeDim::new_1d(QUANT_UNITS as u32),
            x.as_arg(1),
            codes.as_arg(4),
            scales.as_arg(1),
            t as u32,
            u32_of("K", k)?,
        );
    }
    Ok((codes, scales))
}

/// The tensor map of E4M3 codes `[rows, k]` (k % 16 = 0) read as a 16-bit `[rows, k / 2]` in
/// boxes of `box_rows` × 64 (128 codes: one 128-byte swizzled row of a k-block).
fn code_map(handle: &cubecl::server::Handle, rows: usize, k: usize, box_rows: usize) -> TensorMapArg<Tiled> {
    let cols = k / 2;
    let arg = unsafe { TensorArg::from_raw_parts(handle.clone(), Strides::new(&[cols, 1]), Shape::new([rows, cols])) };
    TensorMapArg::new(TiledArgs { tile_size: Shape::new([box_rows, BK]) }, arg, <half::f16 as Scalar>::elem_type_native())
        .with_swizzle(TensorMapSwizzle::B128)
}

/// W8A8 `y = x · Wᵀ` for an FP8 weight that [`applies`] (x `[T, K]` f32; y `[T, N]` f32, or
/// with `glu` `[T, N / 2]` of `act(x·W_{2j}) · x·W_{2j+1}`): x quantized per row, then tc v4's
/// kernel over the codes. `cfg`: `None` for tc v4's pick at the shape (its K counted in 16-bit
/// columns, K / 2: the bytes a k-block stages are the same).
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &QWeight,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<WgConfig>,
) -> Result<(), Error> {
    applies(client, w)?;
    let t = quant_dims("W8A8", x, w, y, glu.is_some())?;
    let (n, k) = (w.out, w.in_dim);
    let kh = k / 2;
    let cfg = cfg.unwrap_or_else(|| WgConfig::pick(t, n, kh, super::tc::sms(client), crate::config::Gemm::Tma));
    check(client, &cfg)?;
    if x.dtype != Dtype::F32 || !matches!(y.dtype, Dtype::F32 | Dtype::BF16) {
        return Err(Error::Shape(format!("W8A8: x {} and y {}: x f32, y f32 or bf16", x.dtype.name(), y.dtype.name())));
    }
    if t == 0 || n == 0 {
        return Ok(());
    }
    let (qx, sx) = quantize_rows(client, x)?;
    let kp = kh.div_ceil(BK) * BK;
    let g = grid(client, (cfg.bm(), WG_BN, cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let xmap = code_map(&qx.handle, t, k, cfg.bm());
    let wmap = code_map(&w.data.handle, n, k, WG_BN);
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("Kp", kp)?);
    let k = Kernel { cfg, g: &g, s, glu, w_read_only: w.data.read_only };
    match out.dtype {
        Dtype::BF16 => k.launch::<half::f16, half::bf16>(client, xmap, wmap, &out, Some((&sx, &w.scales)), false),
        _ => k.launch::<half::f16, f32>(client, xmap, wmap, &out, Some((&sx, &w.scales)), false),
    }
    reduce(client, &g, &out, y, x, t, n, false, glu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_k_block_of_codes_is_a_16_bit_k_block() {
        // 64 16-bit columns = 128 bytes = 128 codes = four k32 steps of 32 bytes.
        assert_eq!(BK * 2, 128);
        assert_eq!(QUANT_UNITS % 32, 0);
    }
}
