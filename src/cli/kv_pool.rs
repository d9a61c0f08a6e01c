//! The batched engine's KV pool size: by default what the device has left after the weights,
//! the worst step's activations and the decode graphs (`--gpu-memory-utilization`, vLLM's
//! flag and default), else `--kv-tokens`; and the default `--max-seqs` that pool holds.
//!
//! Memory-sized pool, measured as vLLM's `profile_run` / `determine_available_memory` do:
//! once the weights are loaded, a runner with a minimal pool records every decode graph
//! serving will record (the buckets up to `--max-seqs` rows, greedy and sampled, every table
//! width up to the context; their activations in one arena all recordings share,
//! `optimized::arena`), then runs the worst step a step can be
//! (`optimized::runner::profile::worst_step`: `max_batched_tokens` rows, as many drawing as
//! `--max-seqs` allows, decode rows as long as the decode kernels take) — in serving's order:
//! a recording guards the pages it touches, so the order decides which pages a step can
//! reuse. The device's memory in use then (the CUDA driver's `cuMemGetInfo`) counts the
//! weights, the graphs and what they pin, and the step's activations: cubecl's memory pools
//! keep the pages a step allocated after its buffers drop, which is what the next step reuses.
//! The runner is then dropped and its pages released (cubecl's explicit cleanup; the arena's
//! buffers stay with the model's client for the serving runner's recordings), and the pool is
//!
//!   `utilization × total − (in use after the graphs and the step − the profile's own pool)`
//!
//! rounded down to whole blocks; the serving runner records the same graphs again with its
//! final pool (a recording holds the pools' buffers, so graphs recorded over the profile's
//! pool cannot serve the final one), allocating again what the profile's recordings held.
//! The profile's pool holds one context (the graphs' tables pad to powers of two capped by
//! the pool: a smaller pool would record one graph per width past it).
//! wgpu cannot report its memory, so there (and on the CPU) the pool keeps the fixed default
//! (the context, at least 16384 positions) and the start line says so.

use reference::Config;

use super::{CliError, Result};

/// Positions of a typical sequence for the default `--max-seqs`: a 1k-token prompt and a
/// 1k-token answer (the shape of vLLM's and this project's serving benchmarks).
pub const TYPICAL_SEQ: usize = 2048;
/// The most sequences `--max-seqs` defaults to: the largest decode-graph bucket (steps of
/// more rows run eagerly). vLLM defaults to 256, and to 1,024 in its API server on cards of
/// 70 GB and more, whose CUDA graphs still stop at 512 rows; on an H100 GPT-OSS-20B served
/// 1,024 sequences 2% faster than 512 at a third more TPOT (issue 52).
pub const MAX_DEFAULT_SEQS: usize = 512;
/// `--gpu-memory-utilization`'s default (vLLM's).
pub const DEFAULT_UTILIZATION: f64 = 0.9;

/// How a runner's KV pool is sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvSize {
    /// At least this many positions (whole blocks).
    Tokens(usize),
    /// From the device's memory: `utilization` of its total, less what is in use after the
    /// weights load and the worst step of `step_tokens` rows and the decode graphs of up to
    /// `max_seqs` rows ran; `fallback` positions where the device cannot report its memory.
    Memory { utilization: f64, fallback: usize, step_tokens: usize, max_seqs: usize },
}

/// What the device held at each point of the profile, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub total: u64,
    /// In use once the weights were loaded.
    pub weights: u64,
    /// In use after the decode graphs were recorded.
    pub graphs: u64,
    /// In use after the worst step ran too (its pages kept): what serving needs besides its
    /// pool.
    pub step: u64,
    /// The decode rows' length the worst step ran (the widest the decode kernels take).
    pub decode_len: usize,
    /// The graph recording's line.
    pub recorded: String,
}

/// What the decode graphs and the worst step took in the profile beyond their `arena` (its
/// buffers outlive the profile), where the `free` bytes left once the serving pools are
/// allocated are less; `None` where it fits.
pub fn headroom_short(m: &Measured, free: u64, arena: u64) -> Option<u64> {
    let need = m.step.saturating_sub(m.weights).saturating_sub(arena);
    (free < need).then_some(need)
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
    /// How it is split between the KV groups, where the model has sliding-window layers
    /// (`super::kv_groups`).
    pub groups: Option<String>,
}

