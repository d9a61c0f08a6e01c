//! Every architecture's tiny checkpoint on the GPU model and runner: the random models that
//! transformers made (`reference/tests/fixtures/tiny/`: an HF directory and the converter's
//! GGUF, f32), loaded by `GpuModel::load` from the file itself, against
//! `reference::arch::ArchModel` on the same weights. [`ArchModelCase`]: a prefill of 9 of the
//! stored ids (the GEMMs) and 3 one-token decode steps (the fused gemvs), every logit row, one
//! sequence on the runner (`optimized::runner::single`).
//! [`ArchRunnerCase`]: the batched runner on a ragged batch of two sequences of different
//! lengths (prefill together, then two decode steps of both), each drawing row's logits
//! against the reference run of that sequence alone. An architecture the GPU does not run yet
//! is a skip carrying `optimized::model::gpu_unsupported`'s reason. [`Tweak`]s change the spec
//! on both sides: to run what the GPU folds into the weights at load (a query scale other than
//! 1/√D, `(1 + w)` norm gains) on checkpoints that have neither, and to run the checkpoints
//! whose only missing GPU feature is their RoPE (Phi-3's partial rotary, Llama 3's scaling)
//! with plain RoPE, so their weights' layout (fused q|k|v and gate|up, a tied head, GGUF's
//! permuted rows) is checked now.

use std::path::PathBuf;

use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use optimized::config::KernelConfig;
use optimized::kernels::qmatmul::QGEMV_MAX_T;
use optimized::model::{gpu_unsupported, GpuModel};
use optimized::runner::single::SingleSeq;
use optimized::runner::GpuRunner;
use optimized::Client;
use reference::arch::model::{forward, new_cache, WeightsRef};
use reference::arch::{ArchModel, ModelSpec, Norm};
use reference::gguf::GgufFile;
use reference::loader::SafetensorsDir;
use reference::ops::rope::RopeScaling;
use reference::weights::TensorSource;

use crate::{compare, Case, Dtype, Metrics, Op, Outcome};

/// The fixtures, by directory name.
const FIXTURES: [&str; 8] = ["llama3", "mistral_hd", "qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3", "qwen3_yarn"];
/// The FP8 checkpoints of three of them (block scales, partial blocks, compressed-tensors),
/// run with their linear weights kept FP8 on the device.
const FP8_FIXTURES: [&str; 3] = ["llama3_fp8", "qwen3_moe_fp8", "qwen3_fp8"];
/// Whether `fixture`'s linear weights are kept quantized (FP8) on the device: its steps of
/// more than 8 rows run the quantized GEMM path, on the tensor cores with bf16 activations
/// where the device has them, so its bound is the quantized models' (`model_tolerance`).
fn fp8_kept(fixture: &str) -> bool {
    FP8_FIXTURES.contains(&fixture)
}
/// Whether fixture `name`'s checkpoint quantizes its linears' inputs (a W8A8 FP8 one).
fn act_quant(name: &str, gguf: bool) -> bool {
    !gguf && reference::arch::spec_from_hf(&fixture(name).join("config.json")).is_ok_and(|s| s.act_quant.is_some())
}

/// The whole-model bound of a fixture whose steps reach `rows` rows (`super::model_tolerance`;
/// where its checkpoint quantizes the linears' inputs, `act_quant_model` on f32 activations and
/// `act_quant_tc` where steps above the gemv round them to 16 bits).
fn arch_tolerance(client: &Client, spec: &ModelSpec, quantized: bool, rows: usize) -> crate::Tolerance {
    let base = super::model_tolerance(client, Op::Arch, Dtype::F32, quantized, rows, spec.n_layers());
    let tc = super::tc_activation(client, Dtype::F32, quantized).filter(|_| rows > QGEMV_MAX_T);
    match (spec.act_quant, tc) {
        (Some(_), Some(act)) => crate::tolerance::act_quant_tc(act, spec.n_layers()).0,
        (Some(_), None) => crate::tolerance::act_quant_model(base).0,
        (None, _) => base,
    }
}

