//! GPT-OSS on the GPU (`optimized::runner::GpuRunner` over `GpuModel::load_gpt_oss`) vs the CPU reference runner
//! (`RefRunner<GptOssModel>`) on the same dtype-rounded weights and the SAME step plans:
//! ragged batches of prefill chunks (continuing cached prefixes) and one-token decodes, N ≤ 8
//! rows (MoE by the grouped gemvs) and N > 8 (sort + grouped GEMMs, one step of 150 tokens:
//! several row tiles per expert), sequences longer than the sliding windows (4–8), sinks as
//! trained and made dominant (+8). Weights: the synthetic tiny configs and the HF fixtures
//! made with transformers (`reference/tests/fixtures/gpt_oss/`, embedded in the binary so the
//! GPU machine runs them too). Every drawing position's logits are compared under the model
//! tolerance; greedy draws must agree except where the reference's top-2 margin is below
//! [`super::GREEDY_MARGIN`]. A routing near-tie ends a case: where a drawing position's router
//! logits had their K-th and (K+1)-th largest closer than [`route_margin_bound`] in the
//! reference (`GptOssModel::take_route_margins`), the two sides may legitimately choose
//! different experts, so that step and the ones after it (whose attention reads the token's
//! K/V) are not compared. [`GptOssEngineCase`]: the engine (scheduler, preemption, prefix cache)
//! on both runners gives the same tokens. Also YaRN RoPE through rope v4 and flash attention
//! at gpt-oss-20b's head shapes (window 128, sinks).

use engine::cpu_runner::RefRunner;
use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use ndarray::Array3;
use optimized::kernels::attention::{DecodeVersion, PrefillVersion, ScoreStep};
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::moe::MoePath;
use optimized::model::GpuModel;
use optimized::runner::GpuRunner;
use optimized::{Client, DeviceTensor};
use reference::gpt_oss::ops::rope::{concentration, inv_freq, rope_yarn};
use reference::gpt_oss::weights::InMemory;
use reference::gpt_oss::{synthetic, GptOssConfig, GptOssModel, GptOssWeights, Yarn};

use super::attention::flash::{FlashCase, Phase};
use super::embedding::judge;
use super::outcome;
use crate::{rand_vec, Case, Dtype, Metrics, Op, Outcome};

/// The route margin below which a drawing position's routing may flip between the two sides:
/// f32 models differ by accumulation order only (~1e-6 of a logit of O(1)); 16-bit models
/// round every matmul input to 16 bits and (with f16 KV pools) K and V, which moves a router
/// logit by up to ~1e-3 (seen: a flip at a margin of 9.0e-4, hf-fixture-a, f16, H200).
fn route_margin_bound(dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => 1e-4,
        _ => 1e-2,
    }
}

/// Positions per block: small, so chunks cross block boundaries.
const BS: usize = 4;
const BLOCKS: usize = 96;
/// Added to every sink logit in the `sinks dominant` cases.
const SINK_BOOST: f32 = 8.0;