impl KvPool {
    /// The start line's account of the pool.
    pub fn line(&self) -> String {
        let groups = self.groups.as_ref().map_or(String::new(), |g| format!("; {g}"));
        format!("KV pool {:.2} GB, {} positions; {}{groups}", self.bytes as f64 / 1e9, self.positions, self.how)
    }
}

/// `--swap-space` in bytes (GB, ≥ 0).
pub fn swap_space(gb: f64) -> Result<u64> {
    if gb.is_finite() && (0.0..=1e6).contains(&gb) {
        return Ok((gb * 1e9) as u64);
    }
    Err(CliError::Usage(format!("--swap-space {gb} must be a number of GB, at least 0")))
}

/// Host slots per KV group a swap space of `bytes` holds, for a runner whose blocks take
/// `per_block` (full group, local group; `None`: it cannot swap) bytes on the host — one slot
/// of each group a block of the full group's tables takes at most.
pub fn swap_blocks(bytes: u64, per_block: Option<(usize, usize)>, runner: &str) -> std::result::Result<usize, String> {
    match per_block {
        _ if bytes == 0 => Ok(0),
        None => Err(format!("--swap-space: the runner {runner} cannot swap KV to the host")),
        Some((full, local)) => Ok((bytes / (full + local).max(1) as u64) as usize),
    }
}

/// `--gpu-memory-utilization`, checked.
pub fn utilization(f: f64) -> Result<f64> {
    if f.is_finite() && f > 0.0 && f <= 1.0 {
        return Ok(f);
    }
    Err(CliError::Usage(format!("--gpu-memory-utilization {f}: must be in (0, 1]")))
}

/// Positions of a pool of `utilization × total − in_use` bytes at `per_position` bytes each,
/// rounded down to whole blocks of `block` (0 when nothing is left); the runner adds one spare
/// block itself, which comes out of the same bytes.
pub fn positions_for(total: u64, in_use: u64, utilization: f64, per_position: u64, block: usize) -> usize {
    let budget = (total as f64 * utilization) as u64;
    let left = budget.saturating_sub(in_use);
    let block_bytes = per_position.max(1).saturating_mul(block.max(1) as u64);
    let blocks = (left / block_bytes) as usize;
    blocks.saturating_sub(1) * block
}

/// The default `--max-seqs` of a pool of `positions`: as many typical sequences (2048
/// positions, or the context if shorter) as it holds, at least 1, at most 512.
pub fn default_max_seqs(positions: usize, ctx: usize) -> usize {
    (positions / TYPICAL_SEQ.min(ctx).max(1)).clamp(1, MAX_DEFAULT_SEQS)
}

/// Blocks of `block` positions for a pool sized by `size`, with the profile's `measured`
/// bytes (`None`: the device cannot report its memory, or the size is not from memory), for
/// a model of widths `c` whose KV takes `per_position` bytes a position.
pub fn blocks(size: KvSize, measured: Option<&Measured>, c: &Config, per_position: u64, block: usize) -> Result<(usize, KvPool)> {
    let fixed = |positions: usize, how: String| {
        let blocks = positions.div_ceil(block).max(1);
        (blocks, KvPool { positions: blocks * block, bytes: (blocks * block) as u64 * per_position, from_memory: false, how, groups: None })
    };
    match (size, measured) {
        (KvSize::Tokens(n), _) => Ok(fixed(n, "sized by --kv-tokens".into())),
        (KvSize::Memory { fallback, .. }, None) => Ok(fixed(
            fallback,
            "the fixed size (the context, at least 16384 positions): this device cannot report its memory, so --gpu-memory-utilization does not apply; --kv-tokens sets it".into(),
        )),
        (KvSize::Memory { utilization, step_tokens, max_seqs, .. }, Some(m)) => {
            let positions = positions_for(m.total, m.step.max(m.graphs), utilization, per_position, block);
            let gb = |b: u64| b as f64 / 1e9;
            let account = format!(
                "{:.1} GB in use after the weights, {:+.2} GB the decode graphs of up to {max_seqs} rows, {:+.2} GB the worst step ({step_tokens} rows, up to {max_seqs} drawing, decode rows of {} positions)",
                gb(m.weights),
                gb(m.graphs) - gb(m.weights),
                gb(m.step) - gb(m.graphs),
                m.decode_len
            );
            if positions < c.max_ctx {
                return Err(CliError::Gpu(format!(
                    "KV pool: --gpu-memory-utilization {utilization} of {:.1} GB leaves room for {positions} positions ({account}), less than one {}-token context: raise --gpu-memory-utilization, lower --max-seqs, or set --kv-tokens",
                    gb(m.total),
                    c.max_ctx
                )));
            }
            let bytes = positions as u64 * per_position;
            let how = format!("sized by --gpu-memory-utilization {utilization} of {:.1} GB, measured: {account}", gb(m.total));
            Ok((positions / block, KvPool { positions, bytes, from_memory: true, how, groups: None }))
        }
    }
}