/// Prefill length of the model case (> 8 rows: the GEMM path); the rest of the ids decode.
const PREFILL: usize = 9;
/// Positions per block of the runner's pools, and blocks.
const BS: usize = 4;
const BLOCKS: usize = 16;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/fixtures/tiny").join(name)
}

/// The stored ids of fixture `name` (`logits.json`).
pub(crate) fn ids(name: &str) -> Result<Vec<u32>, String> {
    let p = fixture(name).join("logits.json");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let j: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_value(j["ids"].clone()).map_err(|e| format!("{}: ids: {e}", p.display()))
}

/// A change to a fixture's spec, made on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tweak {
    None,
    /// Every layer's query scale halved (`0.5/√D`): Wq's rows and bq scaled at load.
    QueryScale,
    /// Gemma's `x̂ · (1 + w)` norms: the gains uploaded as `w + 1`.
    Rms1p,
    /// Plain full-rotary RoPE in every layer (no scaling, no frequency factors).
    PlainRope,
    /// A sliding window of 4 positions in the even layers, full attention in the odd ones.
    Windows,
}

impl Tweak {
    pub(crate) fn apply(self, spec: &mut ModelSpec) {
        match self {
            Tweak::None => {}
            Tweak::QueryScale => spec.layers.iter_mut().for_each(|l| l.attn.scale *= 0.5),
            Tweak::Rms1p => spec.norm = Norm::Rms1p,
            Tweak::PlainRope => spec.layers.iter_mut().for_each(|l| {
                let r = &mut l.attn.rope;
                (r.rot, r.scaling, r.freq_factors) = (l.attn.head_dim, RopeScaling::None, None);
            }),
            Tweak::Windows => spec.layers.iter_mut().enumerate().for_each(|(i, l)| l.attn.window = (i % 2 == 0).then_some(4)),
        }
    }
    pub(crate) fn mark(self) -> &'static str {
        match self {
            Tweak::None => "",
            Tweak::QueryScale => ",scale=half",
            Tweak::Rms1p => ",norm=1+w",
            Tweak::PlainRope => ",rope=plain",
            Tweak::Windows => ",window=4/full",
        }
    }
}

/// Fixture `name` from its HF directory or GGUF (its spec changed by `tweak`): the reference
/// model, and the GPU model loaded from the same file — or the reason the GPU refuses it.
fn models(client: &Client, name: &str, gguf: bool, tweak: Tweak) -> Result<Result<(ArchModel, GpuModel), String>, String> {
    let dir = fixture(name);
    let path = if gguf { dir.join("model.gguf") } else { dir.clone() };
    let mut reference = reference::arch::load(&path).map_err(|e| e.to_string())?;
    tweak.apply(&mut reference.spec);
    if let Some(why) = gpu_unsupported(&reference.spec) {
        return Ok(Err(why));
    }
    let mut src: Box<dyn TensorSource> = match gguf {
        true => Box::new(GgufFile::open(&path).map_err(|e| e.to_string())?),
        false => Box::new(SafetensorsDir::open(&dir).map_err(|e| e.to_string())?),
    };
    let backend = optimized::Backend::of(client);
    let m = GpuModel::load(client.clone(), backend, src.as_mut(), &reference.spec, optimized::Dtype::F32).map_err(|e| e.to_string())?;
    // The FP8 checkpoints run with their linear weights kept FP8 on the device, not a dense copy.
    if FP8_FIXTURES.contains(&name) && !m.quant.as_deref().is_some_and(|q| q.contains("fp8")) {
        return Err(format!("{name}: linear weights on the device as {:?}, expected FP8 kept as stored", m.quant));
    }
    Ok(Ok((reference, m)))
}

/// Folds `compare`'s metrics into `worst`.
pub(crate) fn check(worst: &mut Metrics, got: &[f32], want: &[f32], tol: crate::Tolerance, at: &str) -> Result<(), String> {
    let m = compare(got, want, tol).map_err(|e| format!("{at}: {e}"))?;
    worst.fold(m);
    Ok(())
}

/// The GPU model vs the reference: prefill then one-token decodes.
#[derive(Debug, Clone)]
pub struct ArchModelCase {
    pub fixture: &'static str,
    pub gguf: bool,
    pub tweak: Tweak,
}

