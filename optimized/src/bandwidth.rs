//! Measured device memory bandwidth: the roofline every benchmark figure is set against.

// The cube launch macro adds `_n` twins of kernel arguments.
#![allow(clippy::duplicate_underscore_argument)]

use std::time::Instant;

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::{Client, DeviceTensor, Error};

/// `y[i] = x[i]` over vectors of N f32 (N = 4: 16-byte loads and stores).
#[cube(launch)]
fn copy_kernel<N: Size>(x: &[Vector<f32, N>], y: &mut [Vector<f32, N>], n: u32) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        y[i] = x[i];
    }
}

/// Copies timed per sync: the wait for the device (a submission round trip, ~1 ms on some
/// wgpu drivers) is paid once per batch, not once per copy. `tandem bench --kernel copy` on an
/// H200 (1 GiB, vectors of 4, 256 units): 1 / 8 / 32 copies per sync measured 3,311 / 3,938 /
/// 4,109 GB/s through Vulkan and 4,049 / 4,210 / 4,254 GB/s on CUDA — at 32 both backends see
/// the same memory system (97%).
const COPIES_PER_SYNC: usize = 32;

/// Device copy rate in bytes/s (bytes read + bytes written), best of `reps` batches of
/// [`COPIES_PER_SYNC`] copies of a `bytes`-sized buffer (after one warm-up batch, which
/// includes the kernel compile).
pub fn copy_rate(client: &Client, bytes: usize, reps: usize) -> Result<f64, Error> {
    copy_rate_with(client, bytes, reps, CopyShape { vector: 4, units: 256, per_sync: COPIES_PER_SYNC })
}

/// How [`copy_rate_with`] copies: f32s per load (1, 2 or 4), units per cube, copies per sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyShape {
    pub vector: usize,
    pub units: u32,
    pub per_sync: usize,
}

/// [`copy_rate`] with the copy's shape given (`tandem bench --kernel copy` sweeps it).
pub fn copy_rate_with(client: &Client, bytes: usize, reps: usize, shape: CopyShape) -> Result<f64, Error> {
    let CopyShape { vector, units, per_sync } = shape;
    if ![1, 2, 4].contains(&vector) || units == 0 || per_sync == 0 {
        return Err(Error::Shape(format!("copy: {shape:?} (vector 1, 2 or 4; units and copies ≥ 1)")));
    }
    let n = (bytes / (4 * vector)).max(1);
    let x = DeviceTensor::empty_f32(client, &[n * vector]);
    let y = DeviceTensor::empty_f32(client, &[n * vector]);
    let n32 = u32::try_from(n).map_err(|_| Error::Shape(format!("copy of {n} vectors exceeds u32")))?;
    let cubes = n32.div_ceil(units);
    let mut best = f64::MAX;
    for r in 0..reps + 1 {
        let t = Instant::now();
        // ABSOLUTE_POS counts over the whole (possibly multi-dimensional) grid.
        for _ in 0..per_sync {
            let count = CubeCountSelection::new(client, cubes).cube_count();
            unsafe {
                copy_kernel::launch(client, count, CubeDim::new_1d(units), vector, x.as_arg(vector), y.as_arg(vector), n32);
            }
        }
        cubecl::future::block_on(client.sync())?;
        if r > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok((per_sync * 2 * n * 4 * vector) as f64 / best)
}
