//! The mask of a constrained sequence's next draw as the runner receives it: computed on the
//! constraint threads ([`super::ConstraintFactory`]'s pool) from the moment the token before it
//! is taken, while the engine plans the step and the device runs its forward pass; the runner
//! waits for it only at the draw ([`Allowed::words`]). A runner that draws at once (the CPU
//! reference) simply waits there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A mask once computed: its words, and why the grammar cannot go on where it cannot (a failing
/// grammar, no token of the vocabulary allowed: the words are then all 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Computed {
    pub words: Vec<u32>,
    pub dead: Option<String>,
    /// How long the computation took.
    pub took: Duration,
}

/// The mask of one draw: ready, or being computed on another thread.
pub struct NextMask {
    /// Words of the mask (`ceil(V / 32)`), known before it is computed.
    len: usize,
    slot: OnceLock<Computed>,
    /// Time callers spent blocked in [`NextMask::words`] waiting for it (ns).
    waited: AtomicU64,
}

impl std::fmt::Debug for NextMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextMask").field("len", &self.len).field("ready", &self.slot.get().is_some()).finish()
    }
}

impl NextMask {
    /// A mask still to compute ([`NextMask::set`] gives it).
    pub(crate) fn pending(len: usize) -> Self {
        NextMask { len, slot: OnceLock::new(), waited: AtomicU64::new(0) }
    }

    /// A mask computed already.
    pub(crate) fn ready(c: Computed) -> Self {
        let m = Self::pending(c.words.len());
        m.set(c);
        m
    }

    /// Hands over the computed mask (once; a second call is ignored).
    pub(crate) fn set(&self, c: Computed) {
        let _ = self.slot.set(c);
    }

    /// The computed mask, waiting for it where it is not ready.
    pub(crate) fn computed(&self) -> &Computed {
        if let Some(c) = self.slot.get() {
            return c;
        }
        let t = Instant::now();
        let c = self.slot.wait();
        self.waited.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c
    }

    /// The mask's words (bit `i % 32` of word `i / 32` for token `i`), waiting where needed.
    pub fn words(&self) -> &[u32] {
        &self.computed().words
    }

    /// Words of the mask: `ceil(V / 32)`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mask has no words (a vocabulary of 0 tokens: never for a real model).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it has been computed.
    pub fn is_ready(&self) -> bool {
        self.slot.get().is_some()
    }

    /// Time spent waiting for it so far.
    pub(crate) fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited.load(Ordering::Relaxed))
    }
}

/// The tokens a draw may pick (`runner::SampleSpec::allowed`): words at hand, or the mask a
/// constraint is computing.
#[derive(Debug, Clone, Copy)]
pub enum Allowed<'a> {
    /// A bitset of `ceil(V / 32)` words.
    Words(&'a [u32]),
    /// A constraint's next mask; [`Allowed::words`] waits for it.
    Next(&'a NextMask),
}

impl<'a> Allowed<'a> {
    /// The words, waiting for a mask being computed: a runner calls this at its draw, after
    /// it has started the step's forward pass.
    pub fn words(self) -> &'a [u32] {
        match self {
            Allowed::Words(w) => w,
            Allowed::Next(m) => m.words(),
        }
    }

    /// Words of the mask, known without waiting.
    pub fn len(self) -> usize {
        match self {
            Allowed::Words(w) => w.len(),
            Allowed::Next(m) => m.len(),
        }
    }

    /// Whether the mask has no words.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}
