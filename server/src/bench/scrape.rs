//! What the load generator reads from the server's `/metrics` (Prometheus text) around and
//! during a level: prefix-cache hit tokens and preemptions (counters: the level's share is
//! the difference of two scrapes) and the KV cache's use (gauges, sampled while the level
//! runs; the peak is kept). The names are `tandem serve`'s; a server without them (or
//! without `/metrics`) leaves the row's fields empty.

use std::collections::BTreeMap;
use std::time::Duration;

/// Prompt tokens served from the prefix cache (counter).
pub const PREFIX_HITS: &str = "tandem_prefix_cache_hit_tokens_total";
/// Sequences preempted (counter).
pub const PREEMPTIONS: &str = "tandem_preemptions_total";
/// KV cache blocks held by sequences, and in the pool (gauges).
pub const KV_USED: &str = "tandem_kv_blocks_used";
pub const KV_TOTAL: &str = "tandem_kv_blocks_total";
/// Sequences in the running batch (gauge).
pub const RUNNING: &str = "tandem_running_sequences";

/// Bytes in use on the server's device, and the server process's resident memory (gauges).
pub const DEVICE_MEMORY: &str = "tandem_device_memory_used_bytes";
pub const RESIDENT: &str = "process_resident_memory_bytes";

/// How often the KV gauges are sampled while a level runs.
pub const KV_POLL: Duration = Duration::from_millis(100);

/// The unlabelled samples of a Prometheus text exposition (`name value` lines); comments,
/// labelled series and lines that do not parse are left out.
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (name, value) = (it.next()?, it.next()?);
            if name.contains('{') {
                return None;
            }
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// `GET {base}/metrics`, parsed; `None` when the server has none (any failure: the row's
/// counter fields stay empty rather than failing the benchmark).
pub async fn scrape(client: &reqwest::Client, base: &str) -> Option<BTreeMap<String, f64>> {
    let resp = client.get(format!("{base}/metrics")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(parse(&resp.text().await.ok()?))
}

/// A counter's growth between two scrapes (`None` when either lacks it).
pub fn delta(before: Option<&BTreeMap<String, f64>>, after: Option<&BTreeMap<String, f64>>, name: &str) -> Option<u64> {
    let (b, a) = (before?.get(name)?, after?.get(name)?);
    Some((a - b).max(0.0).round() as u64)
}

/// The KV cache's use in one scrape: used / total blocks (`None` without both or an empty pool).
pub fn kv_use(m: &BTreeMap<String, f64>) -> Option<f64> {
    let (used, total) = (m.get(KV_USED)?, m.get(KV_TOTAL)?);
    (*total > 0.0).then(|| used / total)
}

/// A gauge's first and last samples while a level ran, and its peak (for memory: bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Track {
    pub first: f64,
    pub last: f64,
    pub peak: f64,
}

impl Track {
    /// `track` with the sample `v` of `name` in `m` taken in (`None` until a sample has one).
    pub fn take(track: Option<Track>, m: &BTreeMap<String, f64>, name: &str) -> Option<Track> {
        let Some(&v) = m.get(name) else { return track };
        Some(match track {
            None => Track { first: v, last: v, peak: v },
            Some(t) => Track { last: v, peak: t.peak.max(v), ..t },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP tandem_kv_blocks_used KV\n# TYPE tandem_kv_blocks_used gauge\ntandem_kv_blocks_used 12\n\
        tandem_kv_blocks_total 48\ntandem_requests_total{outcome=\"stop\"} 3\ntandem_prefix_cache_hit_tokens_total 160\nbroken\n";

    #[test]
    fn reads_unlabelled_samples_and_differences() {
        let m = parse(TEXT);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(kv_use(&m), Some(0.25));
        let mut later = m.clone();
        later.insert(PREFIX_HITS.into(), 224.0);
        assert_eq!(delta(Some(&m), Some(&later), PREFIX_HITS), Some(64));
        assert_eq!(delta(Some(&m), Some(&later), PREEMPTIONS), None, "absent from both");
        assert_eq!(delta(None, Some(&later), PREFIX_HITS), None);
        assert_eq!(kv_use(&parse("tandem_kv_blocks_used 0\ntandem_kv_blocks_total 0\n")), None);
    }

    #[test]
    fn a_track_keeps_the_first_last_and_peak_samples() {
        let at = |v: f64| parse(&format!("{RESIDENT} {v}\n"));
        let mut t = Track::take(None, &parse(TEXT), RESIDENT);
        assert_eq!(t, None, "no sample yet");
        for v in [5.0, 9.0, 7.0] {
            t = Track::take(t, &at(v), RESIDENT);
        }
        assert_eq!(t, Some(Track { first: 5.0, last: 7.0, peak: 9.0 }));
        assert_eq!(Track::take(t, &parse(TEXT), RESIDENT), t, "a scrape without the gauge changes nothing");
    }
}
