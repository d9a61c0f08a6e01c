//! Tensor parallelism on the GPU (`optimized::parallel`): every tiny dense architecture's
//! checkpoint (`reference/tests/fixtures/tiny/`, as the `arch` cases load them) sharded over
//! N ranks of a `TpRunner` — each rank a `GpuRunner` holding its slices, the collectives
//! host-staged (`comm=host`, every backend: the ranks share one device) or NCCL (`comm=nccl`:
//! CUDA with N GPUs visible, rank r on device r; a skip naming what is missing elsewhere) —
//! against one `GpuRunner` of the whole model on the same backend and against the reference
//! run of each sequence alone: a ragged batch of two prompts of different lengths prefilled
//! together, then two decode steps of both, every drawing row's logits compared. A mixture of
//! experts (Qwen3-MoE) runs under both of the plan's splits (`moe=experts`: E/N whole experts a
//! rank; `moe=per-expert`: every expert's rows split N ways). A model whose heads do not split
//! into N ranks is a skip carrying the reason.
//!
//! The `decode` cases run the steps a served sequence runs: greedy draws with no logits asked
//! for, each step saying the next continues it — the steps the ranks record as decode graphs and
//! launch ahead (CUDA), or run eagerly with the ids and logits on the device (wgpu). Every
//! sequence goes on with the sharded runner's token, which must be the greedy pick of the one
//! runner's logits for the same step (up to [`MARGIN`]); on CUDA over NCCL the ranks must have
//! replayed graphs (a refused or missing recording fails, naming why); host-staged ranks run
//! eagerly (their copies cannot be captured). The `decode` cases load every rank on the case's
//! thread and hand the models to the rank threads (`TpRunner::from_models`, as the CLI does);
//! the others load each rank on its own thread (`TpRunner::spawn`).

use std::path::PathBuf;
use std::sync::Arc;

use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use optimized::model::{gpu_unsupported, GpuModel};
use optimized::parallel::{load_rank, local_spec, DeviceComm, TpComms, TpRunner};
use optimized::runner::GpuRunner;
use optimized::{Backend, Client};
use reference::arch::model::WeightsRef;
use reference::arch::spec::ModelSpec;
use reference::gguf::GgufFile;
use reference::gpt_oss::weights::{GptOssTensors, InMemory};
use reference::gpt_oss::{GptOssConfig, GptOssWeights};
use reference::loader::SafetensorsDir;
use reference::parallel::{MoeSplit, ShardPlan};
use reference::weights::TensorSource;

use super::arch::{check, fixture, ids, ragged_prompts, ragged_steps, Tweak};
use crate::{Case, Dtype, Metrics, Op, Outcome};

mod failures;
use failures::{BuildFailureCase, MidStepFailureCase};

/// The fixtures with the tweak their `arch` cases run on the GPU (plain RoPE where only the
/// RoPE is missing there).
const FIXTURES: [(&str, Tweak); 8] = [
    ("llama3", Tweak::PlainRope),
    ("mistral_hd", Tweak::None),
    ("qwen2", Tweak::None),
    ("qwen3", Tweak::None),
    ("gemma3", Tweak::None),
    ("phi3", Tweak::PlainRope),
    ("qwen3_yarn", Tweak::None),
    ("qwen3_moe", Tweak::None),
];
/// Tiny GGUF fixtures in ggml blocks (directory, file): each rank keeps its rows of q / k / v /
/// gate / up as stored, and its columns of o / down where they are whole blocks (here they
/// are not — 128 of a 256-value k-quant block —, so those load as values).
const GGUF_FIXTURES: [(&str, &str); 1] = [("qwen3_k", "model.Q4_K_M.gguf")];
/// The fixtures with a mixture of experts: their cases run once per [`MoeSplit`].
const MOE_FIXTURES: [&str; 1] = ["qwen3_moe"];
/// The tiny synthetic GPT-OSS models (MXFP4 experts: split by expert only on the GPU, a
/// per-expert plan a skip naming why).
const GPT_OSS: [&str; 2] = ["tiny-gpt-oss", "tiny-gpt-oss-wide"];
/// GPT-OSS checkpoints whose experts upload as stored: safetensors blocks and scales, ggml blocks.
const GPT_OSS_FILES: [&str; 2] = ["tiny-gpt-oss-a", "tiny-gpt-oss-b.gguf"];
/// Positions per block of the pools, and blocks.
const BS: usize = 4;
const BLOCKS: usize = 16;
/// Decode steps of the `decode` cases (after the prefill): blocks of [`BS`] are crossed.
const DECODE_STEPS: usize = 9;
/// The sharded runner's token may trail the one runner's best logit by this much, relative
/// to that logit's size (sums in another order: a few f32 ulps through the layers).
const MARGIN: f32 = 1e-4;

