//! A block's MXFP4 experts from the file's bytes ([`StoredExperts`]: memory-mapped, ggml's or
//! HF's packing) straight into the load's host chunks in the device's layout, every row
//! repacked and checked in parallel — no per-expert copies on the host.

use std::ops::Range;

use rayon::prelude::*;
use reference::gpt_oss::weights::StoredExperts;
use reference::quant::mxfp4::{BLOCK, BLOCK_BYTES};

use super::Staging;
use crate::kernels::moe::Mxfp4Experts;
use crate::{Client, DeviceTensor, Dtype, Error};

impl Mxfp4Experts {
    /// The experts `held` (global ids: all of `s`'s, or an expert-parallel rank's share) of `s`
    /// on the device, expert `held.start` first: row `i` of expert `e` is
    /// [`StoredExperts::row_into`]'s (the layout [`Mxfp4Experts::upload_glu`] /
    /// [`Mxfp4Experts::upload`] build from [`reference::gpt_oss::ExpertWeights`], byte for byte).
    /// The copies may still be in flight: the caller finishes `staging` before a kernel reads
    /// them.
    pub fn upload_stored(client: &Client, staging: &Staging, s: &StoredExperts<'_>, held: Range<usize>) -> Result<Self, Error> {
        s.check().map_err(Error::from)?;
        if held.is_empty() || held.end > s.n_experts {
            return Err(Error::Shape(format!("{}: experts {held:?} of {}", s.name, s.n_experts)));
        }
        let (n, out, in_dim, x0) = (held.len(), s.out(), s.in_dim, held.start);
        let (nb, bpr) = (in_dim / BLOCK, in_dim / BLOCK * BLOCK_BYTES);
        let len = n * out * bpr;
        crate::kernels::attention::naive::u32_of("expert words", len / 4)?;
        // The scales are 1/16 of the blocks: gathered on the host in the same pass, sent after.
        let mut scales = vec![0u8; n * out * nb];
        let data = client.empty(len.max(4));
        staging.write(client, &data, 0, len, len.max(4), bpr, |off, o| {
            let first = off / bpr;
            let sc = scales
                .get_mut(first * nb..first * nb + o.len() / bpr * nb)
                .ok_or_else(|| Error::Shape(format!("{}: rows past the scales", s.name)))?;
            o.par_chunks_mut(bpr).zip(sc.par_chunks_mut(nb.max(1))).enumerate().try_for_each(|(k, (b, sc))| {
                let g = first + k;
                s.row_into(x0 + g / out, g % out, b, sc).map_err(Error::from)
            })
        })?;
        let scale_words = staging.upload_words(client, &scales)?;
        Ok(Mxfp4Experts {
            n_experts: n,
            out,
            in_dim,
            data: DeviceTensor { handle: data, shape: vec![len / 4], dtype: Dtype::F32, read_only: true, lease: None },
            scales: DeviceTensor { handle: scale_words, shape: vec![scales.len().div_ceil(4)], dtype: Dtype::F32, read_only: true, lease: None },
            bias: DeviceTensor::from_f32(client, &s.bias[x0 * out..held.end * out], &[n, out])?.into_read_only(),
            pairs: crate::kernels::qmatmul::v2::pairs_supported(client),
        })
    }
}
