//! Speculative decoding from the command line (issue 26; the `--speculate` flags and the
//! engine they build are `super::spec`): `tandem bench-spec`: tokens/s with and without speculation at several batch sizes, the
//! acceptance, and the speed-up the measured acceptance and step costs predict — so that the
//! overhead (measured vs predicted) is visible. One JSON row per configuration on stdout, a
//! table on stderr. Runs on the CPU reference (small settings) and on a GPU (`--device`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use engine::{Engine, EngineConfig, EngineStats, Request};
use reference::tokenizer::Tokenizer;
use serde_json::{json, Value};

use super::generate_args::{prompt_ids, SamplingArgs};
use super::source::KV_BLOCK;
use super::spec::{build, draft_runner, DynRunner, SpecArgs, Speculate};
// `generate` and its batch mode build their engine through these.
pub use super::spec::{engine_for, summary};
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct BenchSpecArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Configurations to compare with plain decoding, comma-separated (`--speculate`
    /// values): ngram, self:int8, self:mxfp4, draft:PATH.
    #[arg(long, default_value = "ngram")]
    pub speculate: String,
    /// Adaptive depth: `on`, `off` (fixed k) or `on,off` (a row each).
    #[arg(long, default_value = "off,on")]
    pub adaptive: String,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Batch sizes (sequences decoding together), comma-separated.
    #[arg(long, default_value = "1,8")]
    pub batches: String,
    /// Tokens each request generates (at most; EOS ends a request of a real model).
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Prompt files (one user message per .txt file, wrapped in the chat template when the
    /// model has one), taken in turn.
    #[arg(long, default_value = "benches/prompts/spec")]
    pub prompts: PathBuf,
    /// Models without a tokenizer (synthetic): random prompts of this many ids.
    #[arg(long, default_value_t = 64)]
    pub prompt_len: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Also write the rows here (JSON lines).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// A comma-separated list of positive integers (`what` names the flag in errors).
fn usize_list(s: &str, what: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> =
        s.split(',').map(|x| x.trim().parse().map_err(|_| CliError::Usage(format!("{what}: `{x}` is not a number")))).collect::<Result<_>>()?;
    if v.is_empty() || v.contains(&0) {
        return Err(CliError::Usage(format!("{what}: give positive numbers")));
    }
    Ok(v)
}

/// The prompts: the .txt files of `dir` through the tokenizer (and chat template), or
/// random ids for a model without a tokenizer.
fn load_prompts(a: &BenchSpecArgs, opened: &super::source::Opened) -> Result<Vec<Vec<u32>>> {
    let Some(tok) = opened.tokenizer.as_ref() else {
        let v = opened.config.vocab as u32;
        return Ok((0..4u32)
            .map(|p| (0..a.prompt_len as u32).map(|i| 3 + reference::synthetic::hash(i ^ p.wrapping_mul(0x9E37_79B9)) % (v - 3).max(1)).collect())
            .collect());
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&a.prompts)
        .map_err(|e| reference::Error::io(&a.prompts, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(CliError::Usage(format!("--prompts {}: no .txt files", a.prompts.display())));
    }
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).map_err(|e| reference::Error::io(f, e))?;
            let text = match &opened.chat {
                Some(t) => t.render(&[reference::chat::Message::user(text.trim().to_string())], true)?,
                None => text,
            };
            prompt_ids(tok, &super::source::PromptText::parsed(text), opened.config.bos_id)
        })
        .collect()
}

/// What one run measured.
struct Run {
    stats: EngineStats,
    wall_s: f64,
    generated: u64,
    /// Each request's tokens, by request id.
    tokens: Vec<Vec<u32>>,
}

impl Run {
    /// Decode steps by the rows the target ran: `{rows: [steps, ms per step]}`.
    fn by_rows(&self) -> Value {
        let m: serde_json::Map<String, Value> =
            self.stats.decode_by_rows.iter().map(|(r, &(n, ns))| (r.to_string(), json!([n, ns as f64 * 1e-6 / n.max(1) as f64]))).collect();
        Value::Object(m)
    }
    /// The same as a line: `rows × steps at ms`.
    fn by_rows_text(&self) -> String {
        let parts: Vec<String> =
            self.stats.decode_by_rows.iter().map(|(r, &(n, ns))| format!("{r} rows: {n} × {:.2} ms", ns as f64 * 1e-6 / n.max(1) as f64)).collect();
        parts.join(", ")
    }
    fn decode_tps(&self) -> f64 {
        self.stats.decode_tokens as f64 / (self.stats.decode_ns as f64 * 1e-9).max(1e-12)
    }
    /// Per decode step: (tokens, target ms, draft ms).
    fn per_step(&self) -> (f64, f64, f64) {
        let n = self.stats.decode_steps.max(1) as f64;
        (self.stats.decode_tokens as f64 / n, self.stats.target_ns as f64 * 1e-6 / n, self.stats.draft_ns as f64 * 1e-6 / n)
    }
}

