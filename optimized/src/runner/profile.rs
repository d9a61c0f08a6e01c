//! The worst step a runner can meet, run once before its KV pool is sized (vLLM's
//! `profile_run`): what the device holds afterwards — cubecl keeps the pages a step allocated
//! in its pools for the next one — is what every later step needs besides the pools.
//!
//! The step: `min(max_seqs, step_tokens)` sequences that all draw (sampled, the last with
//! penalties), all but one a decode row at position `decode_len − 1` (flash decode's split
//! scratch grows with the longest table of the step: `bsz × heads × splits × head_dim`), the
//! last one prefill chunk of the rest of the `step_tokens` rows (every row's activations, the
//! MoE's sort and grouped GEMMs at the most rows a step runs). The decode rows' tables all
//! name block 0 (their values do not matter, only the shapes). The pool still holds a whole
//! context ([`blocks_needed`]): the decode graphs recorded on it (before the step) pad their tables to
//! powers of two capped by the pool, so a smaller pool would record one graph per width past
//! it; the caller counts the pool's bytes out of what it measures and releases them
//! ([`release`]) before the final pool is allocated.

use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::seeded::TokenCount;
use engine::sampling::SamplingParams;

/// Blocks of `block_size` a pool needs for [`worst_step`] of `step_tokens` rows and for the
/// decode graphs' tables up to a context of `ctx` positions.
pub fn blocks_needed(step_tokens: usize, ctx: usize, block_size: usize) -> usize {
    step_tokens.max(ctx).max(1).div_ceil(block_size.max(1)) + 1
}

/// Gives the pages nothing holds back to the driver (cubecl's explicit cleanup: the pools
/// keep freed pages otherwise, returning them only under memory pressure or after their
/// deallocation period).
pub fn release(client: &crate::Client) -> Result<(), crate::Error> {
    client.memory_cleanup().map_err(|e| crate::Error::KvCache(format!("releasing the profile's memory: {e}")))
}

/// Runs the worst step of `step_tokens` rows, `max_seqs` sequences at most, decode rows
/// `decode_len` positions long (at most the context), on `r` (a pool of at least
/// [`blocks_needed`] blocks): a GPU runner, or a tensor-parallel group of them.
pub fn worst_step<R: ModelRunner + ?Sized>(r: &mut R, step_tokens: usize, max_seqs: usize, decode_len: usize) -> reference::Result<()> {
    let bs = r.kv_layout().block_size;
    let ctx = r.info().max_ctx;
    let seqs = max_seqs.min(step_tokens).max(1);
    let decode_len = decode_len.clamp(1, ctx);
    let chunk = (step_tokens.max(1) - (seqs - 1)).clamp(1, ctx);
    let sampled = SamplingParams { temperature: 1.0, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 1, ..SamplingParams::default() };
    let penalised = SamplingParams { repetition_penalty: 1.1, presence_penalty: 0.5, frequency_penalty: 0.5, ..sampled };
    let counts = [TokenCount { id: 1, output: 1, in_prompt: true }];
    let decode_table = vec![0u32; decode_len.div_ceil(bs)];
    let chunk_table: Vec<u32> = (0..chunk.div_ceil(bs) as u32).collect();
    let decode_tokens = [1u32];
    let chunk_tokens = vec![1u32; chunk];
    let mut plan = StepPlan::default();
    for _ in 1..seqs {
        plan.seqs.push(SeqStep {
            tokens: &decode_tokens,
            pos0: decode_len - 1,
            blocks: &decode_table,
            local_blocks: &[],
            samples: vec![SampleSpec { params: &sampled, counter: 0, counts: &[], want_logits: false, allowed: None }],
        });
    }
    let last = SampleSpec { params: &penalised, counter: 0, counts: &counts, want_logits: false, allowed: None };
    plan.seqs.push(SeqStep { tokens: &chunk_tokens, pos0: 0, blocks: &chunk_table, local_blocks: &[], samples: vec![last] });
    r.step(&plan).map(|_| ())
}

/// Bytes in use on `client`'s device and its total, once its queued work has ended (so that
/// stream-ordered allocations and frees have reached the driver); `None` where the device
/// cannot report its memory (wgpu, cpu).
pub fn in_use(client: &crate::Client) -> Option<(u64, u64)> {
    cubecl::future::block_on(client.sync()).ok()?;
    crate::memory_free(client).map(|(free, total)| (total.saturating_sub(free), total))
}
