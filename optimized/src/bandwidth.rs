//! Measured device memory bandwidth: the roofline every benchmark figure is set against.

// The cube launch macro adds `_n` twins of kernel arguments.
#![allow(clippy::duplicate_underscore_argument)]

use std::time::Instant;

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::{Client, DeviceTensor, Error};

/// `y[i] = x[i]` over vectors of 4 f32 (16-byte loads and stores).
#[cube(launch)]
fn copy_kernel<N: Size>(x: &[Vector<f32, N>], y: &mut [Vector<f32, N>], n: u32) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        y[i] = x[i];
    }
}

/// Copies timed per sync: the wait for the device (a submission round trip, ~1 ms on some
/// wgpu drivers) is paid once per batch, not once per copy — with one copy per sync a 1 GiB
/// copy on an H200 through Vulkan measured 1,432 GB/s, a third of the device's rate.
const COPIES_PER_SYNC: usize = 8;

/// Device copy rate in bytes/s (bytes read + bytes written), best of `reps` batches of
/// [`COPIES_PER_SYNC`] copies of a `bytes`-sized buffer (after one warm-up batch, which
/// includes the kernel compile).
pub fn copy_rate(client: &Client, bytes: usize, reps: usize) -> Result<f64, Error> {
    let n = (bytes / 16).max(1);
    let x = DeviceTensor::empty_f32(client, &[n * 4]);
    let y = DeviceTensor::empty_f32(client, &[n * 4]);
    let n32 = u32::try_from(n).map_err(|_| Error::Shape(format!("copy of {n} vectors exceeds u32")))?;
    let units = 256u32;
    let cubes = n32.div_ceil(units);
    let mut best = f64::MAX;
    for r in 0..reps + 1 {
        let t = Instant::now();
        // ABSOLUTE_POS counts over the whole (possibly multi-dimensional) grid.
        for _ in 0..COPIES_PER_SYNC {
            let count = CubeCountSelection::new(client, cubes).cube_count();
            unsafe {
                copy_kernel::launch(client, count, CubeDim::new_1d(units), 4, x.as_arg(4), y.as_arg(4), n32);
            }
        }
        cubecl::future::block_on(client.sync())?;
        if r > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok((COPIES_PER_SYNC * 2 * n * 16) as f64 / best)
}
