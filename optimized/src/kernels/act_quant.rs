//! Dynamic FP8 activation quantization (`reference::ops::act_quant`): what a W8A8 checkpoint's
//! linears read instead of x,
//!
//! ```text
//! s_{t,g}  = max(amax_{k ∈ g} |x[t, k]| / 448, 2⁻¹²⁶)        groups of n inputs of row t
//! x̃[t, k]  = decode(encode(x[t, k] / s_{t,g})) · s_{t,g}
//! ```
//! in x's own type, ahead of any linear (dense, quantized, gemv or GEMM) — so a W8A8 model
//! runs on every kernel the weight has. One cube per (row, group): its units stride over the
//! group for the amax, reduce it by a shared-memory tree (no plane operations: every backend
//! runs it), then each rewrites its elements. `encode` is `kv_elem::e4m3_code`, the
//! reference's bit for bit; in f32 the result is the reference's exactly.
//!
//! A quantized weight marked with its model's scheme (`QWeight::act`) has the dispatch choose:
//! the FP8 tensor cores (`matmul::tc_wg_fp8`, per token) quantize x themselves; elsewhere the
//! dispatch runs this pass first. [`linear_input`] runs it for the others (dense weights).

use cubecl::prelude::*;

use crate::kernels::attention::kv_elem::{code_value, e4m3_code, e4m3_dynamic_scale};
use crate::kernels::matmul::tree_reduce;
use crate::kernels::qmatmul::Weight;
use crate::{Client, DeviceTensor, Dtype, Error};

pub use reference::ops::act_quant::ActQuant;

/// Units of a cube (a power of two; fewer where the device allows fewer).
const UNITS: usize = 256;

/// `max` of `v` over the cube's `block` units (a power of two) by a tree in shared memory.
#[cube]
fn block_max(v: f32, tid: usize, #[comptime] block: usize) -> f32 {
    let mut part = Shared::<[f32]>::new_slice(block);
    part[tid] = v;
    sync_cube();
    tree_reduce(&mut part, 0, tid, block, true);
    part[0]
}

/// Group `CUBE_POS_Y` of row `CUBE_POS_X` of `x` (`[rows, k]`, groups of `n`, the last of a
/// row possibly shorter) quantized and decoded into `out` (module doc).
#[cube(launch_unchecked)]
fn fake_quant_groups<F: Float>(x: &[F], out: &mut [F], k: u32, n: u32, #[comptime] block: usize) {
    let (k, n) = (k as usize, n as usize);
    let g0 = CUBE_POS_Y as usize * n;
    let start = CUBE_POS_X as usize * k + g0;
    let len = min(n, k - g0);
    let tid = UNIT_POS as usize;
    let mut amax = 0.0f32;
    let mut i = tid;
    while i < len {
        amax = max(amax, f32::abs(f32::cast_from(x[start + i])));
        i += block;
    }
    let s = e4m3_dynamic_scale(block_max(amax, tid, block));
    let mut i = tid;
    while i < len {
        let v = f32::cast_from(x[start + i]);
        out[start + i] = F::cast_from(code_value(e4m3_code(v / s)) * s);
        i += block;
    }
}

/// `x` (`[T, K]`, f32 / f16 / bf16) as a linear of a W8A8 checkpoint reads it: a new tensor.
pub fn fake_quant(client: &Client, x: &DeviceTensor, q: ActQuant) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty(client, &x.shape, x.dtype);
    fake_quant_into(client, x, q, &out)?;
    Ok(out)
}

/// [`fake_quant`] into `out` (x's shape and type; may be x itself).
pub fn fake_quant_into(client: &Client, x: &DeviceTensor, q: ActQuant, out: &DeviceTensor) -> Result<(), Error> {
    let [t, k] = x.shape[..] else {
        return Err(Error::Shape(format!("act_quant: x {:?} is not [T, K]", x.shape)));
    };
    if out.shape != x.shape || out.dtype != x.dtype {
        return Err(Error::Shape(format!("act_quant: out {:?} {} for x {:?} {}", out.shape, out.dtype.name(), x.shape, x.dtype.name())));
    }
    if t == 0 || k == 0 {
        return Ok(());
    }
    // 16-bit inputs need the device's arithmetic in that type (asked only for them: f32 is the
    // decode path's type, launched per linear).
    if matches!(x.dtype, Dtype::F16 | Dtype::BF16) {
        let info = crate::device_info(client);
        if (x.dtype == Dtype::F16 && !info.f16) || (x.dtype == Dtype::BF16 && !info.bf16) {
            return Err(Error::Unsupported(format!("act_quant: {} has no {} arithmetic", info.name, x.dtype.name())));
        }
    }
    let n = q.group(k);
    let groups = k.div_ceil(n);
    let units = (client.properties().hardware.max_units_per_cube as usize).min(UNITS);
    // The largest power of two the device allows (the tree halves it to 1).
    let block = 1usize << units.max(1).ilog2();
    let count = |what: &str, v: usize| u32::try_from(v).map_err(|_| Error::Shape(format!("act_quant: {what} = {v} does not fit a launch")));
    let grid = CubeCount::Static(count("T", t)?, count("groups", groups)?, 1);
    macro_rules! go {
        ($f:ty) => {
            unsafe {
                fake_quant_groups::launch_unchecked::<$f>(
                    client,
                    grid,
                    CubeDim::new_1d(block as u32),
                    x.as_arg(1),
                    out.as_arg(1),
                    count("K", k)?,
                    count("n", n)?,
                    block,
                )
            }
        };
    }
    match x.dtype {
        Dtype::F32 => go!(f32),
        Dtype::F16 => go!(half::f16),
        Dtype::BF16 => go!(half::bf16),
        Dtype::E4M3 => return Err(Error::Unsupported("act_quant of e4m3 values (already codes)".into())),
    }
    Ok(())
}

/// What linear `w` reads for its input `x` in a model whose linears quantize their inputs by
/// `q` (`ModelSpec::act_quant`): x itself where `w`'s kernels quantize it (a quantized weight
/// marked with `q`, [`Weight::quantizes_inputs`]: W8A8 on the FP8 tensor cores, or the
/// dispatch's own pass), else [`fake_quant`] of x (a dense weight).
pub fn linear_input(client: &Client, q: Option<ActQuant>, w: &Weight, x: &DeviceTensor) -> Result<DeviceTensor, Error> {
    match w.quantizes_inputs(q) {
        true => Ok(x.clone()),
        false => fake_quant_opt(client, x, q),
    }
}

/// [`fake_quant`] where `q` is given, else `x` itself (a handle clone).
pub fn fake_quant_opt(client: &Client, x: &DeviceTensor, q: Option<ActQuant>) -> Result<DeviceTensor, Error> {
    match q {
        Some(q) => fake_quant(client, x, q),
        None => Ok(x.clone()),
    }
}