/// Where a case's weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// `reference::gpt_oss::synthetic::tiny_configs` by name, seed 0.
    Synthetic(&'static str),
    /// An HF fixture written by transformers' GptOssForCausalLM (`a` or `b`).
    Fixture(&'static str),
}

const FIXTURE_A: [&[u8]; 2] = [
    include_bytes!("../../../reference/tests/fixtures/gpt_oss/tiny-gpt-oss-a/config.json"),
    include_bytes!("../../../reference/tests/fixtures/gpt_oss/tiny-gpt-oss-a/model.safetensors"),
];
const FIXTURE_B: [&[u8]; 2] = [
    include_bytes!("../../../reference/tests/fixtures/gpt_oss/tiny-gpt-oss-b/config.json"),
    include_bytes!("../../../reference/tests/fixtures/gpt_oss/tiny-gpt-oss-b/model.safetensors"),
];

impl Weights {
    /// The weights' part of a case name.
    pub(super) fn label(self) -> String {
        match self {
            Weights::Synthetic(n) => n.to_string(),
            Weights::Fixture(x) => format!("hf-fixture-{x}"),
        }
    }
}

/// The files of HF fixture `which` (`a` or `b`): `(name, bytes)`.
pub(super) fn fixture_files(which: &str) -> [(&'static str, &'static [u8]); 2] {
    let [config, st] = if which == "a" { FIXTURE_A } else { FIXTURE_B };
    [("config.json", config), ("model.safetensors", st)]
}

/// Config and f32 weights of `w` (a fixture goes through the HF loader from a temp directory).
pub(super) fn load(w: Weights) -> Result<(GptOssConfig, GptOssWeights), String> {
    match w {
        Weights::Synthetic(name) => {
            let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).ok_or(format!("no tiny config {name}"))?;
            let w = synthetic::weights(&cfg, 0).map_err(|e| e.to_string())?;
            Ok((cfg, w))
        }
        Weights::Fixture(which) => {
            let dir = std::env::temp_dir().join(format!("tandem-conformance-{}-gpt-oss-{which}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for (name, bytes) in fixture_files(which) {
                std::fs::write(dir.join(name), bytes).map_err(|e| format!("{}: {e}", dir.join(name).display()))?;
            }
            let m = reference::gpt_oss::loader::load_hf_dir(&dir).map_err(|e| e.to_string());
            let _ = std::fs::remove_dir_all(&dir);
            let m = m?;
            Ok((m.config, m.weights))
        }
    }
}

/// The reference and GPU runners of `w` rounded to `dtype` (sinks raised by [`SINK_BOOST`]
/// with `boost`), with pools of `blocks` blocks.
pub(super) fn runners(
    client: &Client,
    w: Weights,
    dtype: Dtype,
    boost: bool,
    blocks: usize,
    moe: MoePath,
) -> Result<(RefRunner<GptOssModel>, GpuRunner, GptOssConfig), String> {
    let (cfg, w) = load(w)?;
    let dd = dtype.device();
    let mut w = w.map_matrices(|x| dd.round(&[x])[0]);
    if boost {
        w.layers.iter_mut().for_each(|l| l.sinks += SINK_BOOST);
    }
    let backend = optimized::Backend::of(client);
    let mut m = GpuModel::load_gpt_oss(client.clone(), backend, &mut InMemory(&w), &cfg, dd, client.kernels()).map_err(|e| e.to_string())?;
    m.moe_path = moe;
    let gpu = GpuRunner::new(m, BS, blocks).map_err(|e| e.to_string())?;
    let reference = RefRunner::new(GptOssModel::new(cfg.clone(), w), BS, blocks).map_err(|e| e.to_string())?;
    Ok((reference, gpu, cfg))
}

/// One sequence's part of a scripted step: `len` tokens from `pos0`, the last `draws` draw.
#[derive(Debug, Clone, Copy)]
struct Part {
    seq: usize,
    pos0: usize,
    len: usize,
    draws: usize,
}

/// Scripted steps by name.
fn scenario(name: &str) -> Vec<Vec<Part>> {
    let p = |seq, pos0, len, draws| Part { seq, pos0, len, draws };
    match name {
        // ≤ 8 rows per step (MoE by the grouped gemvs), decodes and small chunks mixed.
        "small" => vec![
            vec![p(0, 0, 3, 1), p(1, 0, 1, 1), p(2, 0, 2, 0)],
            vec![p(0, 3, 1, 1), p(1, 1, 1, 1), p(2, 2, 4, 1)],
            vec![p(0, 4, 1, 1), p(2, 6, 1, 1), p(1, 2, 1, 1)],
            vec![p(2, 7, 3, 3)],
            vec![p(2, 10, 1, 1), p(0, 5, 1, 1)],
        ],
        // > 8 rows (sort + grouped GEMMs), varlen prefill over several chunks, then decodes.
        "mixed" => vec![
            vec![p(0, 0, 13, 1), p(1, 0, 6, 0), p(2, 0, 1, 1)],
            vec![p(1, 6, 9, 1), p(0, 13, 1, 1), p(2, 1, 1, 1), p(3, 0, 17, 2)],
            vec![p(0, 14, 1, 1), p(1, 15, 1, 1), p(2, 2, 1, 1), p(3, 17, 1, 1)],
            vec![p(3, 18, 3, 3), p(0, 15, 1, 1)],
        ],
        // A 150-token prefill (expert segments past one 64-row tile), a chunk continuing it,
        // then decodes far past every window.
        "long" => {
            let mut v = vec![vec![p(0, 0, 150, 1)], vec![p(0, 150, 20, 1), p(1, 0, 5, 1)]];
            v.extend((0..4).map(|i| vec![p(0, 170 + i, 1, 1), p(1, 5 + i, 1, 1)]));
            v
        }
        _ => vec![],
    }
}

#[derive(Debug, Clone)]
pub struct GptOssCase {
    pub weights: Weights,
    pub dtype: Dtype,
    pub sampled: bool,
    pub scenario: &'static str,
    /// Sinks raised by [`SINK_BOOST`]: they dominate every softmax.
    pub boost: bool,
    pub moe: MoePath,
}

impl GptOssCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        if !self.dtype.device().supported(client) {
            return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
        }
        let steps = scenario(self.scenario);
        let n_seqs = 1 + steps.iter().flatten().map(|p| p.seq).max().unwrap_or(0);
        let (mut reference, mut gpu, cfg) = runners(client, self.weights, self.dtype, self.boost, BLOCKS, self.moe)?;
        let max_rows = steps.iter().map(|st| st.iter().map(|p| p.len).sum::<usize>()).max().unwrap_or(0);
        // A 16-bit model's MoE of many rows runs on the tensor cores (moe gemm v2), which
        // rounds its inputs to the type it multiplies MXFP4 in (bf16 where the device has it,
        // as for any quantized weight) — not to the model's f16.
        let tol = super::model_tolerance(client, Op::GptOss, self.dtype, self.dtype != Dtype::F32, max_rows, cfg.n_layers);
        let len = 1 + steps.iter().flatten().map(|p| p.pos0 + p.len).max().unwrap_or(0);
        let mut tokens: Vec<Vec<u32>> =
            (0..n_seqs).map(|s| (0..len as u32).map(|i| (i * 7919 + 31 * s as u32 + 11) % cfg.vocab as u32).collect()).collect();
        let blocks: Vec<Vec<u32>> = (0..n_seqs).map(|s| (0..BLOCKS / n_seqs).map(|b| (b * n_seqs + s) as u32).collect()).collect();
        let params: Vec<SamplingParams> = (0..n_seqs)
            .map(|s| {
                if self.sampled {
                    SamplingParams { temperature: 0.8, top_k: 30, top_p: 0.95, seed: 40 + s as u64, ..SamplingParams::default() }
                } else {
                    SamplingParams::default()
                }
            })
            .collect();
        let mut worst = Metrics::default();
        for (k, step) in steps.iter().enumerate() {
            let mut plan = StepPlan::default();
            for part in step {
                let samples = (0..part.draws)
                    .map(|j| SampleSpec { params: &params[part.seq], counter: (k * 8 + j) as u64, counts: &[], want_logits: true, allowed: None })
                    .collect();
                plan.seqs.push(SeqStep {
                    tokens: &tokens[part.seq][part.pos0..part.pos0 + part.len],
                    pos0: part.pos0,
                    blocks: &blocks[part.seq],
                    local_blocks: &[],
                    samples,
                });
            }
            let want = reference.step(&plan).map_err(|e| format!("reference step {k}: {e}"))?;
            let got = gpu.step(&plan).map_err(|e| format!("gpu step {k}: {e}"))?;
            // One forward call per part; its drawing positions are its last `draws` tokens.
            let margins = reference.model.take_route_margins();
            let near_tie = step
                .iter()
                .zip(&margins)
                .any(|(part, m)| m[m.len().saturating_sub(part.draws)..].iter().any(|&g| g < route_margin_bound(self.dtype)));
            if near_tie {
                // A case whose first step is a near-tie would compare nothing: not a pass.
                return Ok(if k == 0 {
                    Outcome::Fail(format!("a routing near-tie at a drawing position of step 0: the scenario compares nothing (margins {margins:?})"))
                } else {
                    Outcome::Pass(worst)
                });
            }
            super::check_step(k, &got, &want, tol, !self.sampled, &mut worst)?;
            // The reference's last draw of each part becomes the sequence's next token.
            for (part, w) in step.iter().zip(&want) {
                if let Some(&t) = w.tokens.last() {
                    if let Some(slot) = tokens[part.seq].get_mut(part.pos0 + part.len) {
                        *slot = t;
                    }
                }
            }
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for GptOssCase {
    fn op(&self) -> Op {
        Op::GptOss
    }
    fn name(&self) -> String {
        let w = self.weights.label();
        let moe = if self.moe == MoePath::Auto { String::new() } else { format!(",moe={:?}", self.moe).to_lowercase() };
        format!(
            "gpt_oss({w},{},{}{}{moe},{})",
            self.scenario,
            if self.sampled { "seeded" } else { "greedy" },
            if self.boost { ",sinks+8" } else { "" },
            self.dtype.name()
        )
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// The engine over the GPU runner vs over the reference runner: greedy and seeded requests,
/// prompts of 1 to 40 tokens, a shared prefix, a pool small enough to preempt — each
/// request's tokens must match.
#[derive(Debug, Clone)]
pub struct GptOssEngineCase {
    pub weights: Weights,
    pub blocks: usize,
}

impl GptOssEngineCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let (reference, gpu, cfg) = runners(client, self.weights, Dtype::F32, false, self.blocks, MoePath::Auto)?;
        super::runner::engine_matches_reference(cfg.vocab, Box::new(reference), Box::new(gpu), self.blocks)
    }
}

impl Case for GptOssEngineCase {
    fn op(&self) -> Op {
        Op::GptOss
    }
    fn name(&self) -> String {
        format!("gpt_oss_engine({:?},blocks={}x{BS},f32)", self.weights, self.blocks).to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// GPT-OSS decode graphs vs eager launches on the same runner: the same tokens, greedy and
/// seeded; 12 requests at once, so buckets above 8 rows (the sort and the grouped GEMMs in the
/// graph) run too.
#[derive(Debug, Clone)]
pub struct GptOssGraphCase {
    pub weights: Weights,
    pub sampled: bool,
    /// bf16: steps above 8 rows run moe gemm v2 (tensor cores) inside the graphs.
    pub dtype: Dtype,
}

impl Case for GptOssGraphCase {
    fn op(&self) -> Op {
        Op::GptOss
    }
    fn name(&self) -> String {
        let how = if self.sampled { "seeded" } else { "greedy" };
        format!("gpt_oss_engine({:?},graphs vs eager,{how},{})", self.weights, self.dtype.name()).to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        let body = || -> Result<Outcome, String> {
            let vocab = load(self.weights)?.0.vocab;
            if !self.dtype.device().supported(client) {
                return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
            }
            super::runner::graphs_match_eager(vocab, self.sampled, 16, 12, &mut |on| {
                let (_, mut g, _) = runners(client, self.weights, self.dtype, false, 160, MoePath::Auto)?;
                g.set_graphs(on);
                Ok(Box::new(g))
            })
        };
        body().unwrap_or_else(Outcome::Fail)
    }
}

/// The runner launches with the kernel choices it is built with, not the ones its caller's
/// thread has installed: GPT-OSS `generate` / `serve` / `bench` hand it `--kernels` /
/// `TANDEM_KERNELS` (it used to read the thread's and so ignored them).
pub struct GptOssKernelsCase;

impl Case for GptOssKernelsCase {
    fn op(&self) -> Op {
        Op::GptOss
    }
    fn name(&self) -> String {
        "gpt_oss_runner(kernels given: graphs=off, the caller's graphs=on)".into()
    }
    fn run(&self, client: &Client) -> Outcome {
        let body = || -> Result<Outcome, String> {
            let (cfg, w) = load(Weights::Synthetic("tiny-gpt-oss"))?;
            let backend = optimized::Backend::of(client);
            // The model is loaded on a client whose choices say graphs=on; the runner is given
            // graphs=off and must run with that.
            let callers = optimized::KernelConfig { graphs: true, ..*client.kernels() };
            let given = optimized::KernelConfig { graphs: false, ..callers };
            let m = GpuModel::load_gpt_oss(client.with_kernels(callers), backend, &mut InMemory(&w), &cfg, Dtype::F32.device(), &given)
                .map_err(|e| e.to_string())?;
            let mut g = GpuRunner::new(m, BS, 16).map_err(|e| e.to_string())?;
            g.prepare_decode(1, 8, false).map_err(|e| e.to_string())?;
            let status = g.status();
            match status {
                Some(s) if s.contains("decode graphs off") => Ok(Outcome::Pass(Metrics { max_abs: 0.0, nmse: 0.0, n: 1 })),
                other => Ok(Outcome::Fail(format!("built with graphs=off, the runner says {other:?}"))),
            }
        };
        body().unwrap_or_else(Outcome::Fail)
    }
}

/// YaRN RoPE through rope v4 (`qkv_rope_ragged` over a `RopeTable::from_freqs` table): rotated
/// q, rotated k and copied v in their pool rows vs `rope_yarn` (`Op::Rope`).
#[derive(Debug, Clone)]
pub struct YarnRopeCase {
    pub t: usize,
    pub pos0: usize,
    pub yarn: Option<Yarn>,
    pub d: usize,
}

impl Case for YarnRopeCase {
    fn op(&self) -> Op {
        Op::Rope
    }
    fn name(&self) -> String {
        let y = self.yarn.as_ref().map_or("none".to_string(), |y| format!("factor={}", y.factor));
        format!("rope_yarn(T={},pos0={},d={},yarn {y},ragged)", self.t, self.pos0, self.d)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, d, h, kv) = (self.t, self.d, 4usize, 2usize);
        let theta = 150_000.0;
        let omega = inv_freq(d, theta, self.yarn.as_ref());
        let c = concentration(self.yarn.as_ref());
        let qkv = rand_vec(t * (h + 2 * kv) * d, 61);
        let split = |off: usize, n: usize| -> Array3<f32> {
            let v: Vec<f32> = qkv.chunks(d * (h + 2 * kv)).flat_map(|row| row[off * d..(off + n) * d].iter().copied()).collect();
            Array3::from_shape_vec((t, n, d), v).unwrap_or_else(|_| Array3::zeros((t, n, d)))
        };
        let (mut q, mut k, v) = (split(0, h), split(h, kv), split(h + kv, kv));
        rope_yarn(q.view_mut(), self.pos0, &omega, c);
        rope_yarn(k.view_mut(), self.pos0, &omega, c);
        // Token i's k / v go to pool row (3i + 1) mod rows: not the positions' order.
        let rows = 3 * t + 2;
        let slot = |i: usize| (3 * i + 1) % rows;
        outcome((|| {
            let table = optimized::kernels::rope::RopeTable::from_freqs(client, self.pos0 + t, &omega, c, theta as f32)?;
            let kp = DeviceTensor::from_f32(client, &vec![f32::NAN; rows * kv * d], &[rows, kv, d])?;
            let vp = DeviceTensor::from_f32(client, &vec![f32::NAN; rows * kv * d], &[rows, kv, d])?;
            let pos: Vec<u32> = (0..t).map(|i| (self.pos0 + i) as u32).collect();
            let slots: Vec<u32> = (0..t).map(|i| slot(i) as u32).collect();
            let qkv_d = DeviceTensor::from_f32(client, &qkv, &[t, (h + 2 * kv) * d])?;
            let qd = optimized::kernels::rope::qkv_rope_ragged(
                client,
                &qkv_d,
                h,
                kv,
                &table,
                reference::RopeLayout::HalfSplit,
                &kp,
                &vp,
                &DeviceTensor::from_u32(client, &pos, &[t])?,
                &DeviceTensor::from_u32(client, &slots, &[t])?,
            )?;
            let (kh, vh) = (kp.to_f32(client)?, vp.to_f32(client)?);
            let row = |pool: &[f32], i: usize| pool[slot(i) * kv * d..(slot(i) + 1) * kv * d].to_vec();
            let mut got: Vec<f32> = qd.to_f32(client)?;
            let mut want: Vec<f32> = q.iter().copied().collect();
            for i in 0..t {
                got.extend(row(&kh, i));
                got.extend(row(&vh, i));
                want.extend(k.slice(ndarray::s![i, .., ..]).iter());
                want.extend(v.slice(ndarray::s![i, .., ..]).iter());
            }
            Ok(judge(&got, &want, Op::Rope, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let yarn = Yarn { factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, original_max_pos: 4096, truncate: false };
    for (t, pos0, y, d) in [(1, 0, Some(yarn.clone()), 64), (7, 4090, Some(yarn.clone()), 64), (5, 100_000, Some(yarn), 64), (3, 17, None, 16)] {
        v.push(Box::new(YarnRopeCase { t, pos0, yarn: y, d }));
    }
    // gpt-oss-20b's attention: 64 query heads on 8 KV heads of 64, window 128 on even layers
    // (sequences past it), sinks.
    let mut flash = |phase, lens: &[usize], t, window| {
        let versions: &[DecodeVersion] = if phase == Phase::Decode { &[DecodeVersion::V2, DecodeVersion::V3] } else { &[DecodeVersion::V3] };
        let prefills: &[PrefillVersion] =
            if phase == Phase::Prefill { &[PrefillVersion::V2, PrefillVersion::Tc(TcMode::Tensor)] } else { &[PrefillVersion::V2] };
        for (&version, &prefill) in versions.iter().flat_map(|v| prefills.iter().map(move |p| (v, p))) {
            // f16 pools: what a 16-bit GPT-OSS runs with.
            v.push(Box::new(FlashCase {
                phase,
                h: 64,
                kv: 8,
                d: 64,
                lens: lens.to_vec(),
                t,
                block_size: 16,
                window,
                sinks: true,
                shuffled: true,
                version,
                score: ScoreStep::PerUnit,
                prefill,
                kv_dtype: optimized::Dtype::F16,
                out_dtype: optimized::Dtype::F32,
            }) as Box<dyn Case>);
        }
    };
    flash(Phase::Decode, &[300, 129, 5], 1, Some(128));
    flash(Phase::Decode, &[300, 129, 5], 1, None);
    flash(Phase::Prefill, &[300], 44, Some(128));
    flash(Phase::Prefill, &[140], 140, Some(128));
    use Weights::{Fixture, Synthetic};
    let mut add = |weights, dtype, sampled, scenario, boost, moe| {
        v.push(Box::new(GptOssCase { weights, dtype, sampled, scenario, boost, moe }) as Box<dyn Case>)
    };
    for name in ["tiny-gpt-oss", "tiny-gpt-oss-wide", "tiny-gpt-oss-tied"] {
        for scenario in ["small", "mixed"] {
            add(Synthetic(name), Dtype::F32, false, scenario, false, MoePath::Auto);
        }
    }
    for w in [Fixture("a"), Fixture("b")] {
        for scenario in ["small", "mixed", "long"] {
            add(w, Dtype::F32, false, scenario, false, MoePath::Auto);
        }
    }
    add(Synthetic("tiny-gpt-oss"), Dtype::F32, false, "long", false, MoePath::Auto);
    add(Synthetic("tiny-gpt-oss-wide"), Dtype::F32, false, "mixed", true, MoePath::Auto);
    add(Fixture("b"), Dtype::F32, false, "long", true, MoePath::Auto);
    // Each MoE path on every step (the gemvs on 150 rows, the GEMMs on one).
    add(Synthetic("tiny-gpt-oss-wide"), Dtype::F32, false, "mixed", false, MoePath::Gemv);
    add(Synthetic("tiny-gpt-oss-wide"), Dtype::F32, false, "small", false, MoePath::Gemm);
    add(Synthetic("tiny-gpt-oss-wide"), Dtype::F32, true, "mixed", false, MoePath::Auto);
    for dtype in [Dtype::F16, Dtype::BF16] {
        add(Synthetic("tiny-gpt-oss-wide"), dtype, false, "mixed", false, MoePath::Auto);
        add(Fixture("a"), dtype, false, "long", false, MoePath::Auto);
    }
    v.push(Box::new(GptOssEngineCase { weights: Synthetic("tiny-gpt-oss"), blocks: 96 }));
    v.push(Box::new(GptOssEngineCase { weights: Fixture("b"), blocks: 20 }));
    for (sampled, dtype) in [(false, Dtype::F32), (true, Dtype::F32), (false, Dtype::BF16)] {
        v.push(Box::new(GptOssGraphCase { weights: Synthetic("tiny-gpt-oss"), sampled, dtype }));
    }
    v.push(Box::new(GptOssKernelsCase));
    v
}