/// The profile of [`blocks`]' memory sizing on `m`'s device (see the module's notes), the
/// model handed back with it; `None` where the device cannot report its memory.
pub fn profile(
    m: optimized::model::GpuModel,
    block: usize,
    step_tokens: usize,
    max_seqs: usize,
) -> Result<(optimized::model::GpuModel, Option<Measured>)> {
    use optimized::runner::profile as p;
    let Some((weights, total)) = p::in_use(&m.client) else { return Ok((m, None)) };
    let ctx = m.dims().max_ctx;
    let mut r = optimized::runner::GpuRunner::new(m, block, p::blocks_needed(step_tokens, ctx, block))?;
    let pool = r.kv_bytes() as u64;
    // The graphs first, as serving records them before its first step: a recording guards the
    // pages it touches, so one recorded after an eager step would take that step's free pages
    // out of the next step's reach (`optimized::runner::graphs`, its notes on memory).
    let recorded = record_graphs(&mut r, max_seqs, ctx).map_err(|e| CliError::Gpu(format!("KV pool: recording the profile's decode graphs: {e}")))?;
    let arena = r.model.client.arena().stats();
    let recorded = format!("{recorded}; their activations: {:.2} GB in {} buffers every recording shares", arena.bytes as f64 / 1e9, arena.slots);
    let graphs = p::in_use(&r.model.client).map_or(weights, |(u, _)| u);
    let decode_len = worst_step(&mut r, step_tokens, max_seqs, ctx)?;
    let step = p::in_use(&r.model.client).map_or(graphs, |(u, _)| u);
    let m = r.into_model();
    p::release(&m.client)?;
    // The profile's own pool is not part of what serving needs besides its pool.
    let (graphs, step) = (graphs.saturating_sub(pool).max(weights), step.saturating_sub(pool).max(weights));
    Ok((m, Some(Measured { total, weights, graphs, step, decode_len, recorded })))
}

/// The profile's worst step on `r` (`optimized::runner::profile::worst_step`), its decode rows
/// as long as the context where the decode kernels take it; where they do not (flash decode's
/// combine caps the positions a step reads), the longest they take, as the graphs' recording
/// does: a step past it fails whatever the pool. Returns the decode rows' length.
pub(super) fn worst_step<R: engine::runner::ModelRunner + ?Sized>(r: &mut R, step_tokens: usize, max_seqs: usize, ctx: usize) -> Result<usize> {
    let mut decode_len = decode_cap(r, ctx).unwrap_or(ctx);
    loop {
        match optimized::runner::profile::worst_step(r, step_tokens, max_seqs, decode_len) {
            Ok(()) => return Ok(decode_len),
            Err(e) if refused(&e) && decode_len > 1024 => decode_len /= 2,
            Err(e) => return Err(CliError::Gpu(format!("KV pool: the profile step ({step_tokens} rows, up to {max_seqs} drawing): {e}"))),
        }
    }
}

/// [`headroom_short`] as the start's warning, where the `free` bytes fall short.
pub fn headroom_warning(m: &Measured, free: u64, arena: u64) -> Option<String> {
    let gb = |b: u64| b as f64 / 1e9;
    headroom_short(m, free, arena).map(|need| {
        format!(
            "the decode graphs and the worst step measured {:.2} GB; {:.2} GB are free: steps may run out of memory (lower --gpu-memory-utilization or --max-seqs, or set --kv-tokens)",
            gb(need),
            gb(free)
        )
    })
}

