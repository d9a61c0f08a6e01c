//! Constrained decoding's token mask on the device, in place on the logits before the draw:
//! `z_i ← −∞` where bit `i % 32` of word `i / 32` of the row's mask is 0 — the mask line of
//! `engine::sampling::seeded` (`apply_mask`, the reference), for the rows that carry a mask;
//! the others are not touched.
//!
//! Layout: the step's masks as ONE `[M, W]` u32 buffer (W = ceil(V / 32), one row per masked
//! logits row, uploaded once per step) and `targets [M]` u32, the logits row of each mask row.
//!
//! The draw applies the penalties after this kernel where the reference applies them before
//! the mask: the two commute exactly, since a masked logit is −∞ either way (`−∞ / r`,
//! `−∞ · r` and `−∞ − f·c − π` are −∞ for the finite r > 0, f, π the parameters are checked
//! to be) and an allowed one is not touched by the mask.
//!
//! Versions:
//! - v1: one unit per (mask row, id), `M · V` units in the grid of `Elementwise` (256 a cube);
//!   the 32 units of a word read it once (a broadcast), writes only where masked. −∞ is a
//!   launch scalar (WGSL has no literal for it).

use cubecl::prelude::*;

use super::pdl::await_predecessor;
use super::swiglu::{check_f32, Elementwise};
use crate::{Client, DeviceTensor, Error};

/// v1 kernel: unit `e < count` (`M · V`) tests id `i = e % V` against mask row `m = e / V`
/// and writes `ninf` (−∞) into logits row `targets[m]` (`< rows`; others are skipped) where
/// the bit is 0.
#[cube(launch)]
pub fn token_mask_v1(z: &mut [f32], words: &[u32], targets: &[u32], count: u32, v: u32, w: u32, rows: u32, ninf: f32, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let e = ABSOLUTE_POS;
    if e < count as usize {
        let m = e / v as usize;
        let i = e % v as usize;
        let row = targets[m];
        let word = words[m * w as usize + i / 32];
        if row < rows && ((word >> (i % 32) as u32) & 1u32) == 0u32 {
            z[row as usize * v as usize + i] = ninf;
        }
    }
}

/// Applies the masks `words` (`[M, ceil(V / 32)]` u32) to the logits rows `targets` (`[M]`
/// u32, each < R) of `logits` (`[R, V]` f32), in place.
pub fn token_mask(client: &Client, logits: &DeviceTensor, words: &DeviceTensor, targets: &DeviceTensor) -> Result<(), Error> {
    check_f32("token_mask", "logits", logits)?;
    let (rows, v) = match logits.shape[..] {
        [r, v] => (r, v),
        _ => return Err(Error::Shape(format!("token_mask: logits {:?}, expected [R, V]", logits.shape))),
    };
    let w = v.div_ceil(32);
    let m = targets.numel();
    if targets.dtype.size() != 4 || words.dtype.size() != 4 || words.numel() != m * w {
        return Err(Error::Shape(format!("token_mask: masks {:?} for {m} rows of {w} u32 words (V = {v})", words.shape)));
    }
    let e = Elementwise::with_vec(client, "token_mask", m * v, 1)?;
    if e.n == 0 {
        return Ok(());
    }
    let u = |x: usize, what: &str| u32::try_from(x).map_err(|_| Error::Shape(format!("token_mask: {what} {x} exceeds u32")));
    unsafe {
        token_mask_v1::launch(
            client,
            e.count,
            e.dim,
            logits.as_arg(1),
            words.as_arg(1),
            targets.as_arg(1),
            e.n,
            u(v, "V")?,
            u(w, "words per row")?,
            u(rows, "rows")?,
            f32::NEG_INFINITY,
            super::pdl::enabled(client),
        );
    }
    Ok(())
}

/// Uploads the masks of some rows of `logits` (`(logits row, words)`, each `ceil(V / 32)`
/// words) as one buffer and applies them ([`token_mask`]); nothing when `masks` is empty.
pub fn token_mask_rows(client: &Client, logits: &DeviceTensor, masks: &[(usize, &[u32])]) -> Result<(), Error> {
    if masks.is_empty() {
        return Ok(());
    }
    let v = logits.shape.last().copied().unwrap_or(0);
    let w = v.div_ceil(32);
    let mut words = Vec::with_capacity(masks.len() * w);
    let mut targets = Vec::with_capacity(masks.len());
    for &(row, mask) in masks {
        if mask.len() != w {
            return Err(Error::Shape(format!("token_mask: a mask of {} words for logits row {row} (V = {v}: {w} words)", mask.len())));
        }
        words.extend_from_slice(mask);
        targets.push(u32::try_from(row).map_err(|_| Error::Shape(format!("token_mask: logits row {row} exceeds u32")))?);
    }
    let wd = DeviceTensor::from_u32(client, &words, &[masks.len(), w])?;
    let td = DeviceTensor::from_u32(client, &targets, &[masks.len()])?;
    token_mask(client, logits, &wd, &td)
}
