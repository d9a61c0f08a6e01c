//! The iteration-level scheduler: which sequences compute how many tokens this step.
//!
//! Policy (vLLM v1's, simplified), per step with a budget of `max_batched_tokens`:
//! 1. **Running sequences first**, most urgent first (lowest `priority`, then admission order:
//!    [`crate::priority`]): a decoding sequence takes 1 token, one still in
//!    its prompt a chunk of at most `prefill_chunk` tokens (chunked prefill) — both within what
//!    is left of the budget. When the pool has too few free blocks for a sequence's tokens, the
//!    **last** running sequence (lowest priority, then newest) is preempted (its blocks freed;
//!    its KV copied to the host swap space where that holds it ([`crate::swap`]), else
//!    recomputed from prompt + output when it is resumed, which gives identical output: the
//!    draw depends only on the logits, the seed and the output index); if that is the
//!    sequence itself, it waits.
//! 2. **Then waiting sequences by (priority, arrival)** (priorities aged; first come first
//!    served among equals), while the budget, the seats
//!    (`max_num_seqs`) and the free blocks last: a sequence admitted takes its longest cached
//!    prefix from the prefix cache (a swapped one, fresh blocks for its KV, copied back) and its
//!    first chunk. Nothing is admitted in a step that preempted — so a step never copies a
//!    block both ways —, and a sequence that does not fit stops admission (no overtaking).
//! 3. **Then speculative positions** (when on): each decoding sequence may add k proposed
//!    tokens from what is left of the budget and of the free blocks — never preempting, never
//!    in a step that preempted, never delaying an admission.
//!
//! **No prompt starves the others.** A prompt chunk leaves one token for each decoding
//! sequence after it in the running list, and while other prompts wait for tokens (a later
//! running prompt, or a request waiting for a free seat) it takes at most half of what is left
//! after that ([`chunk_cap`]), so a long prompt shares every step with the decodes behind it
//! and with the prompts that arrive with it or during its prefill: a short request's first
//! token does not wait for a long prompt's last chunk. What the cap held back
//! and nobody used goes back to the capped chunks at the end of the step (no preemption for
//! it), so a step computes as many tokens as before.

use reference::Result;

use crate::engine::Engine;
use crate::request::RequestId;
use crate::runner::ModelRunner;
use crate::sequence::Status;

/// One sequence's part of a step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub id: RequestId,
    /// Positions computed (a prompt chunk, or the one token of a decode).
    pub n: usize,
    /// Proposed tokens verified after them (speculation; 0: none).
    pub k: usize,
    /// A running sequence's decode (one position, then a draw).
    pub decode: bool,
}

/// What one step computes, in plan order.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    pub items: Vec<Item>,
}

