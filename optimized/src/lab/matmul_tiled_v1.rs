//! tiled v1: the dense linear layer `y[T, out] = x[T, in] · W[out, in]ᵀ` (x, y f32; W f32, f16
//! or bf16), the first GEMM of `kernels::matmul` (its `Version::Tiled`). One cube of 16×16
//! units per 16×16 output tile. Along K the cube stages a 16×16 tile of x and one of W in
//! shared memory (rows padded to 17 floats, so the column reads of W hit 16 different banks),
//! `sync_cube`, and each unit adds 16 products to its output. Every global load is
//! bounds-checked (zero fill), so any T, in, out works. Tiles are spread over the grid with
//! `CubeCountSelection`.
//!
//! Measured (H200, 2026-11-21, `benches/matmul.rs`, commit a7a0159): ~6 TFLOP/s against tiled
//! v2's 15–25 (register blocking, 64×64 tiles), which took prefill; tc v1 and later the
//! `wgmma` GEMMs took it from there. `linear`'s pick never launched it since. A lab kernel (the
//! `lab` feature; `Version::Tiled` answers `Unsupported` without it).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::{Client, DeviceTensor, Error};

/// Side of the output tile (and of the K step).
pub const TILE: u32 = 16;

/// tiled v1. `x`: [t_rows, n_in] f32, `w`: [n_out, n_in], `y`: [t_rows, n_out].
/// Cube dim must be (tile, tile); cube `c` computes tile (c / tiles_out, c % tiles_out).
#[cube(launch)]
pub fn matmul_tiled_v1<W: Float>(
    x: &[f32],
    w: &[W],
    y: &mut [f32],
    t_rows: u32,
    n_in: u32,
    n_out: u32,
    tiles_out: u32,
    tiles_total: u32,
    #[comptime] tile: usize,
) {
    let cube = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if cube < tiles_total as usize {
        let tx = UNIT_POS_X as usize;
        let ty = UNIT_POS_Y as usize;
        let t_rows = t_rows as usize;
        let k = n_in as usize;
        let n_out = n_out as usize;
        let o0 = (cube % tiles_out as usize) * tile;
        let t0 = (cube / tiles_out as usize) * tile;
        let stride = tile + 1;

        let mut xs = Shared::<[f32]>::new_slice(tile * (tile + 1));
        let mut ws = Shared::<[f32]>::new_slice(tile * (tile + 1));

        let x_row = t0 + ty;
        let w_row = o0 + ty;
        let mut acc = 0.0f32;
        let mut k0 = 0usize;
        while k0 < k {
            let kk = k0 + tx;
            let mut xv = 0.0f32;
            if x_row < t_rows && kk < k {
                xv = x[x_row * k + kk];
            }
            xs[ty * stride + tx] = xv;
            let mut wv = 0.0f32;
            if w_row < n_out && kk < k {
                wv = f32::cast_from(w[w_row * k + kk]);
            }
            ws[ty * stride + tx] = wv;
            sync_cube();

            #[unroll]
            for j in 0..tile {
                acc += xs[ty * stride + j] * ws[tx * stride + j];
            }
            sync_cube();
            k0 += tile;
        }

        let out_col = o0 + tx;
        if x_row < t_rows && out_col < n_out {
            y[x_row * n_out + out_col] = acc;
        }
    }
}

/// `y = x · Wᵀ` by tiled v1 for `(t, n_in, n_out)` (checked by the caller, `matmul::linear_into`).
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    (t, n_in, n_out): (usize, usize, usize),
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if TILE * TILE > hw.max_units_per_cube || TILE > hw.max_cube_dim.0 || TILE > hw.max_cube_dim.1 {
        return Err(Error::Unsupported(format!("matmul tiled v1 needs {TILE}×{TILE} units per cube ({} allowed)", hw.max_units_per_cube)));
    }
    let tile = TILE as usize;
    let tiles_out = n_out.div_ceil(tile);
    let tiles_total = tiles_out * t.div_ceil(tile);
    let tiles_total_u32 = u32::try_from(tiles_total).map_err(|_| Error::Shape(format!("linear: {tiles_total} output tiles exceed u32")))?;
    let count = CubeCountSelection::new(client, tiles_total_u32).cube_count();
    macro_rules! go {
        ($w:ty) => {
            unsafe {
                matmul_tiled_v1::launch::<$w>(
                    client,
                    count,
                    CubeDim::new_2d(TILE, TILE),
                    x.as_arg(1),
                    w.as_arg(1),
                    y.as_arg(1),
                    t as u32,
                    n_in as u32,
                    n_out as u32,
                    tiles_out as u32,
                    tiles_total_u32,
                    tile,
                );
            }
        };
    }
    with_float!(w.dtype, go);
    Ok(())
}
