//! Request priorities (`Request::priority`, lower sooner, as vLLM's priority scheduling).
//!
//! - **Admission:** the waiting request admitted next is the one of lowest *effective*
//!   priority, ties to queue order (arrival; a preempted request keeps its place ahead of the
//!   requests that arrived after it). Effective priority = priority − steps since arrival /
//!   `EngineConfig::priority_aging_steps`: a request of priority p that has waited
//!   `aging × (p − q)` steps ranks with new arrivals of priority q, so a stream of more urgent
//!   requests delays it by a bounded number of steps, never forever. vLLM has no aging (0 here:
//!   a low-priority request waits for as long as more urgent ones keep arriving).
//! - **Running order and preemption:** running sequences are kept sorted by priority (stable:
//!   admission order among equals), so each step serves the most urgent first and a pool that
//!   runs out preempts from the end — the lowest priority, then the latest admitted. Aging does
//!   not apply here: an old request does not become immune to preemption by waiting.
//!
//! With every priority equal both orders are exactly first come, first served.

use reference::{Error, Result};

use crate::engine::Engine;
use crate::request::RequestId;
use crate::runner::ModelRunner;

/// `priority` aged by `waited` steps at one level per `aging` steps (0: no aging).
pub(crate) fn effective(priority: i32, waited: u64, aging: u64) -> i64 {
    let levels = waited.checked_div(aging).unwrap_or(0);
    i64::from(priority).saturating_sub(i64::try_from(levels).unwrap_or(i64::MAX))
}

impl<R: ModelRunner> Engine<R> {
    /// The waiting request to admit next and its index in the queue.
    pub(crate) fn next_waiting(&self) -> Result<Option<(usize, RequestId)>> {
        let mut best: Option<(i64, usize, RequestId)> = None;
        for (at, &id) in self.waiting.iter().enumerate() {
            let s = self.seq(id)?;
            let p = effective(s.req.priority, self.step_no.saturating_sub(s.arrival_step), self.cfg.priority_aging_steps);
            if best.is_none_or(|(b, _, _)| p < b) {
                best = Some((p, at, id));
            }
        }
        Ok(best.map(|(_, at, id)| (at, id)))
    }

    /// Sort the running sequences by priority, admission order among equals.
    pub(crate) fn order_running(&mut self) -> Result<()> {
        let mut keyed = Vec::with_capacity(self.running.len());
        for &id in &self.running {
            keyed.push((self.seqs.get(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?.req.priority, id));
        }
        // Stable: equal priorities keep their order.
        keyed.sort_by_key(|&(p, _)| p);
        self.running = keyed.into_iter().map(|(_, id)| id).collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::effective;

    #[test]
    fn aging_lowers_the_effective_priority_one_level_per_period() {
        assert_eq!(effective(5, 0, 10), 5);
        assert_eq!(effective(5, 9, 10), 5);
        assert_eq!(effective(5, 10, 10), 4);
        assert_eq!(effective(5, 35, 10), 2);
        assert_eq!(effective(-3, 1000, 0), -3, "0: no aging");
        assert_eq!(effective(i32::MIN, u64::MAX, 1), i64::MIN, "saturates");
    }
}