/// `after − before`, counter by counter.
fn stats_delta(after: &EngineStats, before: &EngineStats) -> EngineStats {
    EngineStats {
        steps: after.steps - before.steps,
        preemptions: after.preemptions - before.preemptions,
        swapped_out: after.swapped_out - before.swapped_out,
        swapped_in: after.swapped_in - before.swapped_in,
        swap_blocks_out: after.swap_blocks_out - before.swap_blocks_out,
        swap_blocks_in: after.swap_blocks_in - before.swap_blocks_in,
        cached_tokens: after.cached_tokens - before.cached_tokens,
        prompt_tokens: after.prompt_tokens - before.prompt_tokens,
        generated_tokens: after.generated_tokens - before.generated_tokens,
        finished: after.finished - before.finished,
        aborted: after.aborted - before.aborted,
        spec_verifies: after.spec_verifies - before.spec_verifies,
        spec_proposed: after.spec_proposed - before.spec_proposed,
        spec_accepted: after.spec_accepted - before.spec_accepted,
        spec_emitted: after.spec_emitted - before.spec_emitted,
        decode_steps: after.decode_steps - before.decode_steps,
        decode_ns: after.decode_ns - before.decode_ns,
        target_ns: after.target_ns - before.target_ns,
        draft_ns: after.draft_ns - before.draft_ns,
        decode_tokens: after.decode_tokens - before.decode_tokens,
        draft_rounds: after.draft_rounds - before.draft_rounds,
        graph_recordings_in_steps: after.graph_recordings_in_steps - before.graph_recordings_in_steps,
        decode_by_rows: after
            .decode_by_rows
            .iter()
            .map(|(&rows, &(n, ns))| {
                let (n0, ns0) = before.decode_by_rows.get(&rows).copied().unwrap_or_default();
                (rows, (n - n0, ns - ns0))
            })
            .filter(|(_, (n, _))| *n > 0)
            .collect(),
        masks: after.masks - before.masks,
        mask_compute_ns: after.mask_compute_ns - before.mask_compute_ns,
        mask_wait_ns: after.mask_wait_ns - before.mask_wait_ns,
    }
}

/// Requests in one pass at `batch` sequences: every prompt at least once, and whole batches
/// (batch 1 runs each prompt in turn; batch 8 over 4 prompts runs each twice at once).
fn pass_requests(batch: usize, prompts: usize) -> usize {
    let batch = batch.max(1);
    batch.max(prompts).div_ceil(batch) * batch
}

/// Run [`pass_requests`] requests (prompts in turn), at most `batch` at once (the engine's
/// `max_num_seqs`), to completion on `e`; the stats are this run's.
fn run_batch(e: &mut Engine<DynRunner>, prompts: &[Vec<u32>], batch: usize, max_tokens: usize, a: &BenchSpecArgs, stop: &[u32]) -> Result<Run> {
    let params = a.sampling.params();
    let before = e.stats().clone();
    let mut first = None;
    let n = pass_requests(batch, prompts.len());
    for i in 0..n {
        let p = prompts[i % prompts.len()].clone();
        let r = Request {
            stop_token_ids: stop.to_vec(),
            ..Request::new(p)
                .with_max_tokens(max_tokens)
                .with_params(engine::sampling::SamplingParams { seed: params.seed + i as u64, ..params.clone() })
        };
        let id = e.add_request(r)?;
        first.get_or_insert(id);
    }
    let first = first.unwrap_or(0);
    let t0 = Instant::now();
    let outs = e.run_to_completion()?;
    let wall_s = t0.elapsed().as_secs_f64();
    let generated = outs.iter().map(|o| o.new_tokens.len() as u64).sum();
    let mut tokens = vec![Vec::new(); n];
    for o in &outs {
        if let Some(t) = o.id.checked_sub(first).and_then(|i| tokens.get_mut(i as usize)) {
            t.extend(&o.new_tokens);
        }
    }
    Ok(Run { stats: stats_delta(e.stats(), &before), wall_s, generated, tokens })
}

