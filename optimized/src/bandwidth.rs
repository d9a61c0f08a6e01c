//! Measured device memory bandwidth: the roofline every benchmark figure is set against.

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

/// Device copy rate in bytes/s (bytes read + bytes written), best of `reps` copies of a
/// `bytes`-sized buffer (after one warm-up, which includes the kernel compile).
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
        let count = CubeCountSelection::new(client, cubes).cube_count();
        unsafe {
            copy_kernel::launch(client, count, CubeDim::new_1d(units), 4, x.as_arg(4), y.as_arg(4), n32);
        }
        cubecl::future::block_on(client.sync())?;
        if r > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok((2 * n * 16) as f64 / best)
}
