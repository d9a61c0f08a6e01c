//! `/metrics` in the Prometheus text format: request outcomes, queue and batch sizes, token
//! counts, TTFT and per-token latency histograms, KV blocks.

use std::fmt::Write;
use std::time::Duration;

use engine::{EngineLoad, EngineStats, FinishReason};

/// How a request ended (or was turned away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// EOS, a stop token or a stop string.
    Stop,
    /// `max_tokens` or the context.
    Length,
    /// The client went away, or the shutdown timeout ran out.
    Abort,
    /// The engine failed while running it (500).
    Error,
    /// Refused before it ran: a bad request (4xx but 429).
    Invalid,
    /// Refused: the queue was full (429).
    Rejected,
    /// Refused: loading, shutting down, or no engine (503).
    Unavailable,
}

const OUTCOMES: [Outcome; 7] =
    [Outcome::Stop, Outcome::Length, Outcome::Abort, Outcome::Error, Outcome::Invalid, Outcome::Rejected, Outcome::Unavailable];

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Stop => "stop",
            Outcome::Length => "length",
            Outcome::Abort => "abort",
            Outcome::Error => "error",
            Outcome::Invalid => "invalid",
            Outcome::Rejected => "rejected",
            Outcome::Unavailable => "unavailable",
        }
    }
    pub fn of(f: FinishReason) -> Self {
        match f {
            FinishReason::Stop | FinishReason::GrammarDeadEnd => Outcome::Stop,
            FinishReason::Length => Outcome::Length,
            FinishReason::Abort => Outcome::Abort,
        }
    }
    /// The outcome of an error response's status.
    pub fn of_status(status: u16) -> Self {
        match status {
            429 => Outcome::Rejected,
            503 => Outcome::Unavailable,
            400..=499 => Outcome::Invalid,
            _ => Outcome::Error,
        }
    }
}

/// A cumulative histogram over fixed bucket bounds (seconds).
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|&b| s <= b) {
            self.counts[i] += 1;
        }
        self.sum += s;
        self.count += 1;
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let mut acc = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            acc += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}", self.count, self.sum, self.count);
    }
}

const TTFT_BOUNDS: &[f64] = &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const TPOT_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];

/// Everything `/metrics` reports; the engine thread updates it, handlers count refusals.
#[derive(Debug, Clone)]
pub struct Metrics {
    outcomes: [u64; OUTCOMES.len()],
    pub ttft: Histogram,
    /// Time between consecutive tokens of one request.
    pub tpot: Histogram,
    pub load: EngineLoad,
    pub stats: EngineStats,
    /// Bytes in use on the model's device, where the runner says (`ModelRunner::device_memory`),
    /// read at most every [`MEMORY_EVERY`].
    pub device_memory_used: Option<u64>,
    pub ready: bool,
}

/// How often the engine thread reads the device's memory for `/metrics` (a driver call: not at
/// every step).
pub const MEMORY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            outcomes: [0; OUTCOMES.len()],
            ttft: Histogram::new(TTFT_BOUNDS),
            tpot: Histogram::new(TPOT_BOUNDS),
            load: EngineLoad { running: 0, waiting: 0, kv_blocks_used: 0, kv_blocks_cached: 0, kv_blocks_total: 0 },
            device_memory_used: None,
            stats: EngineStats::default(),
            ready: false,
        }
    }
}

/// The process's resident set in bytes (`/proc/self/statm`'s second field, in pages); `None`
/// where the system has no such file.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a system constant; no memory is touched.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().filter(|&p| p > 0).map(|p| pages * p)
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn scalar(out: &mut String, name: &str, help: &str, kind: &str, v: impl std::fmt::Display) {
    header(out, name, help, kind);
    let _ = writeln!(out, "{name} {v}");
}

