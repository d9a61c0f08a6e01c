//! The GPU runner's host swap space (`engine::swap`): one host slot holds one block of a KV
//! group — every layer's K and V rows of that block, layer by layer — and the step's copies run
//! before its forward pass. The swap-outs are one batch of reads enqueued on the step's stream
//! ahead of the forward pass (which may write the freed blocks) and landed in their slots after
//! it, when the step's own read-back has waited for the device anyway: a swap adds copies to
//! the stream, not a wait. The swap-ins are written on the same stream. Blocks with consecutive
//! ids move as one range per pool.

use std::future::Future;
use std::pin::Pin;

use cubecl::bytes::Bytes;
use cubecl::server::ServerError;
use engine::runner::{group_layers, swap_block_bytes_of, BlockCopy, StepPlan};

use super::GpuRunner;
use crate::{DeviceTensor, Error};

/// Reads enqueued on the device's stream; awaiting waits for their fence only.
type Reads = Pin<Box<dyn Future<Output = Result<Vec<Bytes>, ServerError>> + Send>>;

/// Swap-outs enqueued, not yet in their slots: the reads, the client they were enqueued
/// through (the reads' future is typed as borrowing it: declared after them, so dropped after
/// them, and boxed, so it does not move), and the copies they serve in the order of [`runs`].
struct InFlight {
    reads: Reads,
    _client: Box<crate::Client>,
    list: Vec<BlockCopy>,
    runs: Vec<(usize, usize)>,
}

/// Slots of the full group (`[0]`) and of the local group (`[1]`): `None` while empty.
#[derive(Default)]
pub(crate) struct HostSwap {
    slots: [Vec<Option<Vec<u8>>>; 2],
    in_flight: Option<InFlight>,
}

/// The copies of `list` in runs of consecutive block ids of one group: `(first copy, count)`
/// over `list` sorted by (group, block).
fn runs(list: &mut [BlockCopy]) -> Vec<(usize, usize)> {
    list.sort_by_key(|c| (c.local, c.block));
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        match out.last_mut() {
            Some((s, n)) if list[*s].local == c.local && list[*s].block as usize + *n == c.block as usize => *n += 1,
            _ => out.push((i, 1)),
        }
    }
    out
}

/// Bytes `[first · block, (first + n) · block)` of pool `t`.
fn range(t: &DeviceTensor, first: u32, n: usize, block: usize) -> cubecl::server::Handle {
    let (a, b) = (first as usize * block, (first as usize + n) * block);
    t.handle.clone().offset_start(a as u64).offset_end((t.bytes() - b) as u64)
}

impl GpuRunner {
    /// Bytes of one block of one layer's K (or V) pool.
    pub(crate) fn block_bytes(&self) -> usize {
        let d = self.model.dims();
        self.layout.block_size * d.n_kv_heads * d.head_dim * self.model.kv_dtype.size()
    }

    /// The plan's block copies: out to the host, then back in ([`StepPlan::swap_out`]).
    pub(crate) fn swap(&mut self, plan: &StepPlan) -> Result<(), Error> {
        if !plan.swap_out.is_empty() {
            self.swap_out(plan.swap_out.clone())?;
        }
        if !plan.swap_in.is_empty() {
            self.swap_in(plan.swap_in.clone())?;
        }
        Ok(())
    }

