//! `embedding(V, C, T, dtype)`: `optimized::kernels::embedding_into` vs
//! `reference::ops::embedding::embedding` on the same (dtype-rounded) table. Exact. The output
//! is NaN-poisoned before the launch. With a scale (Gemma's `√C`): the `*_scaled_into` launchers
//! vs the reference's gather times the scale in f32 (`reference::arch::model`'s order), exact.

use ndarray::Array2;
use optimized::{Client, DeviceTensor};

use super::outcome;
use crate::{compare, rand_vec, round_to, tolerance, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct EmbeddingCase {
    pub v: usize,
    pub c: usize,
    pub t: usize,
    pub dtype: Dtype,
    /// Pass the ids through a device buffer (`embedding_device_ids_into`) instead of a host slice.
    pub device_ids: bool,
    /// Each gathered value times this (1: the unscaled launchers).
    pub scale: f32,
}

/// `Skip` when the device cannot do arithmetic in `d`.
pub(crate) fn skip_unsupported(client: &Client, d: Dtype) -> Option<Outcome> {
    (!d.device().supported(client)).then(|| Outcome::Skip(format!("{} not supported on {}", d.name(), optimized::device_info(client).name)))
}

/// Compare under `op`'s tolerance for `dtype`.
pub(crate) fn judge(got: &[f32], want: &[f32], op: Op, dtype: Dtype) -> Outcome {
    match compare(got, want, tolerance(op, dtype).0) {
        Ok(m) => Outcome::Pass(m),
        Err(e) => Outcome::Fail(e),
    }
}

/// Ids for a case: the first and last row, repeats, and a spread in between.
pub fn ids(v: usize, t: usize) -> Vec<u32> {
    (0..t)
        .map(|i| {
            let id = match i {
                0 => v - 1,
                1 => 0,
                _ if i % 5 == 4 => (i * 7919) % v,
                _ => (((i as u64 * 2_654_435_761) >> 7) % v as u64) as usize,
            };
            id as u32
        })
        .collect()
}

impl Case for EmbeddingCase {
    fn op(&self) -> Op {
        Op::Embedding
    }
    fn name(&self) -> String {
        let scale = if self.scale == 1.0 { String::new() } else { format!(",scale={}", self.scale) };
        format!("embedding(V={},C={},T={},{}{}{scale})", self.v, self.c, self.t, self.dtype.name(), if self.device_ids { ",device-ids" } else { "" })
    }
    fn run(&self, client: &Client) -> Outcome {
        if let Some(s) = skip_unsupported(client, self.dtype) {
            return s;
        }
        let (v, c, t) = (self.v, self.c, self.t);
        let table = round_to(&rand_vec(v * c, 21), self.dtype);
        let ids = ids(v, t);
        let Ok(ta) = Array2::from_shape_vec((v, c), table.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        let want = match reference::ops::embedding::embedding(ta.view(), &ids) {
            Ok(w) => w.iter().map(|&x| if self.scale == 1.0 { x } else { x * self.scale }).collect::<Vec<f32>>(),
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        outcome((|| {
            let td = DeviceTensor::from_f32_as(client, &table, &[v, c], self.dtype.device())?;
            let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * c], &[t, c])?;
            match (self.device_ids, self.scale == 1.0) {
                (true, true) => optimized::kernels::embedding_device_ids_into(client, &td, &DeviceTensor::from_u32(client, &ids, &[t])?, &out)?,
                (true, false) => {
                    optimized::kernels::embedding_device_ids_scaled_into(client, &td, &DeviceTensor::from_u32(client, &ids, &[t])?, self.scale, &out)?
                }
                (false, true) => optimized::kernels::embedding_into(client, &td, &ids, &out)?,
                (false, false) => optimized::kernels::embedding_scaled_into(client, &td, &ids, self.scale, &out)?,
            }
            // An out-of-range id must be refused on the host, naming it.
            match optimized::kernels::embedding_into(client, &td, &[0, v as u32], &DeviceTensor::empty_f32(client, &[2, c])) {
                Err(optimized::Error::Shape(m)) if m.contains(&v.to_string()) => {}
                other => return Ok(Outcome::Fail(format!("id {v} ≥ V not refused: {other:?}"))),
            }
            Ok(judge(&out.to_f32(client)?, &want, Op::Embedding, self.dtype))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for (vocab, c, t) in [(1000, 64, 7), (37, 577, 13), (32003, 128, 1), (5, 1, 3), (257, 2, 300), (49152, 96, 17)] {
            v.push(Box::new(EmbeddingCase { v: vocab, c, t, dtype, device_ids: false, scale: 1.0 }));
        }
        v.push(Box::new(EmbeddingCase { v: 101, c: 96, t: 9, dtype, device_ids: true, scale: 1.0 }));
        // Gemma's √C (C = 1152: Gemma-3 1B; C = 577 odd: vectors of 1), host and device ids.
        for (vocab, c, t) in [(1000, 1152, 5), (37, 577, 13)] {
            for device_ids in [false, true] {
                v.push(Box::new(EmbeddingCase { v: vocab, c, t, dtype, device_ids, scale: (c as f32).sqrt() }));
            }
        }
    }
    v
}
