//! The activation arena that recorded decode graphs share (`runner::graphs`).
//!
//! Why it exists: a graph replays raw device addresses, so cubecl guards every page a capture
//! window touched for the graph's life (`cubecl_runtime::memory_management::PageGuard`:
//! nothing new is carved from a guarded page, it is never released, relocation leaves it in
//! place). A recording's activations are temporaries: dropped after the capture, their slices
//! are free, but on a guarded page, so no later allocation — another recording's, an eager
//! step's — can take them. Every recording then holds one step's activations of its own, and
//! the decode graphs of every (bucket, table width, draw kind) summed to 123 GB on an H200
//! with GPT-OSS-20B.
//!
//! What the arena does instead: while it is on (the warm-up run and the capture of a
//! recording: [`Arena::on`]), [`DeviceTensor::empty`] takes its buffer from the arena's slots
//! rather than from cubecl. A slot is a live cubecl allocation the arena holds for the
//! client's life; a tensor leases it (the lease travels with every clone and view of the
//! tensor) and the slot is free again once the last of them drops — in stream order, as
//! cubecl's own pools reuse a freed slice. A free slot serves the smallest request it holds
//! (best fit); a request no free slot holds allocates a new slot from cubecl. Since the slots
//! stay allocated, their pages being guarded costs nothing: the next recording's warm-up and
//! capture lease the same slots again (an allocation a guard keeps live may still be written
//! in place). Recording the largest bucket and the widest table first makes the first
//! recording's slots serve all the smaller ones: the graphs together hold about one largest
//! step's activations (its peak, as slots are reused within the step) plus each recording's
//! own input buffers. Sharing is sound because replays run one at a time in the order of the
//! client's one stream, and a step writes every temporary before it reads it.
//!
//! Off (the default, and for eager steps), `empty` allocates from cubecl as before.

use std::sync::{Arc, Mutex, MutexGuard};

use cubecl::server::Handle;

/// A client's arena of cubecl buffers (`H`: a stand-in in unit tests); clones share it (every
/// clone of a [`crate::Client`] holds the same one).
pub struct Arena<H = Handle>(Arc<Mutex<Inner<H>>>);

impl<H> Clone for Arena<H> {
    fn clone(&self) -> Self {
        Arena(self.0.clone())
    }
}

impl<H> Default for Arena<H> {
    fn default() -> Self {
        Arena(Arc::new(Mutex::new(Inner { on: 0, slots: vec![], reused: 0, fresh: 0 })))
    }
}

struct Inner<H> {
    /// Nested [`Arena::on`] guards.
    on: usize,
    slots: Vec<Slot<H>>,
    /// Requests served by a slot already held, and requests that allocated one.
    reused: u64,
    fresh: u64,
}

struct Slot<H> {
    handle: H,
    bytes: usize,
    leased: bool,
}

/// What the arena holds, for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Slots held, and their bytes together.
    pub slots: usize,
    pub bytes: u64,
    /// Requests served by a slot already held, and requests that allocated a new one.
    pub reused: u64,
    pub fresh: u64,
}

/// A tensor's hold on an arena slot: the slot is free once the last clone of the tensor (and
/// of every view of it) drops.
pub struct Lease<H = Handle> {
    arena: Arc<Mutex<Inner<H>>>,
    slot: usize,
}

impl<H> std::fmt::Debug for Lease<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("slot", &self.slot).finish()
    }
}

impl<H> Drop for Lease<H> {
    fn drop(&mut self) {
        if let Some(s) = lock(&self.arena).slots.get_mut(self.slot) {
            s.leased = false;
        }
    }
}

/// While it lives, the arena serves [`DeviceTensor::empty`](crate::DeviceTensor::empty).
pub struct On<H = Handle> {
    arena: Arc<Mutex<Inner<H>>>,
}

impl<H> Drop for On<H> {
    fn drop(&mut self) {
        let mut g = lock(&self.arena);
        g.on = g.on.saturating_sub(1);
    }
}

/// The arena's state; a panic while it was held leaves it usable (every update is one field).
fn lock<H>(m: &Mutex<Inner<H>>) -> MutexGuard<'_, Inner<H>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<H: Clone> Arena<H> {
    /// Serve allocations from the arena until the guard drops.
    pub fn on(&self) -> On<H> {
        lock(&self.0).on += 1;
        On { arena: self.0.clone() }
    }

    /// A buffer of at least `bytes` for a new tensor, leased from the arena while it is on;
    /// `None` while it is off (the caller allocates from cubecl). `alloc` makes a new slot.
    pub(crate) fn take(&self, bytes: usize, alloc: impl FnOnce(usize) -> H) -> Option<(H, Arc<Lease<H>>)> {
        let mut g = lock(&self.0);
        if g.on == 0 {
            return None;
        }
        let best = g.slots.iter().enumerate().filter(|(_, s)| !s.leased && s.bytes >= bytes).min_by_key(|(_, s)| s.bytes).map(|(i, _)| i);
        let slot = match best {
            Some(i) => {
                g.reused += 1;
                i
            }
            None => {
                g.fresh += 1;
                // At least one byte: cubecl refuses an empty buffer as a kernel argument.
                let b = bytes.max(4);
                g.slots.push(Slot { handle: alloc(b), bytes: b, leased: false });
                g.slots.len() - 1
            }
        };
        let s = &mut g.slots[slot];
        s.leased = true;
        Some((s.handle.clone(), Arc::new(Lease { arena: self.0.clone(), slot })))
    }

    /// What the arena holds now.
    pub fn stats(&self) -> ArenaStats {
        let g = lock(&self.0);
        ArenaStats { slots: g.slots.len(), bytes: g.slots.iter().map(|s| s.bytes as u64).sum(), reused: g.reused, fresh: g.fresh }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in buffer: its size.
    fn handle(bytes: usize) -> usize {
        bytes
    }

    #[test]
    fn off_it_serves_nothing_on_it_reuses_freed_slots_by_best_fit() {
        let a = Arena::<usize>::default();
        assert!(a.take(100, handle).is_none());
        let on = a.on();
        let (_, big) = a.take(1000, handle).expect("on");
        let (_, small) = a.take(100, handle).expect("on");
        assert_eq!((a.stats().slots, a.stats().bytes, a.stats().fresh), (2, 1100, 2));
        drop((big, small));
        // The smallest free slot that holds the request serves it; nothing new is allocated.
        let (_, l1) = a.take(50, handle).expect("on");
        assert_eq!(l1.slot, 1);
        let (_, l2) = a.take(500, handle).expect("on");
        assert_eq!(l2.slot, 0);
        // Both leased: a third request takes a slot of its own.
        let (_, l3) = a.take(10, handle).expect("on");
        assert_eq!(l3.slot, 2);
        assert_eq!(a.stats(), ArenaStats { slots: 3, bytes: 1110, reused: 2, fresh: 3 });
        // A lease held by a clone keeps the slot.
        let keep = l2.clone();
        drop(l2);
        let (_, l4) = a.take(600, handle).expect("on");
        assert_eq!(l4.slot, 3);
        drop((keep, l1, l3, l4));
        drop(on);
        assert!(a.take(10, handle).is_none());
    }
}
