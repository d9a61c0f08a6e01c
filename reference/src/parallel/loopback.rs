//! [`Loopback`]: N ranks as N threads of one process, exchanging buffers through shared slots.
//!
//! Deterministic: an all-reduce adds the ranks' buffers in rank order (`((b0 + b1) + b2) …`)
//! on every rank, so every rank gets the same bits whatever the threads' timing. A rank that
//! fails calls [`Loopback::fail`], which wakes the others with an error instead of leaving them
//! waiting for it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::Communicator;
use crate::error::{Error, Result};

struct State {
    /// `slots[src][dst]`: what rank src sends rank dst this round.
    slots: Vec<Vec<Option<Vec<f32>>>>,
    /// Ranks arrived at the current barrier.
    arrived: usize,
    /// Barriers passed.
    round: u64,
    /// Why the group stopped, once a rank failed.
    failed: Option<String>,
}

struct Shared {
    world: usize,
    state: Mutex<State>,
    cv: Condvar,
}

/// One rank of a loopback group ([`Loopback::group`]).
#[derive(Clone)]
pub struct Loopback {
    rank: usize,
    shared: Arc<Shared>,
}

fn poisoned<T>(_: T) -> Error {
    Error::Input("loopback communicator: a rank panicked".into())
}

impl Loopback {
    /// The `world` ranks of one group, rank r at index r.
    pub fn group(world: usize) -> Vec<Loopback> {
        let state = State { slots: vec![vec![None; world]; world], arrived: 0, round: 0, failed: None };
        let shared = Arc::new(Shared { world, state: Mutex::new(state), cv: Condvar::new() });
        (0..world).map(|rank| Loopback { rank, shared: shared.clone() }).collect()
    }

    /// Stop the group: every rank waiting in (or later entering) a collective gets an error
    /// naming this rank and `why`.
    pub fn fail(&self, why: &str) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.failed.get_or_insert_with(|| format!("rank {} failed: {why}", self.rank));
            self.shared.cv.notify_all();
        }
    }

    fn check(&self, st: &State) -> Result<()> {
        match &st.failed {
            Some(f) => Err(Error::Input(format!("tensor-parallel group stopped ({f})"))),
            None => Ok(()),
        }
    }

    /// Wait until every rank has arrived here.
    fn barrier<'a>(&self, mut st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        let round = st.round;
        st.arrived += 1;
        if st.arrived == self.shared.world {
            st.arrived = 0;
            st.round += 1;
            self.shared.cv.notify_all();
        }
        while st.round == round && st.failed.is_none() {
            st = self.shared.cv.wait(st).map_err(poisoned)?;
        }
        self.check(&st)?;
        Ok(st)
    }

    /// Post `send[d]` for every rank d, and return what every rank posted for this one.
    fn exchange(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        let n = self.shared.world;
        if send.len() != n {
            return Err(Error::Input(format!("rank {}: {} buffers to send to {n} ranks", self.rank, send.len())));
        }
        let mut st = self.shared.state.lock().map_err(poisoned)?;
        self.check(&st)?;
        for (d, buf) in send.into_iter().enumerate() {
            st.slots[self.rank][d] = Some(buf);
        }
        let mut st = self.barrier(st)?;
        let got = (0..n).map(|s| st.slots[s][self.rank].take().unwrap_or_default()).collect();
        // Nobody posts the next round's buffers before every rank has taken this round's.
        drop(self.barrier(st)?);
        Ok(got)
    }
}

impl Communicator for Loopback {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.shared.world
    }
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let parts = self.exchange(vec![buf.to_vec(); self.shared.world])?;
        if let Some(p) = parts.iter().find(|p| p.len() != buf.len()) {
            return Err(Error::Input(format!("all-reduce: a rank sent {} values, rank {} {}", p.len(), self.rank, buf.len())));
        }
        buf.fill(0.0);
        for p in &parts {
            for (b, x) in buf.iter_mut().zip(p) {
                *b += x;
            }
        }
        Ok(())
    }
    fn all_gather(&self, part: &[f32]) -> Result<Vec<f32>> {
        let parts = self.exchange(vec![part.to_vec(); self.shared.world])?;
        if let Some(p) = parts.iter().find(|p| p.len() != part.len()) {
            return Err(Error::Input(format!("all-gather: a rank sent {} values, rank {} {}", p.len(), self.rank, part.len())));
        }
        Ok(parts.concat())
    }
    fn all_to_all(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        self.exchange(send)
    }
    fn fail(&self, why: &str) {
        Loopback::fail(self, why);
    }
}
