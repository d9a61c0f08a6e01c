//! Token embedding gather: `x[t, :] = E[ids[t], :]`, table `[V, C]` stored as f32, f16 or bf16,
//! output `[T, C]` f32.
//!
//! Versions:
//! - v1: one unit per output vector of 4/2/1 elements (the widest that divides C), 256 units
//!   per cube; each unit reads its row's id, loads one table vector and converts it to f32
//!   (exact: f16 and bf16 values are all representable in f32). The launch is dispatched on
//!   the table's dtype.
//!
//! A scale on the gathered rows (Gemma: `√C`; [`embedding_scaled_into`],
//! [`embedding_device_ids_scaled_into`]): `x[t, :] = E[ids[t], :] · s`, one f32 multiply after
//! the conversion (the reference's order). A comptime switch: scale 1 runs the unscaled kernel.
//!
//! Ids are checked against V on the host ([`embedding`], [`embedding_into`]: an id ≥ V is an
//! [`Error::Shape`] naming it). [`embedding_device_ids_into`] takes ids already on the device
//! (e.g. from [`super::argmax`]) without a host round trip; there an id ≥ V yields a row of
//! zeros instead of an out-of-bounds read.

use cubecl::prelude::*;

use super::pdl::await_predecessor;
use super::swiglu::Elementwise;
use super::vector_size_for;
use crate::{Client, DeviceTensor, Dtype, Error};

/// v1 kernel. `table`: `V * vecs_per_row` vectors; `out`: `T * vecs_per_row` vectors, of which
/// the first `len` are written, times `scale` when `scaled`. `pdl`: [`await_predecessor`] first.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn embedding_v1<W: Float, N: Size>(
    table: &[Vector<W, N>],
    ids: &[u32],
    out: &mut [Vector<f32, N>],
    vecs_per_row: u32,
    vocab: u32,
    len: u32,
    scale: f32,
    #[comptime] scaled: bool,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let vpr = vecs_per_row as usize;
        let t = i / vpr;
        let col = i - t * vpr;
        let id = ids[t];
        if id < vocab {
            let mut v = Vector::<f32, N>::cast_from(table[id as usize * vpr + col]);
            if scaled {
                v = v * Vector::<f32, N>::new(scale);
            }
            out[i] = v;
        } else {
            out[i] = Vector::<f32, N>::new(0.0);
        }
    }
}

fn check(client: &Client, table: &DeviceTensor, t_len: usize, out: &DeviceTensor) -> Result<(usize, usize), Error> {
    let [v, c] = table.shape[..] else {
        return Err(Error::Shape(format!("embedding: table shape {:?}, expected [V, C]", table.shape)));
    };
    if out.shape != [t_len, c] || out.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("embedding: out is {:?} {}, expected [{t_len}, {c}] f32", out.shape, out.dtype.name())));
    }
    if !table.dtype.supported(client) {
        return Err(Error::Unsupported(format!("embedding: {} tables", table.dtype.name())));
    }
    Ok((v, c))
}

fn launch(client: &Client, table: &DeviceTensor, ids: &DeviceTensor, out: &DeviceTensor, v: usize, c: usize, scale: f32) -> Result<(), Error> {
    if !scale.is_finite() {
        return Err(Error::Shape(format!("embedding: scale {scale} is not finite")));
    }
    let t_len = ids.numel();
    if t_len == 0 || c == 0 {
        return Ok(());
    }
    let vec = vector_size_for(client, c);
    let e = Elementwise::with_vec(client, "embedding", t_len * c, vec)?;
    let vocab = u32::try_from(v).map_err(|_| Error::Shape(format!("embedding: V = {v} exceeds u32")))?;
    let vpr = (c / vec) as u32; // ≤ e.n, which fits u32
    macro_rules! go {
        ($w:ty) => {
            unsafe {
                embedding_v1::launch::<$w>(
                    client,
                    e.count,
                    e.dim,
                    vec,
                    table.as_arg(vec),
                    ids.as_arg(1),
                    out.as_arg(vec),
                    vpr,
                    vocab,
                    e.n,
                    scale,
                    scale != 1.0,
                    super::pdl::enabled(client),
                )
            }
        };
    }
    match table.dtype {
        Dtype::F32 => go!(f32),
        Dtype::F16 => go!(half::f16),
        Dtype::BF16 => go!(half::bf16),
        Dtype::E4M3 => return Err(Error::Unsupported("embedding: an e4m3 table (e4m3 is a KV pool type)".into())),
    }
    Ok(())
}

/// Gathers rows `ids` (host slice, each checked `< V`) of `table [V, C]` into `out [T, C]` f32.
pub fn embedding_into(client: &Client, table: &DeviceTensor, ids: &[u32], out: &DeviceTensor) -> Result<(), Error> {
    embedding_scaled_into(client, table, ids, 1.0, out)
}

/// [`embedding_into`] with each gathered value times `scale` (finite; Gemma: `√C`, 1 elsewhere:
/// the unscaled kernel).
pub fn embedding_scaled_into(client: &Client, table: &DeviceTensor, ids: &[u32], scale: f32, out: &DeviceTensor) -> Result<(), Error> {
    let (v, c) = check(client, table, ids.len(), out)?;
    if let Some((t, &id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= v) {
        return Err(Error::Shape(format!("embedding: token id {id} at position {t} is outside the vocabulary (V = {v})")));
    }
    if ids.is_empty() {
        return Ok(());
    }
    let idd = DeviceTensor::from_u32(client, ids, &[ids.len()])?;
    launch(client, table, &idd, out, v, c, scale)
}

/// [`embedding_into`] into a new `[T, C]` f32 tensor.
pub fn embedding(client: &Client, table: &DeviceTensor, ids: &[u32]) -> Result<DeviceTensor, Error> {
    let c = table.shape.get(1).copied().unwrap_or(0);
    let out = DeviceTensor::empty_f32(client, &[ids.len(), c]);
    embedding_into(client, table, ids, &out)?;
    Ok(out)
}

/// Like [`embedding_into`] with ids `[T]` (u32) already on the device. Not checked against V
/// on the host: a row whose id is ≥ V is written as zeros.
pub fn embedding_device_ids_into(client: &Client, table: &DeviceTensor, ids: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    embedding_device_ids_scaled_into(client, table, ids, 1.0, out)
}

/// [`embedding_device_ids_into`] with each gathered value times `scale` (see
/// [`embedding_scaled_into`]; rows of ids ≥ V stay zeros).
pub fn embedding_device_ids_scaled_into(
    client: &Client,
    table: &DeviceTensor,
    ids: &DeviceTensor,
    scale: f32,
    out: &DeviceTensor,
) -> Result<(), Error> {
    if ids.shape.len() != 1 {
        return Err(Error::Shape(format!("embedding: ids shape {:?}, expected [T]", ids.shape)));
    }
    let (v, c) = check(client, table, ids.numel(), out)?;
    launch(client, table, ids, out, v, c, scale)
}