impl<R: ModelRunner> Engine<R> {
    pub(crate) fn schedule(&mut self) -> Result<Schedule> {
        let mut out = Schedule::default();
        let mut budget = self.cfg.max_batched_tokens;
        let mut preempted = false;
        // Running prompts whose chunk the cap cut short (or to nothing).
        let mut capped = Vec::new();
        // Most urgent first; the preemption victim is the last (`crate::priority`).
        self.order_running()?;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let pending = self.seq(id)?.pending();
            let decode = pending == 1;
            let n = if decode {
                1
            } else {
                let later = &self.running[i + 1..];
                let later_decodes = later.iter().filter(|&&r| self.seqs.get(&r).is_some_and(|s| s.pending() == 1)).count();
                // Others wait for prompt tokens: a later prompt, or a request for a free seat.
                let queue = later_decodes < later.len() || (!self.waiting.is_empty() && self.running.len() < self.cfg.max_num_seqs);
                let n = pending.min(self.cfg.prefill_chunk).min(chunk_cap(budget, later_decodes, queue));
                if n < pending.min(self.cfg.prefill_chunk) {
                    capped.push(id);
                }
                if n == 0 {
                    i += 1;
                    continue;
                }
                n
            };
            let (kv, pos0) = {
                let s = self.seq(id)?;
                (s.kv.ok_or_else(|| reference::Error::KvCache(format!("running request {id} holds no blocks")))?, s.computed)
            };
            // The local group's blocks out of the window of this step's queries and every
            // later one go first (`KvBlocks::slide`): their room counts for this step.
            self.blocks.slide(kv, pos0)?;
            let mut self_preempted = false;
            while !self.blocks.fits(kv, n)? {
                let victim = *self.running.last().ok_or_else(|| reference::Error::KvCache("no running sequence to preempt".into()))?;
                if victim == id && self.running.len() == 1 {
                    // Alone and still too big: the pool cannot hold this request at all.
                    self.finish_out_of_blocks(id)?;
                    self_preempted = true;
                    break;
                }
                self.preempt(victim)?;
                preempted = true;
                if victim == id {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                // running[i] is gone (preempted or finished): the next one moved into slot i.
                continue;
            }
            self.blocks.grow(kv, n)?;
            out.items.push(Item { id, n, k: 0, decode });
            budget -= n;
            i += 1;
        }
        while !preempted && budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some((at, id)) = self.next_waiting()? else { break };
            // Others still waiting for a seat: this prompt's first chunk leaves them room.
            let queue = self.waiting.len() > 1 && self.running.len() + 1 < self.cfg.max_num_seqs;
            let cap = chunk_cap(budget, 0, queue);
            if !self.admit(id, cap)? {
                break;
            }
            self.waiting.remove(at);
            self.running.push(id);
            let (n, full) = {
                let s = self.seq(id)?;
                let full = s.pending().min(self.cfg.prefill_chunk);
                (full.min(cap), full)
            };
            if n < full {
                capped.push(id);
            }
            out.items.push(Item { id, n, k: 0, decode: false });
            budget -= n;
        }
        self.top_up(&mut out, &capped, &mut budget)?;
        if !preempted && self.spec.is_some() {
            let batch = out.items.iter().filter(|it| it.decode).count();
            for it in out.items.iter_mut().filter(|it| it.decode) {
                let kv = self.seq(it.id)?.kv.ok_or_else(|| reference::Error::KvCache(format!("running request {} holds no blocks", it.id)))?;
                let room = self.blocks.room(kv)?;
                let k = self.plan_depth(it.id, batch, room.min(budget))?;
                if k > 0 {
                    self.blocks.grow(kv, k)?;
                    it.k = k;
                    budget -= k;
                }
            }
        }
        Ok(out)
    }

    /// Give the prompt chunks in `capped` (cut short by [`chunk_cap`], in schedule order) what
    /// is left of the budget, up to a full chunk each, where the pool has the blocks free.
    fn top_up(&mut self, out: &mut Schedule, capped: &[RequestId], budget: &mut usize) -> Result<()> {
        for &id in capped {
            if *budget == 0 {
                break;
            }
            let at = out.items.iter().position(|it| it.id == id);
            let scheduled = at.map_or(0, |j| out.items[j].n);
            // A sequence preempted or finished since it was capped holds nothing to top up.
            let Some((s, kv)) = self.seqs.get(&id).and_then(|s| Some((s, s.kv?))) else { continue };
            let extra = s.pending().min(self.cfg.prefill_chunk).saturating_sub(scheduled).min(*budget);
            if extra == 0 || !self.blocks.fits(kv, extra)? {
                continue;
            }
            self.blocks.grow(kv, extra)?;
            match at {
                Some(j) => out.items[j].n += extra,
                None => out.items.push(Item { id, n: extra, k: 0, decode: false }),
            }
            *budget -= extra;
        }
        Ok(())
    }

    /// Give waiting `id` blocks: its cached prefix and room for its first chunk (of at most
    /// `budget` tokens). Returns false, holding nothing, when the pool cannot take the chunk.
    fn admit(&mut self, id: RequestId, budget: usize) -> Result<bool> {
        if self.seq(id)?.swapped.is_some() {
            return self.admit_swapped(id, budget);
        }
        let bs = self.blocks.block_size();
        let prefix_caching = self.cfg.prefix_caching;
        let chunk = self.cfg.prefill_chunk;
        let s = self.seqs.get_mut(&id).ok_or_else(|| reference::Error::Input(format!("unknown request {id}")))?;
        // At least the last token is always computed: it is what the next draw reads.
        let lookup = if prefix_caching { s.hashes_upto(s.tokens.len() - 1, bs).to_vec() } else { Vec::new() };
        let (kv, cached) = self.blocks.add_sequence_cached(&lookup)?;
        let n = (s.tokens.len() - cached).min(chunk).min(budget);
        if !self.blocks.fits(kv, n)? {
            self.blocks.free_sequence(kv)?;
            return Ok(false);
        }
        self.blocks.grow(kv, n)?;
        s.kv = Some(kv);
        s.computed = cached;
        s.cached_tokens = cached;
        // Blocks that came from the cache are registered already.
        s.registered = cached / bs;
        s.status = Status::Running;
        self.stats.cached_tokens += cached as u64;
        Ok(true)
    }

    /// [`Engine::admit`] of a sequence whose KV waits in the host swap space: fresh blocks for
    /// it (copied back before the step's forward pass) and its next chunk.
    fn admit_swapped(&mut self, id: RequestId, budget: usize) -> Result<bool> {
        let n = self.seq(id)?.pending().min(self.cfg.prefill_chunk).min(budget);
        let Some(kv) = self.swap_in(id, n)? else { return Ok(false) };
        let s = self.seqs.get_mut(&id).ok_or_else(|| reference::Error::Input(format!("unknown request {id}")))?;
        s.kv = Some(kv);
        s.status = Status::Running;
        // The copies run before any later step could swap into these slots again: this step
        // admits, so it preempted nothing.
        if let Some(sw) = s.swapped.take() {
            self.swap.release(&sw);
        }
        self.stats.swapped_in += 1;
        Ok(true)
    }

    /// Move running `id` back to the front of the queue, freeing its blocks (its KV is copied
    /// to the host where the swap space holds it, else recomputed when it is admitted again).
    pub(crate) fn preempt(&mut self, id: RequestId) -> Result<()> {
        let swapped = self.swap_out(id)?;
        let s = self.seqs.get_mut(&id).ok_or_else(|| reference::Error::Input(format!("unknown request {id}")))?;
        if let Some(kv) = s.kv.take() {
            self.blocks.free_sequence(kv)?;
        }
        crate::spec::release_draft(&mut self.spec, s)?;
        if !swapped {
            s.computed = 0;
            s.registered = 0;
        }
        s.status = Status::Waiting;
        s.preemptions += 1;
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id);
        self.stats.preemptions += 1;
        Ok(())
    }
}

/// The most tokens a prompt chunk may take of `budget`: one is owed to each of
/// `later_decodes` decoding sequences after it, and when `queue` (other prompts wait) it takes at most half of the rest (rounded up, so a budget of one token still moves).
pub(crate) fn chunk_cap(budget: usize, later_decodes: usize, queue: bool) -> usize {
    let room = budget.saturating_sub(later_decodes);
    if queue {
        room.div_ceil(2)
    } else {
        room
    }
}