pub fn run(a: BenchSpecArgs) -> Result<()> {
    let batches = usize_list(&a.batches, "--batches")?;
    let configs: Vec<Speculate> = a.speculate.split(',').map(|s| Speculate::parse(s.trim())).collect::<Result<_>>()?;
    let adaptive: Vec<bool> = a
        .adaptive
        .split(',')
        .map(|s| match s.trim() {
            "on" => Ok(true),
            "off" => Ok(false),
            x => Err(CliError::Usage(format!("--adaptive: `{x}` is not on or off"))),
        })
        .collect::<Result<_>>()?;
    a.sampling.params().validate()?;
    // Numbers only from a build whose conformance suite passes on this device (`tandem bench`).
    let gate = match super::source::resolve(a.model.device) {
        Some(b) => super::gate::conformance_gate(b)?,
        None => "cpu reference: ground truth, no gate".to_string(),
    };
    eprintln!("tandem bench-spec — {gate}");
    let mut opened = a.model.open()?;
    let prompts = load_prompts(&a, &opened)?;
    let stop = opened.tokenizer.as_ref().map(Tokenizer::eog_ids).unwrap_or_default();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let max_b = batches.iter().copied().max().unwrap_or(1);
    let kv = max_b * (longest + a.max_tokens + a.spec.spec_k + 2 * KV_BLOCK);
    let mut target = Some(opened.runner(a.model.device, a.model.dtype.as_deref(), kv)?);
    let name = target.as_ref().map(|r| r.name()).unwrap_or_default();
    let mut drafts: Vec<Option<DynRunner>> =
        configs.iter().map(|c| draft_runner(c, &a.model, opened.tokenizer.as_ref(), kv)).collect::<Result<_>>()?;
    let mut sink: Option<Box<dyn std::io::Write>> = match &a.json_out {
        Some(p) => Some(Box::new(std::fs::File::create(p).map_err(|e| reference::Error::io(p, e))?)),
        None => None,
    };
    let mut rows: Vec<Value> = Vec::new();
    // One engine per configuration, like a server's: it runs the batch three times, the first
    // two warm-ups (kernels compiled for the shapes the run meets, graphs recorded, the
    // adaptive depth's cost lines measured), and the third is measured. One warm-up is not
    // enough: the second pass finds its prompts in the prefix cache, so its first steps have
    // other shapes (on the Mistral shape a kernel compiled there cost 1.1 s of a 1.8 s pass);
    // the third repeats the second's.
    let measure = |spec: Option<(usize, bool)>, batch: usize, target: &mut Option<DynRunner>, drafts: &mut [Option<DynRunner>]| -> Result<Run> {
        let runner = target.take().ok_or_else(|| CliError::Usage("internal: runner lost".into()))?;
        let (sa, draft) = match spec {
            Some((i, adaptive)) => (Some((SpecArgs { spec_fixed: !adaptive, ..a.spec.clone() }, configs[i].clone())), drafts[i].take()),
            None => (None, None),
        };
        let mut e =
            build(sa.as_ref().map(|(s, w)| (s, w)), runner, draft, EngineConfig { max_num_seqs: batch.max(1), ..EngineConfig::default() }, None)?;
        let pass = |e: &mut Engine<DynRunner>| run_batch(e, &prompts, batch, a.max_tokens, &a, &stop);
        let r = pass(&mut e).and_then(|_| pass(&mut e)).and_then(|_| pass(&mut e));
        let (t, d) = e.into_runners();
        *target = Some(t);
        if let Some((i, _)) = spec {
            drafts[i] = d;
        }
        r
    };
    for &b in &batches {
        let plain = measure(None, b, &mut target, &mut drafts)?;
        let (tok_p, t_p, _) = plain.per_step();
        let row = json!({"model": opened.label, "runner": name, "gate": gate, "batch": b, "speculate": "off", "max_tokens": a.max_tokens, "generated": plain.generated, "wall_s": plain.wall_s, "decode_tokens_per_s": plain.decode_tps(), "speedup": 1.0, "t_plain_ms": t_p, "tokens_per_step": tok_p, "steps_by_rows": plain.by_rows()});
        eprintln!("batch {b}, plain: {}", plain.by_rows_text());
        emit(&mut sink, &row)?;
        rows.push(row);
        for (i, c) in configs.iter().enumerate() {
            for &ad in &adaptive {
                let r = measure(Some((i, ad)), b, &mut target, &mut drafts)?;
                let st = &r.stats;
                let (tok_s, t_v, t_d) = r.per_step();
                let predicted = (tok_s / tok_p.max(1e-12)) * t_p / (t_v + t_d).max(1e-12);
                let measured = r.decode_tps() / plain.decode_tps().max(1e-12);
                // Greedy (and n-gram) speculation gives plain decoding's tokens up to the
                // runner's numerics (a verification runs positions through other kernels).
                let same = plain.tokens.iter().zip(&r.tokens).filter(|(p, s)| p == s).count() as f64 / plain.tokens.len().max(1) as f64;
                let row = json!({
                    "model": opened.label, "runner": name, "batch": b, "speculate": label(c), "adaptive": ad, "k": a.spec.spec_k,
                    "max_tokens": a.max_tokens, "generated": r.generated, "wall_s": r.wall_s, "decode_tokens_per_s": r.decode_tps(), "speedup": measured,
                    "acceptance_rate": st.spec_accepted as f64 / st.spec_proposed.max(1) as f64,
                    "mean_accepted": st.spec_accepted as f64 / st.spec_verifies.max(1) as f64,
                    "verified_share": st.spec_verifies as f64 / (st.decode_steps.max(1) * b as u64) as f64,
                    "tokens_per_step": tok_s, "t_plain_ms": t_p, "t_verify_ms": t_v, "t_draft_ms": t_d,
                    "predicted_speedup": predicted, "overhead": 1.0 - measured / predicted.max(1e-12), "same_tokens": same,
                    "gate": gate, "steps_by_rows": r.by_rows(),
                });
                eprintln!("batch {b}, {} {}: {}", label(c), if ad { "adaptive" } else { "fixed k" }, r.by_rows_text());
                emit(&mut sink, &row)?;
                rows.push(row);
            }
        }
    }
    eprint!("{}", table(&rows));
    Ok(())
}

