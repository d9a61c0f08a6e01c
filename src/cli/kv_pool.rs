//! The batched engine's KV pool size: by default what the device has left after the weights
//! (`--gpu-memory-utilization`, vLLM's flag and default), else `--kv-tokens`; and the default
//! `--max-seqs` that pool holds.
//!
//! Memory-sized pool = F × device total − (memory in use once the weights are loaded + a
//! reserve for activations and decode graphs), rounded down to whole blocks. The device's
//! total and free memory come from the CUDA driver (`optimized::memory_free`); wgpu cannot
//! report them, so there (and on the CPU) the pool keeps the fixed default (the context, at
//! least 16384 positions) and the start line says so.
//!
//! The reserve is an estimate from the model's widths, not a measurement: an eager step of
//! `max_batched_tokens` rows (every row's hidden, q|k|v and FFN activations, the logits of
//! the rows that draw) plus every decode graph recorded at start — a recording keeps the
//! buffers it touched, so each (bucket, table width, greedy/sampled) holds its own bucket's
//! rows of activations and logits — plus 512 MiB of allocator slack.

use reference::Config;

use super::{CliError, Result};

/// Positions of a typical sequence for the default `--max-seqs`: a 1k-token prompt and a
/// 1k-token answer (the shape of vLLM's and this project's serving benchmarks).
pub const TYPICAL_SEQ: usize = 2048;
/// The most sequences `--max-seqs` defaults to: the largest decode-graph bucket (steps of
/// more rows run eagerly), twice vLLM's default of 256 on H100-class cards.
pub const MAX_DEFAULT_SEQS: usize = 512;
/// Allocator slack kept free beyond the estimate (cubecl's pools, RoPE tables).
const SLACK: u64 = 512 << 20;

/// How a runner's KV pool is sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvSize {
    /// At least this many positions (whole blocks).
    Tokens(usize),
    /// The default without `--gpu-memory-utilization`: this many positions (the context, at
    /// least 16384). Memory sizing is opt-in until its reserve is measured: on an H100 80GB
    /// HBM3, GPT-OSS-20B at 0.9 left a 38 GB pool whose first 256-request step ran out of
    /// device memory (a 1.16 GB allocation) with the estimated 23.9 GB reserve.
    Fixed(usize),
    /// From the device's memory: `utilization` of its total, less what is in use after the
    /// weights and the reserve for a step of `step_tokens` rows and the decode graphs of up to
    /// `max_seqs` rows; `fallback` positions where the device cannot report its memory.
    Memory { utilization: f64, fallback: usize, step_tokens: usize, max_seqs: usize },
}

/// What a pool was sized to, for the start line.
#[derive(Debug, Clone, PartialEq)]
pub struct KvPool {
    pub positions: usize,
    pub bytes: u64,
    /// Whether it was sized from the device's memory.
    pub from_memory: bool,
    /// How it was sized, in words.
    pub how: String,
}

impl KvPool {
    /// The start line's account of the pool.
    pub fn line(&self) -> String {
        format!("KV pool {:.2} GB, {} positions; {}", self.bytes as f64 / 1e9, self.positions, self.how)
    }
}

/// `--gpu-memory-utilization`, checked.
pub fn utilization(f: f64) -> Result<f64> {
    if f.is_finite() && f > 0.0 && f <= 1.0 {
        return Ok(f);
    }
    Err(CliError::Usage(format!("--gpu-memory-utilization {f}: must be in (0, 1]")))
}

/// Positions of a pool of `utilization × total − used − reserve` bytes at `per_position`
/// bytes each, rounded down to whole blocks of `block` (0 when nothing is left); the runner
/// adds one spare block itself, which comes out of the same bytes.
pub fn positions_for(total: u64, used: u64, utilization: f64, reserve: u64, per_position: u64, block: usize) -> usize {
    let budget = (total as f64 * utilization) as u64;
    let left = budget.saturating_sub(used).saturating_sub(reserve);
    let block_bytes = per_position.max(1).saturating_mul(block.max(1) as u64);
    let blocks = (left / block_bytes) as usize;
    blocks.saturating_sub(1) * block
}

/// The default `--max-seqs` of a pool of `positions`: as many typical sequences (2048
/// positions, or the context if shorter) as it holds, at least 1, at most 512.
pub fn default_max_seqs(positions: usize, ctx: usize) -> usize {
    (positions / TYPICAL_SEQ.min(ctx).max(1)).clamp(1, MAX_DEFAULT_SEQS)
}