/// The positions a decode row may hold where the runner's decode kernels take fewer than the
/// context (`ModelRunner::max_decode_len`): tables are sized by it rather than meeting the
/// refusal, which a tensor-parallel group does not survive.
pub(super) fn decode_cap(r: &(impl engine::runner::ModelRunner + ?Sized), ctx: usize) -> Option<usize> {
    r.max_decode_len().filter(|&m| m > 0 && m < ctx)
}

/// Whether the decode kernels refused a width (not a failure of the step itself).
fn refused(e: &reference::Error) -> bool {
    e.to_string().contains("unsupported on this device")
}

/// Record the decode graphs of every bucket of rows up to `seats` (the runner's buckets:
/// `optimized::runner::BUCKETS`), greedy and sampled, for every table width up to the context,
/// so that no request's step records one; a line saying what it recorded and how long it took.
pub fn record_graphs(r: &mut (dyn engine::runner::ModelRunner + Send), seats: usize, ctx: usize) -> reference::Result<String> {
    let t0 = std::time::Instant::now();
    let buckets = optimized::runner::BUCKETS;
    let top = buckets.iter().copied().find(|&b| b >= seats).or(buckets.last().copied()).unwrap_or(seats);
    // Block tables as wide as the context where the device's decode kernels take them; else as
    // wide as the runner says they take (flash decode's combine caps the positions a step
    // reads), or, where a runner cannot say, the widest that did not refuse: said in the start
    // line, and a step past it fails as it would without the recording.
    let (mut width, mut refusal) = match decode_cap(r, ctx) {
        Some(m) => (m, Some(format!("the decode kernels take up to {m} positions on this device"))),
        None => (ctx, None),
    };
    let made = loop {
        match record_buckets(r, top, width) {
            Ok(n) => break n,
            Err(e) if refused(&e) && width > 1024 => {
                refusal.get_or_insert(e.to_string());
                width /= 2;
            }
            Err(e) => return Err(e),
        }
    };
    let cap = refusal.map_or(String::new(), |e| format!("; wider refused: {e}"));
    Ok(match made {
        0 => match r.status().filter(|s| s.contains("refused")) {
            // The backend refused the first capture: say why (steps run eagerly).
            Some(status) => format!("decode graphs: none recorded: {status}"),
            None => "decode graphs: none to record (this runner does not record them)".into(),
        },
        n => format!(
            "decode graphs: {n} recorded in {:.1} s (batches of 1 to {top} rows, greedy and sampled, block tables up to {width} of the {ctx}-token context{cap})",
            t0.elapsed().as_secs_f64()
        ),
    })
}

