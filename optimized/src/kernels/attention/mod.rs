//! Scaled dot-product attention with GQA, causal mask, optional sliding window and optional
//! per-head sink logits, against `reference::ops::attention::attention_sinks`.
//!
//! The query at absolute position i sees key j iff `j ≤ i` and, with a window W, `i − j < W`:
//! a contiguous range `lo ..= hi`. Query head h reads KV head `h / G` (G = H / Hkv; repeated
//! K/V are never materialized). Scores are `q·k · 1/√D`; a sink σ_h joins the softmax
//! denominator and is dropped from the output. A query that sees no key gets zeros.
//!
//! Versions:
//! - v1 naive ([`naive`]): contiguous `[cap, Hkv, D]` cache, scores materialized in global
//!   memory, two kernels (softmax rows, then P·V). No sinks. The baseline.
//! - v2 flash prefill ([`prefill`]): one sequence, T queries; paged cache read through the block
//!   table; Q/K/V tiles in shared memory, online softmax with f32 running max/sum per query
//!   row, output accumulated in shared memory and normalized once. Causal tiles past a
//!   query tile's last row are never loaded.
//! - v3 flash prefill ([`prefill_tc`]): v2's loop on the tensor cores (FlashAttention-2 with
//!   `mma.sync`): Q, K, V tiles and P rounded to f16, scores and sums in f32; one sequence or
//!   a varlen batch. Chosen by the callers ([`PrefillVersion`]) where a step's matmuls already
//!   round activations to 16 bits.
//! - v2 flash decode ([`decode`]): B sequences × one query each, mixed lengths; split-K
//!   ("flash-decoding"): each cube takes one KV head of one sequence and one chunk of keys for
//!   all G query heads of that KV head (K/V read once per group), writes a partial (max, sum,
//!   unnormalized output); a second kernel combines the chunks (and the sink). K/V rows are
//!   loaded as vectors of 4. Scores: each unit holds a (keys × G heads) register
//!   tile and reads each q vector once for all its keys, over a head-dim loop that is NOT
//!   unrolled — the first form (one unit per key, all loops unrolled) let the compiler hoist
//!   all G·D query values into registers: 255 registers, local-memory spills, 12.5%
//!   occupancy and ~3.6× the useful DRAM traffic (ncu on an H100, batch 32 × 16k keys).
//! - v3 flash decode: v2 in ONE launch — each cube publishes its partial, a device-scope
//!   storage sync + atomic arrival count elects the last cube of each (sequence, KV head),
//!   which combines. Needs `device_memory_scope` and u32 atomic add (CUDA; Vulkan); v2 is
//!   the fallback. Saves a launch per layer per decoded token.
//! - paged KV write ([`paged`]): new `[T, Hkv, D]` rows into the pools through the block table
//!   (the model fuses it with RoPE instead: `rope::qkv_rope_paged`).

pub mod decode;
mod decode_launch;
pub(crate) mod kv_elem;
pub mod naive;
pub mod paged;
pub mod prefill;
pub mod prefill_tc;
mod prefill_tc_tiles;
mod scores;
mod softmax;

pub use decode_launch::{flash_decode, flash_decode_tuned, flash_decode_with, max_decode_len, DecodeVersion, ScoreStep};
pub use naive::{attention, attention_into, kv_append};
pub use paged::kv_write_paged;
pub use prefill::{flash_prefill, flash_prefill_varlen, PrefillVersion, VarlenSeq};

use crate::kv_cache::BlockTables;
use crate::{DeviceTensor, Dtype, Error};

/// Masking options shared by the flash kernels.
#[derive(Debug, Clone, Copy, Default)]
pub struct Masking<'a> {
    /// Sliding window W ≥ 1, or none.
    pub window: Option<usize>,
    /// Sink logits `[H]` f32 on the device, or none.
    pub sinks: Option<&'a DeviceTensor>,
}

/// Checks shared by the flash launchers: pools `[rows, Hkv, D]` f32 or f16 (both alike)
/// matching the tables, q
/// `[N, H, D]` f32 with H a multiple of Hkv, sinks `[H]`, window ≥ 1. Returns (H, Hkv, D).
pub(crate) fn check_paged(
    op: &str,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    m: &Masking,
) -> Result<(usize, usize, usize), Error> {
    let err = |s: String| Err(Error::Shape(format!("{op}: {s}")));
    for (what, t, pool) in [("q", q, false), ("k pool", k, true), ("v pool", v, true)] {
        let ok = if pool { crate::kv_cache::pool_dtype_ok(t.dtype) } else { t.dtype == Dtype::F32 };
        if !ok || t.shape.len() != 3 {
            return err(format!("{what} is {:?} {}, expected 3 axes f32{}", t.shape, t.dtype.name(), if pool { " or f16" } else { "" }));
        }
    }
    if k.dtype != v.dtype {
        return err(format!("k pool is {}, v pool {}", k.dtype.name(), v.dtype.name()));
    }
    let (h, d) = (q.shape[1], q.shape[2]);
    let hkv = k.shape[1];
    if v.shape != k.shape || k.shape[2] != d {
        return err(format!("pools k {:?} / v {:?} do not match q {:?}", k.shape, v.shape, q.shape));
    }
    if hkv == 0 || h % hkv != 0 {
        return err(format!("{h} query heads not a multiple of {hkv} KV heads"));
    }
    if k.shape[0] != tables.num_blocks * tables.block_size {
        return err(format!("pool of {} rows, the tables describe {} blocks of {}", k.shape[0], tables.num_blocks, tables.block_size));
    }
    if m.window == Some(0) {
        return err("window 0 (use None for no window)".into());
    }
    if let Some(s) = m.sinks {
        if s.dtype != Dtype::F32 || s.shape != [h] {
            return err(format!("sinks {:?} {}, expected [{h}] f32", s.shape, s.dtype.name()));
        }
    }
    naive::u32_of("pool size", k.numel())?;
    naive::u32_of("q size", q.numel())?;
    Ok((h, hkv, d))
}
