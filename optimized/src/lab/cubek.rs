//! cubek-matmul 0.3.1 (cubecl's own matmul crate, `tracel-ai/cubek`) for tandem's linear layer,
//! the candidate the brief of issue 22 asked to try first. Lost to tc v1 (`kernels/matmul/tc.rs`)
//! at every shape class; kept here behind the `lab` feature for re-runs.
//!
//! Fit: it builds with cubecl =0.11.3 and the vendored cubecl-cuda (one cubecl in the lock; a
//! clean `--features optimized/lab` build of `optimized` took 3 min 44 s here). W `[out, in]`
//! row-major is handed over as a column-major B `[in, out]` (strides `[1, in]`), which its
//! layouts take as they are. x as an f32 lhs with a 16-bit stage type is refused by every
//! strategy tried (a `MatmulSetupError` at launch, "Unable t…" — the table cut the message), so
//! the comparison feeds it tc v1's own conversion (`lhs16`: x rounded to W's type first). It has
//! no way to read tandem's quantized layouts (int8 rows / tiled order, MXFP4 with e8m0 scale
//! words): cubek-quant's schemes are per-tensor or per-block with its own packing, so quantized
//! weights would need a re-layout copy at load — the fused-dequant half of the issue cannot go
//! through it.
//!
//! Measured (H200, 2026-11-24, `tandem bench --kernel matmul` built with `--features optimized/lab`, run 1
//! of issue 22: this file's code as committed in f521382, tc v1 with its first presets, same
//! binary and run; TFLOP/s, bf16 W, x16 fed; tc v1 = its default tile in that run / best preset;
//! tc v1's final numbers, higher, are in `kernels/matmul/tc.rs`):
//!
//! | M×N×K | simple-cyclic-cmma | simple-cyclic-mma | double-cyclic-mma | specialized-tma-mma | tc v1 |
//! | --- | --- | --- | --- | --- | --- |
//! | 128×14336×4096 | 37.1 | 50.4 | 54.7 | 82.4 | 100.2 / 162.7 |
//! | 512×14336×4096 | 57.3 | 94.6 | 110.5 | 176.3 | 161.6 / 208.6 |
//! | 2048×14336×4096 | 59.8 | 114.2 | 145.2 | 228.2 | 252.5 / 255.7 |
//! | 128×4096×14336 | 12.9 | 15.8 | 17.9 | 29.0 | 143.5 / 143.5 |
//! | 512×4096×14336 | 48.5 | 57.3 | 72.7 | 115.7 | 222.6 / 222.6 |
//! | 2048×4096×14336 | 102.5 | 113.5 | 148.7 | 233.6 | 262.7 / 263.6 |
//!
//! f16 within 3% of bf16 for both. cubek has no split-K on these strategies, which is what
//! costs it the narrow-output shapes (N = 4096: 16–64 output tiles for 132 SMs).

use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::zspace::{shape, strides};
use cubek_matmul::definition::MatmulElems;
use cubek_matmul::launch::launch_ref;
use cubek_matmul::multi_level::Strategy as Ml;
use cubek_matmul::strategy::Strategy;
use cubek_std::InputBinding;

use crate::kernels::matmul::tc;
use crate::{Client, DeviceTensor, Dtype, Error};

fn strategy(name: &str) -> Result<Strategy, Error> {
    Ok(Strategy::MultiLevel(match name {
        "simple-cyclic-cmma" => Ml::SimpleCyclicCmma(Default::default()),
        "simple-cyclic-mma" => Ml::SimpleCyclicMma(Default::default()),
        "double-cyclic-mma" => Ml::DoubleCyclicMma(Default::default()),
        "specialized-tma-mma" => Ml::SpecializedTmaMma(Default::default()),
        _ => return Err(Error::Shape(format!("cubek-matmul: unknown strategy {name:?} (known: {:?})", super::CUBEK_STRATEGIES))),
    }))
}

/// See [`super::cubek_linear_into`].
pub fn linear_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, name: &str, lhs16: bool) -> Result<(), Error> {
    let [n, k] = w.shape[..] else {
        return Err(Error::Shape(format!("cubek linear: w {:?} is not [out, in]", w.shape)));
    };
    let t = x.numel() / k.max(1);
    if x.shape.last() != Some(&k) || y.numel() != t * n || x.dtype != Dtype::F32 || y.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("cubek linear: x {:?}, w {:?}, y {:?}", x.shape, w.shape, y.shape)));
    }
    let wt = match w.dtype {
        Dtype::F16 => ElemType::Float(FloatKind::F16),
        Dtype::BF16 => ElemType::Float(FloatKind::BF16),
        Dtype::F32 => return Err(Error::Unsupported("cubek linear: f32 weights stay on the CUDA-core kernel".into())),
        Dtype::E4M3 => return Err(Error::Unsupported("cubek linear: e4m3 is a KV pool type".into())),
    };
    let f32t = ElemType::Float(FloatKind::F32);
    let strategy = strategy(name)?;
    // The 16-bit copy (when asked for) must outlive the launch: kept here until return.
    let x16 = if lhs16 { Some(tc::convert_x(client, x, w.dtype, t, k)?) } else { None };
    let (lhs_handle, lhs_type) = match &x16 {
        Some(c) => (c.handle.clone(), wt),
        None => (x.handle.clone(), f32t),
    };
    let lhs = unsafe { TensorBinding::from_raw_parts(lhs_handle, strides![k, 1], shape![t, k]) };
    let rhs = unsafe { TensorBinding::from_raw_parts(w.handle.clone(), strides![1, k], shape![k, n]) };
    let out = unsafe { TensorBinding::from_raw_parts(y.handle.clone(), strides![n, 1], shape![t, n]) };
    let mut dtypes = MatmulElems {
        lhs_global: lhs_type,
        rhs_global: wt,
        acc_global: f32t,
        lhs_stage: wt,
        rhs_stage: wt,
        acc_stage: f32t,
        lhs_register: wt,
        rhs_register: wt,
        acc_register: f32t,
    };
    // cubek asserts on some shapes instead of returning an error: a panic is reported as such.
    let run = std::panic::AssertUnwindSafe(|| {
        launch_ref(&strategy, client, InputBinding::Normal(lhs, lhs_type), InputBinding::Normal(rhs, wt), out, &mut dtypes)
    });
    match std::panic::catch_unwind(run) {
        Ok(r) => r.map_err(|e| Error::Unsupported(format!("cubek-matmul {name} for x [{t}, {k}] · w [{n}, {k}]ᵀ: {e:?}"))),
        Err(_) => Err(Error::Unsupported(format!("cubek-matmul {name} for x [{t}, {k}] · w [{n}, {k}]ᵀ panicked"))),
    }
}
