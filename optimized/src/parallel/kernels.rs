//! The device kernels that keep a tensor-parallel rank's decode step off the host, so that
//! it can be recorded into a decode graph (`runner::graphs`) like a single GPU's:
//! - [`local_ids`]: token ids (the step's, or those the previous step drew, on the device) to
//!   the rows of this rank's vocabulary part of the embedding table — `id − lo` for an id the
//!   rank holds, the zero row `vocab_part` for any other (`TpRank::local_ids` on the host);
//! - [`vocab_gather`]: the all-gathered `[N, T, vocab_part + 1]` parts of the logits to the
//!   whole `[T, V]` (the zero row's column and the last rank's padding dropped), which every
//!   rank then draws from alike;
//! - [`zeros`]: the buffer a rank's share of a MoE output is summed into before the all-reduce
//!   (the experts' kernels add into their output, as they add into the residual stream on one
//!   device).

use cubecl::prelude::*;

use crate::kernels::pdl::{self, await_predecessor};
use crate::kernels::swiglu::{check_f32, Elementwise};
use crate::{Client, DeviceTensor, Error};

/// v1: one unit per id.
#[cube(launch)]
pub fn local_ids_v1(ids: &[u32], out: &mut [u32], lo: u32, hi: u32, zero_row: u32, rows: u32, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < rows as usize {
        let id = ids[i];
        let mut row = zero_row;
        if id >= lo && id < hi {
            row = id - lo;
        }
        out[i] = row;
    }
}

/// v1: one unit per logit of the whole `[T, V]`.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn vocab_gather_v1(all: &[f32], out: &mut [f32], t_rows: u32, width: u32, part: u32, vocab: u32, len: u32, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let row = i / vocab as usize;
        let v = i % vocab as usize;
        let r = v / part as usize;
        let j = v % part as usize;
        out[i] = all[(r * t_rows as usize + row) * width as usize + j];
    }
}

/// v1: one unit per element.
#[cube(launch)]
pub fn zeros_v1(out: &mut [f32], len: u32, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < len as usize {
        out[i] = 0.0;
    }
}

/// A `shape` f32 tensor of zeros, written on the device (a launch: recorded into a decode
/// graph like the rest of the step).
pub fn zeros(client: &Client, shape: &[usize]) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty_f32(client, shape);
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let e = Elementwise::with_vec(client, "zeros", n, 1)?;
    unsafe {
        zeros_v1::launch(client, e.count, e.dim, out.as_arg(1), e.n, pdl::enabled(client));
    }
    Ok(out)
}

fn u32_of(op: &str, what: &str, n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::Shape(format!("{op}: {what} = {n} exceeds the u32 range")))
}

/// The rows of a rank's table that the token ids `ids [T]` (u32) read: `id − vocab.start` for
/// the ids in `vocab`, `zero_row` for the others. Ids of the whole vocabulary are the caller's
/// to check (the host checks a step's ids; drawn ids are inside it).
pub fn local_ids(client: &Client, ids: &DeviceTensor, vocab: &std::ops::Range<usize>, zero_row: usize) -> Result<DeviceTensor, Error> {
    if ids.shape.len() != 1 {
        return Err(Error::Shape(format!("local_ids: ids shape {:?}, expected [T]", ids.shape)));
    }
    let rows = ids.numel();
    let out = DeviceTensor::empty(client, &[rows], ids.dtype);
    if rows == 0 {
        return Ok(out);
    }
    let e = Elementwise::with_vec(client, "local_ids", rows, 1)?;
    let (lo, hi, zero) =
        (u32_of("local_ids", "vocab start", vocab.start)?, u32_of("local_ids", "vocab end", vocab.end)?, u32_of("local_ids", "zero row", zero_row)?);
    unsafe {
        local_ids_v1::launch(client, e.count, e.dim, ids.as_arg(1), out.as_arg(1), lo, hi, zero, e.n, pdl::enabled(client));
    }
    Ok(out)
}

/// The whole logits `[T, vocab]` (f32) from `all [N, T, part + 1]` (f32): column `r·part + j`
/// is rank r's column j; each rank's last column and the columns past `vocab` are dropped.
pub fn vocab_gather(client: &Client, all: &DeviceTensor, part: usize, vocab: usize) -> Result<DeviceTensor, Error> {
    check_f32("vocab_gather", "the gathered logits", all)?;
    let (n, t, width) = match all.shape[..] {
        [n, t, w] if w == part + 1 && part > 0 && n * part >= vocab => (n, t, w),
        _ => {
            return Err(Error::Shape(format!("vocab_gather: gathered logits {:?}, expected [N, T, {}] covering V = {vocab}", all.shape, part + 1)));
        }
    };
    let out = DeviceTensor::empty_f32(client, &[t, vocab]);
    if t * vocab == 0 || n == 0 {
        return Ok(out);
    }
    let e = Elementwise::with_vec(client, "vocab_gather", t * vocab, 1)?;
    let (tr, w, p, v) = (
        u32_of("vocab_gather", "T", t)?,
        u32_of("vocab_gather", "width", width)?,
        u32_of("vocab_gather", "part", part)?,
        u32_of("vocab_gather", "V", vocab)?,
    );
    u32_of("vocab_gather", "gathered elements", all.numel())?;
    unsafe {
        vocab_gather_v1::launch(client, e.count, e.dim, all.as_arg(1), out.as_arg(1), tr, w, p, v, e.n, pdl::enabled(client));
    }
    Ok(out)
}