    fn swap_out(&mut self, mut list: Vec<BlockCopy>) -> Result<(), Error> {
        self.land_swap_out()?;
        let blk = self.block_bytes();
        let runs = runs(&mut list);
        let mut handles = Vec::new();
        for &(s, n) in &runs {
            for l in group_layers(&self.local, list[s].local) {
                handles.push(range(&self.k[l], list[s].block, n, blk));
                handles.push(range(&self.v[l], list[s].block, n, blk));
            }
        }
        // Enqueued now, before anything of the step can write the blocks.
        let client = Box::new(self.model.client.clone());
        let reads = Box::pin(client.read_async(handles));
        // SAFETY: the future is typed as borrowing `client` (`read_async`'s `impl Future`
        // captures `&self`); it lives in the same `InFlight` as the box, which is declared
        // after it (dropped after it) and is never moved out of its heap allocation.
        let reads: Reads = unsafe { std::mem::transmute::<Pin<Box<dyn Future<Output = Result<Vec<Bytes>, ServerError>> + Send + '_>>, Reads>(reads) };
        self.host.in_flight = Some(InFlight { reads, _client: client, list, runs });
        Ok(())
    }

    /// Put the swap-outs in flight into their slots (waiting for their copies, which a step's
    /// read-back has usually waited for already). Nothing when none is in flight.
    pub(crate) fn land_swap_out(&mut self) -> Result<(), Error> {
        let Some(InFlight { reads, _client, list, runs }) = self.host.in_flight.take() else { return Ok(()) };
        let blk = self.block_bytes();
        let mut read = cubecl::future::block_on(reads)?.into_iter();
        for &(s, n) in &runs {
            let layers = group_layers(&self.local, list[s].local).len();
            let mut data = vec![Vec::with_capacity(2 * layers * blk); n];
            for _ in 0..2 * layers {
                let bytes = read.next().ok_or_else(|| Error::KvCache("swap-out: fewer reads than ranges".into()))?;
                for (j, chunk) in bytes.chunks_exact(blk).enumerate() {
                    data[j].extend_from_slice(chunk);
                }
            }
            for (c, d) in list[s..s + n].iter().zip(data) {
                let store = &mut self.host.slots[c.local as usize];
                if store.len() <= c.slot as usize {
                    store.resize(c.slot as usize + 1, None);
                }
                store[c.slot as usize] = Some(d);
            }
        }
        Ok(())
    }

    fn swap_in(&mut self, mut list: Vec<BlockCopy>) -> Result<(), Error> {
        // A slot read back in may be one a swap-out still in flight fills.
        self.land_swap_out()?;
        let blk = self.block_bytes();
        for (s, n) in runs(&mut list) {
            let layers = group_layers(&self.local, list[s].local);
            let mut data = Vec::with_capacity(n);
            for c in &list[s..s + n] {
                let d = self.host.slots[c.local as usize]
                    .get_mut(c.slot as usize)
                    .and_then(Option::take)
                    .ok_or_else(|| Error::KvCache(format!("swap-in from host slot {} (local: {}), which holds nothing", c.slot, c.local)))?;
                if d.len() != 2 * layers.len() * blk {
                    return Err(Error::KvCache(format!(
                        "host slot {}: {} bytes, a block of this group takes {}",
                        c.slot,
                        d.len(),
                        2 * layers.len() * blk
                    )));
                }
                data.push(d);
            }
            for (i, &l) in layers.iter().enumerate() {
                for (p, pool) in [&self.k[l], &self.v[l]].into_iter().enumerate() {
                    let at = (2 * i + p) * blk;
                    let bytes: Vec<u8> = data.iter().flat_map(|d| &d[at..at + blk]).copied().collect();
                    self.model.client.write(&range(pool, list[s].block, n, blk), cubecl::bytes::Bytes::from_bytes_vec(bytes));
                }
            }
        }
        Ok(())
    }

    /// Host bytes of one block of each group ([`engine::runner::ModelRunner::swap_block_bytes`]).
    pub(crate) fn swap_bytes(&self) -> (usize, usize) {
        swap_block_bytes_of(&self.local, self.block_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_consecutive_blocks_of_one_group() {
        let c = |local, block, slot| BlockCopy { local, block, slot };
        let mut list = vec![c(false, 5, 0), c(false, 3, 1), c(true, 4, 2), c(false, 4, 3), c(false, 9, 4), c(true, 5, 5)];
        let r = runs(&mut list);
        assert_eq!(
            list.iter().map(|c| (c.local, c.block)).collect::<Vec<_>>(),
            [(false, 3), (false, 4), (false, 5), (false, 9), (true, 4), (true, 5)]
        );
        assert_eq!(r, [(0, 3), (3, 1), (4, 2)]);
    }
}