/// How the ranks exchange partial sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comm {
    Host,
    Nccl,
}

impl Comm {
    fn comms(self) -> TpComms {
        match self {
            Comm::Host => TpComms::Host,
            Comm::Nccl => TpComms::Nccl,
        }
    }
    /// Its name in a case's name.
    fn name(self) -> &'static str {
        match self {
            Comm::Host => "host",
            Comm::Nccl => "nccl",
        }
    }
}

/// What a case's model is read from, shared with the rank threads.
#[derive(Clone)]
enum Files {
    /// A tiny HF fixture's directory.
    Dir(PathBuf),
    /// A tiny GGUF fixture (ggml blocks kept as stored).
    Gguf(PathBuf),
    /// A tiny synthetic GPT-OSS (MXFP4 experts), built in memory.
    GptOss(Arc<(GptOssConfig, GptOssWeights)>),
    /// A tiny GPT-OSS file (an HF directory or a GGUF): its MXFP4 experts as stored.
    GptOssFile(PathBuf, Arc<GptOssConfig>),
}

impl Files {
    /// `spec`'s model in f32 on `c`, launching with `kernels`: whole (`rank` `None`), or rank r
    /// of `plan` over `comm`.
    fn load(
        &self,
        c: Client,
        spec: &ModelSpec,
        kernels: &optimized::KernelConfig,
        rank: Option<(&ShardPlan, usize, Arc<dyn DeviceComm>)>,
    ) -> Result<GpuModel, optimized::Error> {
        let (mut dir, mut held, mut gguf);
        let mut tensors;
        let src: &mut dyn TensorSource = match self {
            Files::Dir(d) => {
                dir = SafetensorsDir::open(d)?;
                &mut dir
            }
            Files::GptOss(m) => {
                held = InMemory(&m.1);
                tensors = GptOssTensors { src: &mut held, cfg: &m.0 };
                &mut tensors
            }
            Files::Gguf(p) => {
                gguf = GgufFile::open(p)?;
                &mut gguf
            }
            Files::GptOssFile(p, cfg) if p.is_dir() => {
                dir = SafetensorsDir::open(p)?;
                tensors = GptOssTensors { src: &mut dir, cfg };
                &mut tensors
            }
            Files::GptOssFile(p, cfg) => {
                gguf = GgufFile::open(p)?;
                tensors = GptOssTensors { src: &mut gguf, cfg };
                &mut tensors
            }
        };
        match rank {
            None => GpuModel::load_observed(c.clone(), Backend::of(&c), src, spec, optimized::Dtype::F32, kernels, &mut |_, _| {}),
            Some((plan, r, comm)) => load_rank(c, src, spec, plan, r, comm, optimized::Dtype::F32, kernels),
        }
    }
}

/// Rank `r`'s model of `spec` as `plan` cuts it, loaded from `files` over `comm`: on GPU r
/// (`nccl`) or on `base`'s device.
fn rank_model(
    base: &Client,
    nccl: bool,
    files: &Files,
    spec: &ModelSpec,
    plan: &ShardPlan,
    r: usize,
    comm: Arc<dyn DeviceComm>,
) -> Result<GpuModel, optimized::Error> {
    let c = if nccl { optimized::client_on(Backend::Cuda, r)? } else { base.clone() };
    files.load(c, spec, base.kernels(), Some((plan, r, comm)))
}