fn label(c: &Speculate) -> String {
    match c {
        Speculate::Ngram => "ngram".into(),
        Speculate::Draft(p) => format!("draft:{}", p.display()),
        Speculate::SelfQuant(w) => format!("self:{w}"),
    }
}

fn emit(sink: &mut Option<Box<dyn std::io::Write>>, row: &Value) -> Result<()> {
    println!("{row}");
    if let Some(s) = sink.as_mut() {
        writeln!(s, "{row}")?;
    }
    Ok(())
}

/// The rows as a fixed-width table.
fn table(rows: &[Value]) -> String {
    let f = |r: &Value, k: &str, p: usize| r.get(k).and_then(Value::as_f64).map_or("-".to_string(), |v| format!("{v:.p$}"));
    let mut out = format!(
        "{:>5} {:<14} {:>8} {:>10} {:>8} {:>7} {:>8} {:>9} {:>9} {:>8} {:>9} {:>8} {:>5}\n",
        "batch",
        "speculate",
        "adaptive",
        "tok/s",
        "speedup",
        "accept",
        "mean acc",
        "plain ms",
        "verify ms",
        "draft ms",
        "predicted",
        "overhead",
        "same"
    );
    for r in rows {
        let ad = r.get("adaptive").and_then(Value::as_bool).map_or("-", |b| if b { "on" } else { "off" });
        out += &format!(
            "{:>5} {:<14} {:>8} {:>10} {:>8} {:>7} {:>8} {:>9} {:>9} {:>8} {:>9} {:>8} {:>5}\n",
            r.get("batch").and_then(Value::as_u64).unwrap_or(0),
            r.get("speculate").and_then(Value::as_str).unwrap_or("?"),
            ad,
            f(r, "decode_tokens_per_s", 1),
            f(r, "speedup", 2),
            f(r, "acceptance_rate", 2),
            f(r, "mean_accepted", 2),
            f(r, "t_plain_ms", 2),
            f(r, "t_verify_ms", 2),
            f(r, "t_draft_ms", 2),
            f(r, "predicted_speedup", 2),
            f(r, "overhead", 2),
            f(r, "same_tokens", 2),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_runs_every_prompt_in_whole_batches() {
        assert_eq!(pass_requests(1, 4), 4, "batch 1: each prompt in turn");
        assert_eq!(pass_requests(8, 4), 8);
        assert_eq!(pass_requests(3, 4), 6);
        assert_eq!(pass_requests(32, 4), 32);
        assert_eq!(pass_requests(0, 0), 1);
    }
}