/// Record every decode bucket up to `top` rows (`prepare_decode` of `top` rows: the largest
/// first), sampled and greedy, at block tables of up to `width` positions; returns how many
/// recordings were made. Sampled first (the seeded draw's temporaries are the larger): the
/// recordings share one arena of activations (`optimized::arena`), which the first sizes.
fn record_buckets(r: &mut (dyn engine::runner::ModelRunner + Send), top: usize, width: usize) -> reference::Result<usize> {
    let mut made = 0;
    for sampled in [true, false] {
        made += r.prepare_decode(top, width, sampled)?;
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    #[test]
    fn a_pool_that_leaves_less_than_the_step_and_graphs_took_is_flagged() {
        let m = Measured { total: 150 * GB, weights: 14 * GB, graphs: 20 * GB, step: 30 * GB, decode_len: 1, recorded: String::new() };
        assert_eq!(headroom_short(&m, 16 * GB, 0), None, "16 GB free holds the 16 GB the graphs and the step took");
        assert_eq!(headroom_short(&m, 15 * GB, 0), Some(16 * GB));
        assert_eq!(headroom_short(&m, 14 * GB, 2 * GB), None, "the arena is allocated already");
    }

    #[test]
    fn the_swap_space_is_whole_blocks_of_both_groups() {
        assert_eq!(swap_space(4.0).expect("4 GB"), 4 * GB);
        assert!(swap_space(-1.0).is_err() && swap_space(f64::NAN).is_err());
        // 786 kB a block of each group (GPT-OSS-20B's 12 + 12 layers in f16, blocks of 16).
        assert_eq!(swap_blocks(4 * GB, Some((393_216, 393_216)), "cuda"), Ok(5086));
        assert_eq!(swap_blocks(0, None, "wgpu"), Ok(0), "no swap space asks nothing of the runner");
        let err = swap_blocks(GB, None, "cuda-tp2").expect_err("a runner that cannot swap");
        assert!(err.contains("cuda-tp2 cannot swap"), "{err}");
    }

    #[test]
    fn the_pool_is_what_the_utilization_leaves_in_whole_blocks_less_the_spare() {
        // 80 GB × 0.9 = 72; 22 in use after the profile: 50 GB at 100 kB a position, blocks of 16.
        let p = positions_for(80 * GB, 22 * GB, 0.9, 100_000, 16);
        assert_eq!(p, (50 * GB / 1_600_000 - 1) as usize * 16);
        assert_eq!(p % 16, 0);
        // Nothing left: 0, never an underflow.
        assert_eq!(positions_for(80 * GB, 75 * GB, 0.9, 100_000, 16), 0);
        assert_eq!(positions_for(80 * GB, 80 * GB, 1.0, 100_000, 16), 0);
        // Exactly one block's bytes: the spare takes it.
        assert_eq!(positions_for(1_600_000, 0, 1.0, 100_000, 16), 0);
        assert_eq!(positions_for(3_200_000, 0, 1.0, 100_000, 16), 16);
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

    /// In use after the weights, then the graphs, then the worst step.
    fn measured(weights: u64, graphs: u64, step: u64) -> Measured {
        Measured { total: 80 * GB, weights, graphs, step, decode_len: 8192, recorded: String::new() }
    }

    #[test]
    fn the_measured_pool_leaves_out_the_step_and_the_graphs_and_says_each() {
        let c = cfg(8192);
        let size = KvSize::Memory { utilization: 0.9, fallback: 16384, step_tokens: 2048, max_seqs: 512 };
        // 14 GB of weights, the graphs +5, the step +3: 72 − 22 = 50 GB of pool.
        let m = measured(14 * GB, 19 * GB, 22 * GB);
        let (b, pool) = blocks(size, Some(&m), &c, 100_000, 16).expect("memory");
        assert!(pool.from_memory);
        assert_eq!(pool.positions, b * 16);
        assert_eq!(pool.positions, positions_for(80 * GB, 22 * GB, 0.9, 100_000, 16));
        assert_eq!(pool.bytes, pool.positions as u64 * 100_000);
        for part in [
            "--gpu-memory-utilization 0.9 of 80.0 GB",
            "14.0 GB in use after the weights",
            "+3.00 GB the worst step",
            "+5.00 GB the decode graphs",
            "decode rows of 8192",
        ] {
            assert!(pool.how.contains(part), "{part}: {}", pool.how);
        }
        // More in use after the profile: a smaller pool, by whole blocks.
        let (b2, _) = blocks(size, Some(&measured(14 * GB, 19 * GB, 30 * GB)), &c, 100_000, 16).expect("memory");
        assert_eq!(b - b2, (8 * GB / 1_600_000) as usize);
    }

    #[test]
    fn a_device_that_cannot_tell_keeps_the_fixed_size_and_a_short_pool_is_an_error() {
        let c = cfg(8192);
        let size = KvSize::Memory { utilization: 0.9, fallback: 16384, step_tokens: 2048, max_seqs: 32 };
        let (blocks_, pool) = blocks(size, None, &c, 1000, 16).expect("fallback");
        assert_eq!((blocks_, pool.positions, pool.from_memory), (1024, 16384, false));
        assert!(pool.how.contains("cannot report"), "{}", pool.how);
        let (b, pool) = blocks(KvSize::Tokens(100), Some(&measured(GB, GB, GB)), &c, 1000, 16).expect("tokens");
        assert_eq!((b, pool.positions, pool.from_memory), (7, 112, false));
        // Too little for one context: the error names what to change and what the profile saw.
        let e = blocks(size, Some(&measured(70 * GB, 71 * GB, 72 * GB)), &c, 1000, 16).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains("--gpu-memory-utilization")
                && e.contains("--kv-tokens")
                && e.contains("8192-token context")
                && e.contains("the decode graphs"),
            "{e}"
        );
    }
}