impl ArchModelCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let ids = ids(self.fixture)?;
        // A W8A8 fixture runs on f32 paths only — f32 KV pools, CUDA-core prefill attention,
        // the prefill on the gemvs — under the tight bound (`act_quant_model`): a 16-bit
        // rounding ahead of an E4M3-quantized input flips codes (`act_quant_tc`), and W8A8 and
        // W8A16 would look alike. Its 16-bit paths: `act_quant_linear`'s cases, the runner case.
        let w8a8 = act_quant(self.fixture, self.gguf);
        let client = &match w8a8 {
            true => client.with_kernels(KernelConfig { kv: Some(optimized::Dtype::F32), prefill_tc: false, ..*client.kernels() }),
            false => client.clone(),
        };
        let (reference, m) = match models(client, self.fixture, self.gguf, self.tweak)? {
            Ok(m) => m,
            Err(why) => return Ok(Outcome::Skip(why)),
        };
        let mut gpu = SingleSeq::new(m, ids.len()).map_err(|e| e.to_string())?;
        let prefill = if w8a8 { QGEMV_MAX_T } else { PREFILL };
        let tol = match w8a8 {
            true => crate::tolerance::act_quant_model(crate::tolerance(Op::Arch, Dtype::F32).0).0,
            false => arch_tolerance(client, &reference.spec, fp8_kept(self.fixture), prefill),
        };
        let mut cache = reference.new_cache();
        let mut worst = Metrics::default();
        let split = prefill.min(ids.len());
        let mut steps = vec![&ids[..split]];
        steps.extend(ids[split..].chunks(1));
        for (k, step) in steps.into_iter().enumerate() {
            let want = reference.forward(step, &mut cache, None).map_err(|e| format!("reference step {k}: {e}"))?;
            let got = gpu.forward(step, None).and_then(|l| l.to_f32(&gpu.model().client)).map_err(|e| format!("gpu step {k}: {e}"))?;
            let want = want.as_slice().ok_or("reference logits not contiguous")?;
            check(&mut worst, &got, want, tol, &format!("step {k} ({} tokens) logits", step.len()))?;
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for ArchModelCase {
    fn op(&self) -> Op {
        Op::Arch
    }
    fn name(&self) -> String {
        format!("arch({},{},model{})", self.fixture, if self.gguf { "gguf" } else { "hf" }, self.tweak.mark())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// The GPU runner on a ragged batch vs the reference run of each sequence alone.
#[derive(Debug, Clone)]
pub struct ArchRunnerCase {
    pub fixture: &'static str,
    pub gguf: bool,
    pub tweak: Tweak,
}

impl ArchRunnerCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let ids = ids(self.fixture)?;
        let (reference, gpu) = match models(client, self.fixture, self.gguf, self.tweak)? {
            Ok(m) => m,
            Err(why) => return Ok(Outcome::Skip(why)),
        };
        let mut gpu = GpuRunner::new(gpu, BS, BLOCKS).map_err(|e| e.to_string())?;
        let tokens = ragged_prompts(&ids);
        let rows = tokens.iter().map(Vec::len).sum::<usize>();
        let tol = arch_tolerance(client, &reference.spec, fp8_kept(self.fixture), rows);
        let mut worst = Metrics::default();
        let failed = ragged_steps((&reference.spec, &reference.weights), tokens, |k, plan, want| {
            let got = gpu.step(plan).map_err(|e| format!("gpu step {k}: {e}"))?;
            for (s, (g, w)) in got.iter().zip(want).enumerate() {
                let Some(Some(gl)) = g.logits.first() else {
                    return Ok(Some(format!("step {k} seq {s}: logits not returned")));
                };
                check(&mut worst, gl, w, tol, &format!("step {k} seq {s} logits"))?;
            }
            Ok(None)
        })?;
        if let Some(why) = failed {
            return Ok(Outcome::Fail(why));
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for ArchRunnerCase {
    fn op(&self) -> Op {
        Op::Arch
    }
    fn name(&self) -> String {
        format!("arch({},{},runner{})", self.fixture, if self.gguf { "gguf" } else { "hf" }, self.tweak.mark())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// Two prompts of different lengths from a fixture's stored ids: the first 10, and 5 of them
/// reversed — the ragged batch of the runner cases.
pub(crate) fn ragged_prompts(ids: &[u32]) -> Vec<Vec<u32>> {
    vec![ids.iter().take(10).copied().collect(), ids.iter().rev().take(5).copied().collect()]
}

/// A runner under test against the reference on `tokens` (two sequences) as one ragged batch:
/// step 0 prefills both, steps 1 and 2 decode one token of each (blocks interleaved between
/// the two sequences), every sequence going on with the reference's greedy pick. `step(k,
/// plan, want)` runs step k's plan (each row greedy, its logits asked for) with `want` the
/// reference's logits at each sequence's last position, run alone; it returns a failure that
/// ends the walk, which this returns.
pub(crate) fn ragged_steps(
    reference: (&ModelSpec, &dyn WeightsRef),
    mut tokens: Vec<Vec<u32>>,
    mut step: impl FnMut(usize, &StepPlan, &[Vec<f32>]) -> Result<Option<String>, String>,
) -> Result<Option<String>, String> {
    let blocks: Vec<Vec<u32>> = (0..2u32).map(|s| (0..BLOCKS as u32 / 2).map(|b| 2 * b + s).collect()).collect();
    let (spec, weights) = reference;
    let mut caches = [new_cache(spec), new_cache(spec)];
    let params = SamplingParams::default();
    for k in 0..3 {
        let fed: Vec<usize> = tokens.iter().map(|t| if k == 0 { 0 } else { t.len() - 1 }).collect();
        let mut want = Vec::new();
        for (s, t) in tokens.iter().enumerate() {
            let l = forward(spec, weights, &t[fed[s]..], &mut caches[s], None, None).map_err(|e| format!("reference step {k} seq {s}: {e}"))?;
            want.push(l.row(l.nrows() - 1).to_vec());
        }
        let mut plan = StepPlan::default();
        for (s, t) in tokens.iter().enumerate() {
            let samples = vec![SampleSpec { params: &params, counter: k as u64, counts: &[], want_logits: true, allowed: None }];
            plan.seqs.push(SeqStep { tokens: &t[fed[s]..], pos0: fed[s], blocks: &blocks[s], local_blocks: &[], samples });
        }
        if let Some(why) = step(k, &plan, &want)? {
            return Ok(Some(why));
        }
        for (t, w) in tokens.iter_mut().zip(&want) {
            t.push(reference::ops::argmax::argmax(w));
        }
    }
    Ok(None)
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for fixture in FIXTURES {
        for gguf in [false, true] {
            v.push(Box::new(ArchModelCase { fixture, gguf, tweak: Tweak::None }));
            v.push(Box::new(ArchRunnerCase { fixture, gguf, tweak: Tweak::None }));
        }
    }
    // FP8 checkpoints (`make_fp8.py`), HF directories only: their linear weights kept FP8 on
    // the device (`qformat::fp8`: the decode gemv, dequant + GEMM for the 9-row prefill).
    for fixture in FP8_FIXTURES {
        v.push(Box::new(ArchModelCase { fixture, gguf: false, tweak: Tweak::None }));
        v.push(Box::new(ArchRunnerCase { fixture, gguf: false, tweak: Tweak::None }));
    }
    for (fixture, tweak) in [("phi3", Tweak::PlainRope), ("llama3", Tweak::PlainRope), ("qwen2", Tweak::Windows)] {
        for gguf in [false, true] {
            v.push(Box::new(ArchModelCase { fixture, gguf, tweak }));
            v.push(Box::new(ArchRunnerCase { fixture, gguf, tweak }));
        }
    }
    // Qwen2 has q|k|v biases: the query scale folds into bq too.
    for tweak in [Tweak::QueryScale, Tweak::Rms1p] {
        v.push(Box::new(ArchModelCase { fixture: "qwen2", gguf: false, tweak }));
    }
    v
}