/// Bytes of one row's activations in a step, logits excluded (f32).
fn row_bytes(c: &Config) -> u64 {
    let qkv = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
    (4 * (8 * c.hidden + 2 * qkv + 4 * c.ffn)) as u64
}

/// Table widths (in blocks of `block`) the decode graphs pass through up to `ctx`: powers
/// of two, at least 16 (`optimized::runner::graphs`).
fn widths(ctx: usize, block: usize) -> u64 {
    let blocks = ctx.div_ceil(block.max(1)).max(1).next_power_of_two().max(16);
    u64::from(blocks.trailing_zeros() - 16usize.trailing_zeros() + 1)
}

/// The bytes kept free for activations and graphs (see the module's notes).
pub fn reserve(c: &Config, step_tokens: usize, max_seqs: usize, block: usize, buckets: &[usize]) -> u64 {
    let logits_row = 4 * c.vocab as u64;
    let eager = step_tokens as u64 * row_bytes(c) + 2 * max_seqs.min(step_tokens) as u64 * logits_row;
    let top = buckets.iter().copied().find(|&b| b >= max_seqs).unwrap_or(usize::MAX);
    let rows: u64 = buckets.iter().filter(|&&b| b <= top).map(|&b| b as u64).sum();
    let graphs = 2 * widths(c.max_ctx, block) * rows * (row_bytes(c) + logits_row);
    eager + graphs + SLACK
}

