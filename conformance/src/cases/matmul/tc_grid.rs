//! The tensor-core grid of dense matmul cases (tc v1 / v3 / v4 tiles, split-K, fused gating).

use super::*;

/// The tc v1 cases of dense weights (the quantized ones are in `qmatmul.rs`): forced tc at
/// the M = 8 / 9 boundary and at M = 17, 127, 513 with N and K off the tile (K % 8 = 0 is
/// the kernel's own limit: K = 577 is reported skipped), the automatic choice on both sides
/// of the boundary, the fused SwiGLU, every tile preset (those `TcConfig::pick` never launches: lab), and the emulated tiles.
pub fn tc_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for dtype in [Dtype::F16, Dtype::BF16] {
        let mm = |t, n_in, n_out, version, fusion| Box::new(MatmulCase { t, n_in, n_out, dtype, version, fusion });
        for (t, n_in, n_out) in [(9usize, 136usize, 72usize), (17, 584, 1031), (127, 1000, 200), (513, 264, 130), (200, 4096, 384), (33, 577, 64)] {
            v.push(mm(t, n_in, n_out, Version::Tc, Fusion::None));
        }
        // Small M on the tensor cores (steps above the gemv-rows crossover): one and a few
        // rows of the 16-row MMA tile in use.
        for (t, n_in, n_out) in [(1usize, 136usize, 72usize), (3, 584, 1031), (5, 264, 130)] {
            v.push(mm(t, n_in, n_out, Version::Tc, Fusion::None));
        }
        // The automatic choice on both sides of the default crossover and of the gemv's T.
        for t in [2usize, 3, 8, 9] {
            v.push(mm(t, 584, 1031, Version::Auto, Fusion::None));
            v.push(mm(t, 576, 1030, Version::Auto, Fusion::Glu));
            v.push(mm(t, 576, 1030, Version::Auto, Fusion::GeluGlu));
        }
        v.push(mm(17, 584, 1030, Version::Tc, Fusion::Glu));
        v.push(mm(130, 264, 258, Version::Tc, Fusion::Glu));
        // GELU-tanh on the tensor cores, in the GEMM's epilogue (tc v1 at 17 rows; at 130 the
        // pick's tc v4 where the device has wgmma, else tc v1).
        v.push(mm(17, 584, 1030, Version::Tc, Fusion::GeluGlu));
        v.push(mm(130, 264, 258, Version::Tc, Fusion::GeluGlu));
        for config in TcConfig::ALL.iter().chain(&TcConfig::VARIANTS).copied() {
            v.push(Box::new(TcCase { config: Some(config), ..TcCase::new(300, 328, 520, TcWeight::Dense(dtype), TcMode::Tensor) }));
        }
        // Fragments loaded a k-step ahead, emulated.
        v.push(Box::new(TcCase { config: Some(TcConfig::T32X32.with_pipe()), ..TcCase::new(40, 200, 72, TcWeight::Dense(dtype), TcMode::Emulated) }));
        // Emulated (lavapipe-sized tiles): partial M and N tiles, K past the last block.
        for (t, n_in, n_out) in [(9usize, 136usize, 40usize), (40, 200, 72), (33, 72, 33)] {
            v.push(Box::new(TcCase { config: Some(TcConfig::T32X32), ..TcCase::new(t, n_in, n_out, TcWeight::Dense(dtype), TcMode::Emulated) }));
        }
        v.push(Box::new(TcCase { config: Some(TcConfig::T32X32), glu: true, ..TcCase::new(17, 136, 40, TcWeight::Dense(dtype), TcMode::Emulated) }));
        // GELU-tanh gating in the epilogue, emulated and on the tensor cores, and in split-K's
        // reduce (an uneven last slice).
        v.push(Box::new(
            TcCase { config: Some(TcConfig::T32X32), ..TcCase::new(17, 136, 40, TcWeight::Dense(dtype), TcMode::Emulated) }.gated(GluAct::GeluTanh),
        ));
        v.push(Box::new(TcCase::new(130, 264, 258, TcWeight::Dense(dtype), TcMode::Tensor).gated(GluAct::GeluTanh)));
        v.push(Box::new(
            TcCase { config: Some(TcConfig::T32X32.with_splits(3)), ..TcCase::new(40, 520, 72, TcWeight::Dense(dtype), TcMode::Emulated) }
                .gated(GluAct::GeluTanh),
        ));
        v.push(Box::new(
            TcCase { config: Some(TcConfig::T128X128S3.with_splits(4)), ..TcCase::new(127, 4040, 200, TcWeight::Dense(dtype), TcMode::Tensor) }
                .gated(GluAct::GeluTanh),
        ));
        // Split-K (partial sums added by the reduce kernel; an uneven last slice), with and
        // without the SwiGLU, emulated and on the tensor cores.
        for glu in [false, true] {
            v.push(Box::new(TcCase {
                config: Some(TcConfig::T32X32.with_splits(3)),
                glu,
                ..TcCase::new(40, 520, 72, TcWeight::Dense(dtype), TcMode::Emulated)
            }));
            v.push(Box::new(TcCase {
                config: Some(TcConfig::T128X128S3.with_splits(4)),
                glu,
                ..TcCase::new(127, 4040, 200, TcWeight::Dense(dtype), TcMode::Tensor)
            }));
        }
    }
    // tc v2 (`wgmma`, sm_90a; lab cases): partial M and N tiles (one row of 128; K past the last block;
    // N off the tile), several tiles each way, the SwiGLU epilogue, both depths, split-K with
    // an uneven last slice; K % 8 ≠ 0 is refused (skipped with the reason).
    for dtype in [Dtype::F16, Dtype::BF16] {
        let wg = |t, n_in, n_out, glu, cfg: WgConfig| {
            Box::new(TcCase { glu, wg: Some(cfg), ..TcCase::new(t, n_in, n_out, TcWeight::Dense(dtype), TcMode::Tensor) }) as Box<dyn Case>
        };
        for (t, n_in, n_out) in [
            (1usize, 136usize, 72usize),
            (9, 136, 72),
            (17, 584, 1031),
            (127, 1000, 200),
            (300, 328, 520),
            (513, 264, 130),
            (200, 4096, 384),
            (33, 577, 64),
        ] {
            v.push(wg(t, n_in, n_out, false, WgConfig::S4));
        }
        v.push(wg(300, 328, 520, false, WgConfig::S3));
        v.push(wg(17, 584, 1030, true, WgConfig::S4));
        v.push(wg(130, 264, 258, true, WgConfig::S3));
        for glu in [false, true] {
            v.push(wg(127, 4040, 200, glu, WgConfig::S4.with_splits(4)));
            v.push(wg(300, 4040, 200, glu, WgConfig::M2S4.with_splits(3)));
        }
        // Tiles of 256 rows (two m64 blocks a warpgroup).
        for (t, n_in, n_out) in [(1usize, 136usize, 72usize), (300, 328, 520), (513, 264, 130)] {
            v.push(wg(t, n_in, n_out, false, WgConfig::M2S4));
        }
        v.push(wg(300, 328, 520, false, WgConfig::M2S3));
        v.push(wg(257, 584, 1030, true, WgConfig::M2S4));
        // tc v3: the accumulators in flight across k-blocks (tied in-out operands).
        for (t, n_in, n_out) in [(1usize, 136usize, 72usize), (17, 584, 1031), (300, 328, 520), (513, 264, 130), (200, 4096, 384)] {
            v.push(wg(t, n_in, n_out, false, WgConfig::F4));
            v.push(wg(t, n_in, n_out, false, WgConfig::M2F4));
        }
        v.push(wg(300, 1000, 520, false, WgConfig::F5));
        v.push(wg(130, 264, 258, true, WgConfig::F4));
        for glu in [false, true] {
            v.push(wg(300, 4040, 200, glu, WgConfig::F4.with_splits(3)));
        }
        // GELU-tanh gating: tc v3's epilogue, and split-K's reduce.
        let gelu = |t, n_in, n_out, cfg: WgConfig| {
            Box::new(TcCase { wg: Some(cfg), ..TcCase::new(t, n_in, n_out, TcWeight::Dense(dtype), TcMode::Tensor) }.gated(GluAct::GeluTanh))
                as Box<dyn Case>
        };
        v.push(gelu(130, 264, 258, WgConfig::F4));
        v.push(gelu(300, 4040, 200, WgConfig::F4.with_splits(3)));
        // tc v4: the operands by TMA (boxes past M, N and K zero-filled by the copy engine),
        // stages handed over by mbarriers; rounds of the stage ring wrap (K up to 64 blocks).
        for (t, n_in, n_out) in [(1usize, 136usize, 72usize), (17, 584, 1031), (300, 328, 520), (513, 264, 130), (200, 4096, 384), (130, 1000, 258)] {
            v.push(wg(t, n_in, n_out, false, WgConfig::T4));
            v.push(wg(t, n_in, n_out, false, WgConfig::M2T4));
        }
        v.push(wg(300, 1000, 520, false, WgConfig::T6));
        // One consumer warpgroup (64-row tiles).
        for (t, n_in, n_out) in [(1usize, 136usize, 72usize), (65, 584, 1031), (128, 1000, 258)] {
            v.push(wg(t, n_in, n_out, false, WgConfig::H6));
        }
        v.push(wg(130, 264, 258, true, WgConfig::H6));
        v.push(wg(127, 4040, 200, false, WgConfig::H6.with_splits(3)));
        // x read and y written in the weight's type (no conversion pass): every tile, SwiGLU,
        // split-K (y from the reduce).
        let io = |t, n_in, n_out, glu, cfg: WgConfig| {
            Box::new(TcCase { glu, wg: Some(cfg), io16: true, ..TcCase::new(t, n_in, n_out, TcWeight::Dense(dtype), TcMode::Tensor) })
                as Box<dyn Case>
        };
        v.push(io(17, 584, 1031, false, WgConfig::T4));
        v.push(io(300, 328, 520, false, WgConfig::M2T4));
        v.push(io(65, 584, 1031, false, WgConfig::H6));
        v.push(io(130, 264, 258, true, WgConfig::H6));
        v.push(io(257, 584, 1030, true, WgConfig::M2T4));
        for glu in [false, true] {
            v.push(io(300, 4040, 200, glu, WgConfig::T4.with_splits(3)));
        }
        v.push(wg(257, 4096, 130, false, WgConfig::T4.with_stages(3)));
        v.push(wg(130, 264, 258, true, WgConfig::T4));
        v.push(wg(257, 584, 1030, true, WgConfig::M2T4));
        for glu in [false, true] {
            v.push(wg(300, 4040, 200, glu, WgConfig::T4.with_splits(3)));
        }
        // GELU-tanh gating: tc v4's epilogue at every tile height, split-K's reduce, and y in
        // the weight's type.
        for (t, n_in, n_out, cfg) in [
            (130usize, 264usize, 258usize, WgConfig::T4),
            (257, 584, 1030, WgConfig::M2T4),
            (130, 264, 258, WgConfig::H6),
            (300, 4040, 200, WgConfig::T4.with_splits(3)),
        ] {
            v.push(gelu(t, n_in, n_out, cfg));
        }
        v.push(Box::new(
            TcCase { wg: Some(WgConfig::M2T4), io16: true, ..TcCase::new(257, 584, 1030, TcWeight::Dense(dtype), TcMode::Tensor) }
                .gated(GluAct::GeluTanh),
        ));
    }
    // f32 weights stay on the CUDA cores: reported skipped, with the reason.
    v.push(Box::new(MatmulCase { t: 17, n_in: 64, n_out: 64, dtype: Dtype::F32, version: Version::Tc, fusion: Fusion::None }));
    v
}