impl Metrics {
    pub fn count(&mut self, o: Outcome) {
        if let Some(i) = OUTCOMES.iter().position(|&x| x == o) {
            self.outcomes[i] += 1;
        }
    }
    pub fn outcome(&self, o: Outcome) -> u64 {
        OUTCOMES.iter().position(|&x| x == o).map_or(0, |i| self.outcomes[i])
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        header(&mut out, "tandem_requests_total", "Requests by outcome: stop, length, abort (client gone or shutdown), error (engine failure), invalid (4xx), rejected (queue full, 429), unavailable (503).", "counter");
        for (o, n) in OUTCOMES.iter().zip(self.outcomes) {
            let _ = writeln!(out, "tandem_requests_total{{outcome=\"{}\"}} {n}", o.name());
        }
        let l = &self.load;
        let s = &self.stats;
        let rows: [(&str, &str, &str, u64); 17] = [
            ("tandem_model_ready", "1 once the model has loaded.", "gauge", self.ready as u64),
            ("tandem_queue_depth", "Requests waiting for a sequence slot or KV blocks.", "gauge", l.waiting as u64),
            ("tandem_running_sequences", "Sequences in the running batch.", "gauge", l.running as u64),
            ("tandem_kv_blocks_used", "KV cache blocks held by sequences.", "gauge", l.kv_blocks_used as u64),
            ("tandem_kv_blocks_cached", "Free KV cache blocks keeping a reusable prefix.", "gauge", l.kv_blocks_cached as u64),
            ("tandem_kv_blocks_total", "KV cache blocks in the pool.", "gauge", l.kv_blocks_total as u64),
            ("tandem_prompt_tokens_total", "Prompt tokens of admitted requests.", "counter", s.prompt_tokens),
            ("tandem_generation_tokens_total", "Tokens generated.", "counter", s.generated_tokens),
            ("tandem_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.", "counter", s.cached_tokens),
            ("tandem_engine_steps_total", "Engine steps run.", "counter", s.steps),
            ("tandem_preemptions_total", "Sequences preempted (KV recomputed, or swapped to the host and back).", "counter", s.preemptions),
            ("tandem_swapped_out_total", "Preemptions that copied the sequence's KV to host memory.", "counter", s.swapped_out),
            ("tandem_swapped_in_total", "Swapped sequences whose KV was copied back to the device.", "counter", s.swapped_in),
            (
                "tandem_graph_recordings_in_steps_total",
                "Decode graphs recorded inside a request's step (not at start-up).",
                "counter",
                s.graph_recordings_in_steps,
            ),
            ("tandem_spec_verifications_total", "Speculative decoding: sequence-steps that verified proposals.", "counter", s.spec_verifies),
            ("tandem_spec_proposed_tokens_total", "Speculative decoding: tokens proposed.", "counter", s.spec_proposed),
            ("tandem_spec_accepted_tokens_total", "Speculative decoding: proposed tokens accepted.", "counter", s.spec_accepted),
        ];
        for (name, help, kind, v) in rows {
            scalar(&mut out, name, help, kind, v);
        }
        // Memory, where it can be read: a soak's flat line (or its leak) shows in these.
        if let Some(b) = self.device_memory_used {
            scalar(&mut out, "tandem_device_memory_used_bytes", "Bytes in use on the model's device (the driver's count).", "gauge", b);
        }
        if let Some(b) = resident_bytes() {
            scalar(&mut out, "process_resident_memory_bytes", "Resident memory of the server process.", "gauge", b);
        }
        self.ttft.render(&mut out, "tandem_time_to_first_token_seconds", "Time from a request's arrival at the engine to its first token.");
        self.tpot.render(&mut out, "tandem_time_per_output_token_seconds", "Time between consecutive output tokens of a request.");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_gauges_appear_where_they_can_be_read() {
        let mut m = Metrics::default();
        let text = m.render();
        assert!(!text.contains("tandem_device_memory_used_bytes"), "a runner that cannot say has no device gauge");
        if cfg!(target_os = "linux") {
            let rss = scrape_value(&text, "process_resident_memory_bytes").expect("the resident set on Linux");
            assert!(rss > 1e6, "a process holds more than a megabyte: {rss}");
        }
        m.device_memory_used = Some(123_456_789);
        assert_eq!(scrape_value(&m.render(), "tandem_device_memory_used_bytes"), Some(123_456_789.0));
    }

    fn scrape_value(text: &str, name: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }
}