/// Blocks of `block` positions for a pool sized by `size`, on a device that reports
/// `memory` = (free, total) bytes (`None`: it cannot), for a model of widths `c` whose KV
/// takes `per_position` bytes a position; graph `buckets` as the runner records them.
pub fn blocks(size: KvSize, memory: Option<(u64, u64)>, c: &Config, per_position: u64, block: usize, buckets: &[usize]) -> Result<(usize, KvPool)> {
    let fixed = |positions: usize, how: String| {
        let blocks = positions.div_ceil(block).max(1);
        (blocks, KvPool { positions: blocks * block, bytes: (blocks * block) as u64 * per_position, from_memory: false, how })
    };
    match (size, memory) {
        (KvSize::Tokens(n), _) => Ok(fixed(n, "sized by --kv-tokens".into())),
        (KvSize::Fixed(n), _) => Ok(fixed(
            n,
            "the default size (the context, at least 16384 positions); --gpu-memory-utilization F sizes it from the device's memory, --kv-tokens sets it".into(),
        )),
        (KvSize::Memory { fallback, .. }, None) => Ok(fixed(
            fallback,
            "the default size (the context, at least 16384 positions): this device cannot report its free memory, so --gpu-memory-utilization does not apply; --kv-tokens sets it".into(),
        )),
        (KvSize::Memory { utilization, step_tokens, max_seqs, .. }, Some((free, total))) => {
            let used = total.saturating_sub(free);
            let reserve = reserve(c, step_tokens, max_seqs, block, buckets);
            let positions = positions_for(total, used, utilization, reserve, per_position, block);
            let gb = |b: u64| b as f64 / 1e9;
            if positions < c.max_ctx {
                return Err(CliError::Gpu(format!(
                    "KV pool: --gpu-memory-utilization {utilization} of {:.1} GB leaves room for {positions} positions ({:.1} GB in use after the weights, {:.1} GB kept for activations and graphs of up to {max_seqs} sequences), less than one {}-token context: raise --gpu-memory-utilization, lower --max-seqs, or set --kv-tokens",
                    gb(total),
                    gb(used),
                    gb(reserve),
                    c.max_ctx
                )));
            }
            let bytes = positions as u64 * per_position;
            let how = format!(
                "sized by --gpu-memory-utilization {utilization} of {:.1} GB ({:.1} GB in use after the weights, {:.1} GB kept for activations and the decode graphs of up to {max_seqs} sequences)",
                gb(total),
                gb(used),
                gb(reserve)
            );
            Ok((positions / block, KvPool { positions, bytes, from_memory: true, how }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    #[test]
    fn the_pool_is_what_the_utilization_leaves_in_whole_blocks_less_the_spare() {
        // 80 GB × 0.9 = 72; 14 in use, 8 reserved: 50 GB at 100 kB a position, blocks of 16.
        let p = positions_for(80 * GB, 14 * GB, 0.9, 8 * GB, 100_000, 16);
        assert_eq!(p, (50 * GB / 1_600_000 - 1) as usize * 16);
        assert_eq!(p % 16, 0);
        // Nothing left: 0, never an underflow.
        assert_eq!(positions_for(80 * GB, 75 * GB, 0.9, 0, 100_000, 16), 0);
        assert_eq!(positions_for(80 * GB, 10 * GB, 0.9, 70 * GB, 100_000, 16), 0);
        // Exactly one block's bytes: the spare takes it.
        assert_eq!(positions_for(1_600_000, 0, 1.0, 0, 100_000, 16), 0);
        assert_eq!(positions_for(3_200_000, 0, 1.0, 0, 100_000, 16), 16);
    }

    #[test]
    fn max_seqs_defaults_to_typical_sequences_between_1_and_512() {
        assert_eq!(default_max_seqs(560_000, 131_072), 273);
        assert_eq!(default_max_seqs(10_000_000, 131_072), 512);
        assert_eq!(default_max_seqs(100, 131_072), 1);
        // A short context counts whole contexts.
        assert_eq!(default_max_seqs(4096, 256), 16);
    }

    #[test]
    fn utilization_must_be_in_0_1() {
        assert_eq!(utilization(0.9).ok(), Some(0.9));
        assert_eq!(utilization(1.0).ok(), Some(1.0));
        for bad in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            let e = utilization(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("--gpu-memory-utilization") && e.contains("(0, 1]"), "{bad}: {e}");
        }
    }

    fn cfg(ctx: usize) -> Config {
        let mut c = reference::synthetic::real_config("smollm2-135m").expect("config");
        c.max_ctx = ctx;
        c
    }

    #[test]
    fn graph_widths_double_from_16_blocks_to_the_context() {
        assert_eq!(widths(256, 16), 1);
        assert_eq!(widths(16 * 16, 16), 1);
        assert_eq!(widths(16 * 17, 16), 2);
        assert_eq!(widths(131_072, 16), 10);
    }

    #[test]
    fn the_reserve_grows_with_the_graph_buckets_recorded() {
        let buckets = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
        let c = cfg(8192);
        let small = reserve(&c, 2048, 8, 16, &buckets);
        let big = reserve(&c, 2048, 512, 16, &buckets);
        assert!(big > small && small > SLACK);
        // Up to bucket 8: rows 1 + 2 + 4 + 8, two kinds, 6 widths (16 … 512 blocks).
        let per = row_bytes(&c) + 4 * c.vocab as u64;
        let eager = 2048 * row_bytes(&c) + 2 * 8 * 4 * c.vocab as u64;
        assert_eq!(small, eager + 2 * 6 * 15 * per + SLACK);
    }

    #[test]
    fn a_device_that_cannot_tell_keeps_the_fixed_size_and_a_short_pool_is_an_error() {
        let c = cfg(8192);
        let size = KvSize::Memory { utilization: 0.9, fallback: 16384, step_tokens: 2048, max_seqs: 32 };
        let (blocks_, pool) = blocks(size, None, &c, 1000, 16, &[1, 2]).expect("fallback");
        assert_eq!((blocks_, pool.positions, pool.from_memory), (1024, 16384, false));
        assert!(pool.how.contains("cannot report"), "{}", pool.how);
        let (b, pool) = blocks(KvSize::Tokens(100), Some((GB, 80 * GB)), &c, 1000, 16, &[1]).expect("tokens");
        assert_eq!((b, pool.positions), (7, 112));
        // 80 GB, 70 free: the pool of 0.9 × 80 − 10 − reserve.
        let (b, pool) = blocks(size, Some((70 * GB, 80 * GB)), &c, 1000, 16, &[1, 2]).expect("memory");
        assert!(pool.from_memory && pool.how.contains("--gpu-memory-utilization 0.9"), "{}", pool.how);
        assert_eq!(pool.positions, b * 16);
        assert_eq!(pool.positions, positions_for(80 * GB, 10 * GB, 0.9, reserve(&c, 2048, 32, 16, &[1, 2]), 1000, 16));
        // Too little for one context: the error names what to change.
        let e = blocks(size, Some((GB, 80 * GB)), &c, 1000, 16, &[1, 2]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("--gpu-memory-utilization") && e.contains("--kv-tokens") && e.contains("8192-token context"), "{e}");
    }
}