/// A case's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpModel {
    /// A tiny HF fixture, with the tweak its `arch` cases run on the GPU.
    Fixture(&'static str, Tweak),
    /// A tiny synthetic GPT-OSS by name (`reference::gpt_oss::synthetic::tiny_configs`, seed 0).
    GptOss(&'static str),
    /// A tiny GPT-OSS checkpoint of `reference/tests/fixtures/gpt_oss/` (transformers' HF
    /// directory, or its GGUF conversion) by name: the stored MXFP4 experts' path.
    GptOssFile(&'static str),
    /// A tiny fixture's GGUF file in ggml blocks (directory, file name).
    Gguf(&'static str, &'static str),
}

/// A case's model opened: its spec, the reference's weights, the ids its prompts are cut from,
/// and its files.
type Opened = (ModelSpec, Box<dyn WeightsRef>, Vec<u32>, Files);

impl TpModel {
    fn open(self) -> Result<Opened, String> {
        match self {
            TpModel::Fixture(name, tweak) => {
                let dir = fixture(name);
                let mut m = reference::arch::load(&dir).map_err(|e| e.to_string())?;
                tweak.apply(&mut m.spec);
                Ok((m.spec, Box::new(m.weights), ids(name)?, Files::Dir(dir)))
            }
            TpModel::Gguf(dir, file) => {
                let path = fixture(dir).join(file);
                let m = reference::arch::load(&path).map_err(|e| e.to_string())?;
                Ok((m.spec, Box::new(m.weights), ids(dir)?, Files::Gguf(path)))
            }
            TpModel::GptOss(name) => {
                let (cfg, w) = super::gpt_oss::load(super::gpt_oss::Weights::Synthetic(name))?;
                let spec = reference::arch::gpt_oss::from_config(&cfg);
                // Ids spread over the vocabulary, as a fixture's prompts are.
                let ids = (0..16).map(|i| ((i * 37 + 11) % cfg.vocab) as u32).collect();
                Ok((spec, Box::new(w.clone()), ids, Files::GptOss(Arc::new((cfg, w)))))
            }
            TpModel::GptOssFile(name) => {
                let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/fixtures/gpt_oss").join(name);
                let m = reference::gpt_oss::loader::load(&path).map_err(|e| e.to_string())?;
                let spec = reference::arch::gpt_oss::from_config(&m.config);
                let ids = (0..16).map(|i| ((i * 37 + 11) % m.config.vocab) as u32).collect();
                Ok((spec, Box::new(m.weights), ids, Files::GptOssFile(path, Arc::new(m.config))))
            }
        }
    }
}

/// The sharded runner vs one runner and the reference.
#[derive(Debug, Clone)]
pub struct TpCase {
    pub model: TpModel,
    pub world: usize,
    pub comm: Comm,
    /// Greedy decode steps without logits (the graphed path) instead of the logits walk.
    pub decode: bool,
    /// How a mixture of experts is split (`None`: a dense model).
    pub moe: Option<MoeSplit>,
}

/// Why this machine cannot run `world` NCCL ranks (`None`: it can).
fn nccl_missing(backend: Backend, world: usize) -> Option<String> {
    if backend != Backend::Cuda {
        return Some(format!("NCCL ranks run on CUDA (this is {backend})"));
    }
    if let Err(e) = optimized::nccl::available() {
        return Some(e.to_string());
    }
    let have = optimized::nccl::device_count();
    (have < world).then(|| format!("{world} NCCL ranks need {world} GPUs; {have} visible"))
}

impl TpCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let err = |e: optimized::Error| e.to_string();
        let backend = Backend::of(client);
        if self.comm == Comm::Nccl {
            if let Some(why) = nccl_missing(backend, self.world) {
                return Ok(Outcome::Skip(why));
            }
        }
        let (spec, weights, ids, files) = self.model.open()?;
        if let Some(why) = gpu_unsupported(&spec) {
            return Ok(Outcome::Skip(why));
        }
        let plan = match ShardPlan::with_moe(&spec, self.world, self.moe).and_then(|p| local_spec(&spec, &p, 0).map(|_| p)) {
            Ok(p) => p,
            Err(e) => return Ok(Outcome::Skip(e.to_string())),
        };
        let whole = files.load(client.clone(), &spec, client.kernels(), None).map_err(err)?;
        let mut one = GpuRunner::new(whole, BS, BLOCKS).map_err(err)?;
        let (base, nccl, spec2) = (client.clone(), self.comm == Comm::Nccl, spec.clone());
        let comms = self.comm.comms().make(self.world).map_err(err)?;
        let mut tp = if self.decode {
            // The CLI's way: every rank loaded on this thread, then moved to its own (whose
            // launches must still meet the buffers' stream, or its graphs are refused).
            let mut models = Vec::with_capacity(self.world);
            for (r, comm) in comms.into_iter().enumerate() {
                models.push(checked_rank_model(&base, nccl, &files, &spec2, &plan, r, comm).map_err(err)?);
            }
            TpRunner::from_models(models, one.info().clone(), one.kv_layout()).map_err(err)?
        } else {
            // Each rank loaded on its own thread.
            let build = move |r: usize, comm| GpuRunner::new(checked_rank_model(&base, nccl, &files, &spec2, &plan, r, comm)?, BS, BLOCKS);
            TpRunner::spawn(comms, one.info().clone(), one.kv_layout(), build).map_err(err)?
        };

        let tokens = ragged_prompts(&ids);
        if self.decode {
            return decode_walk(&mut tp, &mut one, tokens, backend == Backend::Cuda && self.comm == Comm::Nccl);
        }
        let rows = tokens.iter().map(Vec::len).sum::<usize>();
        // A model in ggml blocks runs the quantized kernels (bf16 activations on the tensor
        // cores for longer steps), the ranks' o / down maybe as values: the quantized bound
        // against one runner too.
        let quantized = matches!(self.model, TpModel::Gguf(..));
        let tol_ref = super::model_tolerance(client, Op::Tp, Dtype::F32, quantized, rows, spec.n_layers());
        let tol_one = match quantized {
            true => tol_ref,
            false => crate::tolerance(Op::Tp, Dtype::F32).0,
        };
        let mut worst = Metrics::default();
        let failed = ragged_steps((&spec, weights.as_ref()), tokens, |k, plan, want| {
            let got = tp.step(plan).map_err(|e| format!("tp{} step {k}: {e}", self.world))?;
            let base = one.step(plan).map_err(|e| format!("one runner step {k}: {e}"))?;
            for (s, ((g, b), w)) in got.iter().zip(&base).zip(want).enumerate() {
                let (Some(Some(gl)), Some(Some(bl))) = (g.logits.first(), b.logits.first()) else {
                    return Ok(Some(format!("step {k} seq {s}: logits not returned")));
                };
                check(&mut worst, gl, w, tol_ref, &format!("step {k} seq {s} logits vs the reference"))?;
                check(&mut worst, gl, bl, tol_one, &format!("step {k} seq {s} logits vs one runner"))?;
            }
            Ok(None)
        })?;
        if let Some(why) = failed {
            return Ok(Outcome::Fail(why));
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for TpCase {
    fn op(&self) -> Op {
        Op::Tp
    }
    fn name(&self) -> String {
        let comm = self.comm.name();
        let decode = if self.decode { ",decode" } else { "" };
        let moe = match self.moe {
            None => "",
            Some(MoeSplit::Experts) => ",moe=experts",
            Some(MoeSplit::PerExpert) => ",moe=per-expert",
        };
        match self.model {
            TpModel::Fixture(name, tweak) => format!("tp({name},hf,tp={},comm={comm}{moe}{}{decode})", self.world, tweak.mark()),
            TpModel::GptOss(name) => format!("tp({name},synthetic,tp={},comm={comm}{moe}{decode})", self.world),
            TpModel::GptOssFile(name) => format!("tp({name},file,tp={},comm={comm}{moe}{decode})", self.world),
            TpModel::Gguf(dir, file) => format!("tp({dir},{file},tp={},comm={comm}{moe}{decode})", self.world),
        }
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// [`rank_model`], checked: its experts as the plan gives them ([`holds_its_experts`]), and a
/// GGUF's rows as the file's blocks ([`keeps_its_blocks`]).
fn checked_rank_model(
    base: &Client,
    nccl: bool,
    files: &Files,
    spec: &ModelSpec,
    plan: &ShardPlan,
    r: usize,
    comm: Arc<dyn DeviceComm>,
) -> Result<GpuModel, optimized::Error> {
    let m = rank_model(base, nccl, files, spec, plan, r, comm)?;
    holds_its_experts(&m, plan, r)?;
    if matches!(files, Files::Gguf(_)) {
        keeps_its_blocks(&m, r)?;
    }
    Ok(m)
}

/// Rank `r` of a file in ggml blocks keeps its q|k|v and gate|up rows as stored (a cut by rows
/// never needs a block's values); an error naming the weight otherwise.
fn keeps_its_blocks(m: &GpuModel, r: usize) -> Result<(), optimized::Error> {
    use optimized::kernels::qmatmul::Weight;
    use optimized::model::GpuFfn;
    let quantized = |w: &Weight| matches!(w, Weight::Quant(_) | Weight::Parts(_));
    for (l, layer) in m.layers.iter().enumerate() {
        let gate_up = match &layer.ffn {
            GpuFfn::Dense { gate_up, .. } => Some(gate_up),
            _ => None,
        };
        if !quantized(&layer.wqkv) || gate_up.is_some_and(|w| !quantized(w)) {
            return Err(optimized::Error::Shape(format!("rank {r}: layer {l}'s q|k|v or gate|up rows loaded as values, not as the file's blocks")));
        }
    }
    Ok(())
}

/// An error unless every MoE layer of rank `r`'s model holds what the plan gives it: E/N whole
/// experts (expert parallelism: no rank uploads them all), or F/N rows of every expert.
fn holds_its_experts(m: &GpuModel, plan: &ShardPlan, r: usize) -> Result<(), optimized::Error> {
    use optimized::model::GpuFfn;
    use reference::arch::spec::FfnSpec;
    use reference::parallel::ExpertCut;
    let cut = plan.rank(r).map_err(|e| optimized::Error::Shape(e.to_string()))?.experts.clone();
    for (l, layer) in m.layers.iter().enumerate() {
        let GpuFfn::Moe(w) = &layer.ffn else { continue };
        let (e, f2) = (w.gate_up.n_experts(), w.gate_up.out());
        // The local spec's expert width: the whole one, or the rank's rows padded with zero rows
        // (`optimized::parallel::EXPERT_ROWS`).
        let ok = match (&cut, m.spec.layers.get(l).map(|s| &s.ffn)) {
            (Some(ExpertCut::Whole(x)), Some(FfnSpec::Moe { expert_ffn, .. })) => w.held == *x && e == x.len() && f2 == 2 * expert_ffn,
            (Some(ExpertCut::Rows { rows, .. }), Some(FfnSpec::Moe { n_experts, expert_ffn, .. })) => {
                e == *n_experts && f2 == 2 * expert_ffn && *expert_ffn == rows.len().next_multiple_of(optimized::parallel::EXPERT_ROWS)
            }
            _ => false,
        };
        if !ok {
            return Err(optimized::Error::Shape(format!(
                "rank {r} layer {l}: experts {:?} held ({e} uploaded, gate|up {f2} rows), the plan's cut {cut:?}",
                w.held
            )));
        }
    }
    Ok(())
}

/// `tokens` (two prompts) prefilled by `tp` and `one`, then [`DECODE_STEPS`] greedy steps of
/// both sequences: `tp`'s without logits, each continuing the last (`StepPlan::continues`),
/// `one`'s the same step with the logits its token is checked against. Both go on with `tp`'s
/// tokens.
fn decode_walk(tp: &mut TpRunner, one: &mut GpuRunner, mut tokens: Vec<Vec<u32>>, graphs_required: bool) -> Result<Outcome, String> {
    let blocks: Vec<Vec<u32>> = (0..2u32).map(|s| (0..BLOCKS as u32 / 2).map(|b| 2 * b + s).collect()).collect();
    let params = SamplingParams::default();
    let mut worst = Metrics::default();
    for k in 0..=DECODE_STEPS {
        let plan = |want_logits: bool| {
            let mut plan = StepPlan { continues: !want_logits && k < DECODE_STEPS, ..StepPlan::default() };
            for (t, b) in tokens.iter().zip(&blocks) {
                let fed = if k == 0 { 0 } else { t.len() - 1 };
                // The draw counter follows the position, as a sequence's does.
                let samples = vec![SampleSpec { params: &params, counter: (t.len() - 1) as u64, counts: &[], want_logits, allowed: None }];
                plan.seqs.push(SeqStep { tokens: &t[fed..], pos0: fed, blocks: b, local_blocks: &[], samples });
            }
            plan
        };
        let got = tp.step(&plan(false)).map_err(|e| format!("tp step {k}: {e}"))?;
        let base = one.step(&plan(true)).map_err(|e| format!("one runner step {k}: {e}"))?;
        let mut drawn = vec![];
        for (s, (g, b)) in got.iter().zip(&base).enumerate() {
            let (Some(&id), Some(Some(logits))) = (g.tokens.first(), b.logits.first()) else {
                return Ok(Outcome::Fail(format!("step {k} seq {s}: no token or logits returned")));
            };
            let best = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let Some(&mine) = logits.get(id as usize) else {
                return Ok(Outcome::Fail(format!("step {k} seq {s}: token {id} outside the vocabulary {}", logits.len())));
            };
            let gap = best - mine;
            if gap.is_nan() || gap > MARGIN * best.abs().max(1.0) {
                return Ok(Outcome::Fail(format!("step {k} seq {s}: the sharded runner drew {id} (logit {mine}), the one runner's best is {best}")));
            }
            worst.max_abs = worst.max_abs.max(f64::from(gap));
            worst.n += 1;
            drawn.push(id);
        }
        for (t, id) in tokens.iter_mut().zip(drawn) {
            t.push(id);
        }
    }
    if graphs_required && tp.steps_ahead().is_none() {
        return Ok(Outcome::Fail(format!("no decode step ran as a graph on the ranks: {}", tp.status().unwrap_or_default())));
    }
    Ok(Outcome::Pass(worst))
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let models = FIXTURES
        .iter()
        .map(|&(f, t)| TpModel::Fixture(f, t))
        .chain(GPT_OSS.map(TpModel::GptOss))
        .chain(GPT_OSS_FILES.map(TpModel::GptOssFile))
        .chain(GGUF_FIXTURES.map(|(d, f)| TpModel::Gguf(d, f)));
    for model in models {
        let splits = match model {
            TpModel::Fixture(f, _) if !MOE_FIXTURES.contains(&f) => vec![None],
            TpModel::Gguf(..) => vec![None],
            _ => vec![Some(MoeSplit::Experts), Some(MoeSplit::PerExpert)],
        };
        for world in [2, 4] {
            for comm in [Comm::Host, Comm::Nccl] {
                for &moe in &splits {
                    for decode in [false, true] {
                        v.push(Box::new(TpCase { model, world, comm, decode, moe }));
                    }
                }
            }
        }
    }
    v.push(Box::new(BuildFailureCase));
    for comm in [Comm::Host, Comm::Nccl] {
        v.push(Box::new(MidStepFailureCase { comm }));
    }
    v
}
