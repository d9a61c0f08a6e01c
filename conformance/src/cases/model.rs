//! Whole-model conformance: the GPU model vs the reference on the same (dtype-rounded)
//! weights — every block's hidden states, the logits of a prefill, then decode steps through
//! the KV cache, and greedy agreement where the reference's top-1 margin allows. The GPU side
//! is one sequence on the batched runner (`optimized::runner::single`): the path `generate`
//! and `serve` run. [`GraphCase`]: greedy decoding through captured graphs gives the tokens
//! eager steps give.

use ndarray::Axis;
use optimized::model::GpuModel;
use optimized::runner::single::SingleSeq;
use optimized::{Client, Dtype as DevDtype};
use reference::dequant::GgmlType;
use reference::quant::{quantized_weights, Granularity, QuantizeOnLoad, Scheme};
use reference::weights::{InMemory, Weights};
use reference::{synthetic, Config, Model, Trace};

use crate::{compare, tolerance, Case, Dtype, Op, Outcome};

/// Which weights a model case uses.
#[derive(Debug, Clone)]
pub enum Weightset {
    /// `synthetic::tiny_configs()` entry, seed 0.
    Tiny(&'static str),
    /// The real SmolLM2-135M-Instruct GGUF (dequantized at load).
    SmolLm2,
    /// A tiny config written as a GGUF of this type (to a temp file): the reference runs on
    /// its dequantized weights, the device reads the file — Q8_0 linear weights kept as INT8
    /// groups of 32, Q4_0 / Q4_1 at 4 bits (no requantization); F16 converted from the stored
    /// bytes to the device type (`optimized::upload`).
    TinyGguf(&'static str, GgmlType),
}

#[derive(Debug, Clone)]
pub struct ModelCase {
    pub weights: Weightset,
    pub dtype: Dtype,
    /// Prompt length, then this many single-token decode steps.
    pub prompt: usize,
    pub decode: usize,
    /// Linear weights quantized (the reference runs on their exact dequantized values; the GPU
    /// keeps them quantized), or dense.
    pub quant: Option<Scheme>,
    /// Decode (T ≤ 8) with the RMSNorms fused into the gemvs (the default), or with the add +
    /// RMSNorm kernels between them (`norms=kernels` in `GpuModel::kernels`).
    pub fused_norms: bool,
}

fn load(w: &Weightset) -> Result<(Config, Weights), String> {
    match w {
        Weightset::TinyGguf(name, ty) => {
            let l = reference::loader::load(&tiny_gguf(name, *ty)?).map_err(|e| e.to_string())?;
            Ok((l.config, l.weights))
        }
        Weightset::Tiny(name) => {
            let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| n == name).map(|(_, c)| c).ok_or(format!("no tiny config {name}"))?;
            let w = synthetic::weights(&cfg, 0).map_err(|e| e.to_string())?;
            Ok((cfg, w))
        }
        Weightset::SmolLm2 => {
            let p = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).map_err(|e| e.to_string())?;
            let l = reference::loader::load(&p).map_err(|e| e.to_string())?;
            Ok((l.config, l.weights))
        }
    }
}

/// `name` written as a GGUF of type `ty` in the temp dir (once per process, name and type).
fn tiny_gguf(name: &str, ty: GgmlType) -> Result<std::path::PathBuf, String> {
    let p = std::env::temp_dir().join(format!("tandem-conformance-{}-{name}-{}.gguf", std::process::id(), ty.name().to_lowercase()));
    if !p.exists() {
        let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).ok_or(format!("no tiny config {name}"))?;
        let w = synthetic::weights(&cfg, 0).map_err(|e| e.to_string())?;
        reference::loader::write_gguf(&p, &cfg, &w, ty).map_err(|e| e.to_string())?;
    }
    Ok(p)
}

impl ModelCase {
    /// The production path: 13 prompt tokens then 6 decode steps, paged cache + flash
    /// attention, dense weights, fused norms.
    fn standard(weights: Weightset, dtype: Dtype) -> Self {
        ModelCase { weights, dtype, prompt: 13, decode: 6, quant: None, fused_norms: true }
    }

    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let dd = self.dtype.device();
        if !dd.supported(client) {
            return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
        }
        let (cfg, w) = match load(&self.weights) {
            Ok(x) => x,
            // Only with TANDEM_OFFLINE set (the GPU host has no network and the 98 MB model
            // exceeds what can be carried there); otherwise a missing model fails.
            Err(e) if tandem_fetch::offline() => return Ok(Outcome::Skip(format!("real model unavailable offline: {e}"))),
            Err(e) => return Err(e),
        };
        // The reference runs on exactly the weights the device holds: a GGUF's Q8_0 / Q4_0 /
        // Q4_1 linear weights stay quantized there (exact), the rest is rounded to `dtype`.
        let kept = match self.weights {
            Weightset::TinyGguf(_, GgmlType::Q8_0) => Some("int8-g32"),
            Weightset::TinyGguf(_, GgmlType::Q4_0) => Some("q4_0"),
            Weightset::TinyGguf(_, GgmlType::Q4_1) => Some("q4_1"),
            _ => None,
        };
        let w = match kept {
            Some(_) => w.map_unquantized(|x| dd.round(&[x])[0]),
            None => w.map_matrices(|x| dd.round(&[x])[0]),
        };
        // Quantized: the reference runs on dequant(quantize(W)); the device gets the same
        // quantized bytes (quantized again from `w` on load, deterministically).
        let (reference, base) = match self.quant {
            None => (Model::new(cfg.clone(), w), None),
            Some(s) => (Model::new(cfg.clone(), quantized_weights(&w, &cfg, s).map_err(|e| e.to_string())?), Some(w)),
        };
        let ids: Vec<u32> = (0..(self.prompt + self.decode) as u32).map(|i| (i * 7919 + 11) % cfg.vocab as u32).collect();
        let (prompt, rest) = ids.split_at(self.prompt);
        let backend = optimized::Backend::of(client);
        let spec = reference::arch::llama::from_config(&cfg);
        let mut m = match (&base, self.quant, &self.weights) {
            (Some(b), Some(scheme), _) => GpuModel::load(client.clone(), backend, &mut QuantizeOnLoad { inner: InMemory(b), scheme }, &spec, dd),
            (_, _, Weightset::TinyGguf(name, ty)) => {
                let mut g = reference::gguf::GgufFile::open(&tiny_gguf(name, *ty)?).map_err(|e| e.to_string())?;
                GpuModel::load(client.clone(), backend, &mut g, &spec, dd)
            }
            _ => GpuModel::load(client.clone(), backend, &mut InMemory(&reference.weights), &spec, dd),
        }
        .map_err(|e| e.to_string())?;
        m.set_kernel_config(optimized::KernelConfig { fused_norms: self.fused_norms, ..*m.kernels() });
        if kept.is_some() && m.quant.as_deref() != kept {
            return Ok(Outcome::Fail(format!("{:?}: the device model holds {:?}, expected {kept:?} weights", self.weights, m.quant)));
        }
        if self.quant.is_some() && m.quant.is_none() {
            return Ok(Outcome::Fail("quantized source, but the device model holds no quantized weight".into()));
        }
        let quantized = self.quant.is_some() || kept.is_some();
        let mut gpu = SingleSeq::new(m, ids.len()).map_err(|e| e.to_string())?;
        let tol = super::model_tolerance(client, Op::Model, self.dtype, quantized, self.prompt, cfg.n_layers);

        let mut cache = reference.new_cache();
        let mut trace = Trace::default();
        let want = reference.forward(prompt, &mut cache, Some(&mut trace)).map_err(|e| e.to_string())?;
        let mut gtrace = Vec::new();
        let got = gpu.forward(prompt, Some(&mut gtrace)).and_then(|l| l.to_f32(client)).map_err(|e| e.to_string())?;
        let mut worst = crate::Metrics::default();
        let mut keep = |what: String, m: Result<crate::Metrics, String>| -> Result<(), String> {
            let m = m.map_err(|e| format!("{what}: {e}"))?;
            worst.fold(m);
            Ok(())
        };
        for (l, (h, g)) in trace.hidden.iter().zip(&gtrace).enumerate() {
            let flat: Vec<f32> = h.iter().copied().collect();
            if let Err(e) = keep(format!("block {l} hidden state"), compare(g, &flat, tol)) {
                return Ok(Outcome::Fail(e));
            }
        }
        let flat: Vec<f32> = want.iter().copied().collect();
        if let Err(e) = keep("prefill logits".into(), compare(&got, &flat, tol)) {
            return Ok(Outcome::Fail(e));
        }
        // Decode through the caches, one token at a time; greedy agreement where it is decided.
        let mut last_ref = want.index_axis(Axis(0), want.nrows() - 1).to_vec();
        let mut last_gpu = got[got.len() - cfg.vocab..].to_vec();
        for (s, &id) in rest.iter().enumerate() {
            let (r, g) = (reference::ops::argmax::argmax(&last_ref), reference::ops::argmax::argmax(&last_gpu));
            if r != g && super::top2_margin(&last_ref) > super::GREEDY_MARGIN {
                return Ok(Outcome::Fail(format!("decode step {s}: greedy {g} != reference {r} with margin {:.3}", super::top2_margin(&last_ref))));
            }
            let want = reference.forward(&[id], &mut cache, None).map_err(|e| e.to_string())?;
            last_ref = want.row(0).to_vec();
            last_gpu = gpu.forward(&[id], None).and_then(|l| l.to_f32(client)).map_err(|e| e.to_string())?;
            if let Err(e) = keep(format!("decode step {s} logits"), compare(&last_gpu, &last_ref, tol)) {
                return Ok(Outcome::Fail(e));
            }
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for ModelCase {
    fn op(&self) -> Op {
        Op::Model
    }
    fn name(&self) -> String {
        let w = match &self.weights {
            Weightset::Tiny(n) => n.to_string(),
            Weightset::SmolLm2 => "smollm2-135m-gguf".into(),
            Weightset::TinyGguf(n, ty) => format!("{n}-{}-gguf", ty.name().to_lowercase()),
        };
        let q = self.quant.map_or(String::new(), |s| format!(",{s}"));
        let n = if self.fused_norms { "" } else { ",unfused-norms" };
        format!("model({w},T={},decode={},paged+flash{q}{n},{})", self.prompt, self.decode, self.dtype.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// Greedy decode with the runner's captured graphs (and steps ahead) vs eager steps on the
/// same model, one sequence (`optimized::runner::single`):
/// the same tokens. `decode` steps after a `prompt`; then a reset and a second, shorter run
/// (the graph survives: its tables are rewritten in place). Past 16 blocks of 16 positions the
/// tables are widened and the graph captured again. A backend that refuses capture is a skip.
#[derive(Debug, Clone)]
pub struct GraphCase {
    pub weights: &'static str,
    pub prompt: usize,
    pub decode: usize,
}

impl GraphCase {
    /// Greedy tokens of two runs (`step_greedy`) and of a third that feeds other tokens and
    /// mixes in logit steps, then the logits of a fourth run through the sampling path
    /// (`step`, feeding back each row's argmax).
    #[allow(clippy::type_complexity)]
    fn greedy(&self, mut e: SingleSeq, cfg: &Config) -> Result<(Vec<u32>, Vec<Vec<f32>>, SingleSeq), String> {
        use engine::single::Engine;
        let mut out = Vec::new();
        let prompt = |p: usize, run: u32| -> Vec<u32> { (0..p as u32).map(|i| (i * 7919 + 11 + run) % cfg.vocab as u32).collect() };
        for (run, (p, n)) in [(self.prompt, self.decode), (3, 20.min(self.decode))].into_iter().enumerate() {
            e.reset();
            let mut next = e.step_greedy(&prompt(p, run as u32)).map_err(|e| e.to_string())?;
            out.push(next);
            for _ in 0..n {
                next = e.step_greedy(&[next]).map_err(|e| e.to_string())?;
                out.push(next);
            }
        }
        // Steps a greedy step launched ahead did not foresee (`runner::graphs`): every third
        // token fed is not the one returned, and every fifth step reads logits instead.
        e.reset();
        let v = cfg.vocab as u32;
        let mut next = e.step_greedy(&prompt(6, 5)).map_err(|e| e.to_string())?;
        for i in 0..24.min(self.decode) {
            let fed = if i % 3 == 2 { (next + 1) % v } else { next };
            next = if i % 5 == 4 {
                reference::ops::argmax::argmax(&e.step(&[fed]).map_err(|e| e.to_string())?) as u32
            } else {
                e.step_greedy(&[fed]).map_err(|e| e.to_string())?
            };
            out.push(next);
        }
        e.reset();
        let mut rows = vec![e.step(&prompt(4, 7)).map_err(|e| e.to_string())?];
        for _ in 0..8 {
            let next = reference::ops::argmax::argmax(rows.last().map_or(&[][..], |r| &r[..]));
            rows.push(e.step(&[next]).map_err(|e| e.to_string())?);
        }
        Ok((out, rows, e))
    }
}

impl Case for GraphCase {
    fn op(&self) -> Op {
        Op::Model
    }
    fn name(&self) -> String {
        format!("model({},T={},decode={},paged+flash,graph vs eager,f32)", self.weights, self.prompt, self.decode)
    }
    fn run(&self, client: &Client) -> Outcome {
        (|| -> Result<Outcome, String> {
            let (cfg, w) = load(&Weightset::Tiny(self.weights))?;
            let backend = optimized::Backend::of(client);
            let cap = self.prompt + self.decode + 1;
            // Tiny configs declare 256 positions; the weights do not depend on it.
            let cfg = Config { max_ctx: cfg.max_ctx.max(cap), ..cfg };
            let load = |graphs: bool| -> Result<SingleSeq, String> {
                let spec = reference::arch::llama::from_config(&cfg);
                let mut m = GpuModel::load(client.clone(), backend, &mut InMemory(&w), &spec, DevDtype::F32).map_err(|e| e.to_string())?;
                m.set_kernel_config(optimized::KernelConfig { graphs, ..*m.kernels() });
                SingleSeq::new(m, cap).map_err(|e| e.to_string())
            };
            let (eager, eager_rows, _) = self.greedy(load(false)?, &cfg)?;
            let (graphed, graph_rows, m) = self.greedy(load(true)?, &cfg)?;
            if let Some(why) = m.runner.graph_refused() {
                return Ok(Outcome::Skip(format!("graph capture refused: {why}")));
            }
            // Consecutive one-token greedy steps (what `tandem bench` times at batch 1) are
            // replayed ahead of their call: most of them must find their step launched.
            let (hits, misses) = m.runner.steps_ahead_counts();
            if m.model().kernels().ahead && hits <= misses {
                return Ok(Outcome::Fail(format!("greedy steps found their step ahead launched {hits} times, {misses} not")));
            }
            if let Some(s) = eager.iter().zip(&graphed).position(|(a, b)| a != b) {
                return Ok(Outcome::Fail(format!("greedy token {s}: graph {} != eager {}", graphed[s], eager[s])));
            }
            if eager.len() != graphed.len() {
                return Ok(Outcome::Fail(format!("{} graph tokens, {} eager", graphed.len(), eager.len())));
            }
            // Sampling path: the same logits (the graph's attention grid is sized for the tables'
            // width, so the split-K chunks and the summation order may differ).
            let (tol, _) = tolerance(Op::Model, Dtype::F32);
            let mut worst = crate::Metrics { max_abs: 0.0, nmse: 0.0, n: eager.len() };
            for (s, (g, w)) in graph_rows.iter().zip(&eager_rows).enumerate() {
                match compare(g, w, tol) {
                    Ok(m) => worst.fold(m),
                    Err(e) => return Ok(Outcome::Fail(format!("sampling step {s}: graph logits vs eager: {e}"))),
                }
            }
            Ok(Outcome::Pass(worst))
        })()
        .unwrap_or_else(Outcome::Fail)
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    // Captured decode graphs: across a table widening (> 256 positions), and with a window.
    v.push(Box::new(GraphCase { weights: "tiny-gqa", prompt: 5, decode: 270 }));
    v.push(Box::new(GraphCase { weights: "tiny-sliding", prompt: 9, decode: 30 }));
    for (name, _) in synthetic::tiny_configs() {
        for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            v.push(Box::new(ModelCase::standard(Weightset::Tiny(name), dtype)));
        }
    }
    // The sliding config with a prompt longer than its window (7) and decode past it; a
    // prompt of 37 spans three KV blocks of 16 and decode crosses into a fourth.
    v.push(Box::new(ModelCase {
        weights: Weightset::Tiny("tiny-sliding"),
        dtype: Dtype::F32,
        prompt: 1,
        decode: 20,
        quant: None,
        fused_norms: true,
    }));
    v.push(Box::new(ModelCase { weights: Weightset::Tiny("tiny-gqa"), dtype: Dtype::F32, prompt: 37, decode: 13, quant: None, fused_norms: true }));
    // Quantized linear weights (int8 per channel, int8 groups of 32, mxfp4) on the device.
    for name in ["tiny-mha", "tiny-gqa", "tiny-sliding", "tiny-untied"] {
        for scheme in [Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(32)), Scheme::Mxfp4] {
            v.push(Box::new(ModelCase {
                weights: Weightset::Tiny(name),
                dtype: Dtype::F32,
                prompt: 13,
                decode: 6,
                quant: Some(scheme),
                fused_norms: true,
            }));
        }
    }
    // Decode with the add + RMSNorm kernels instead of the fused gemvs (prompts ≤ 8 tokens run
    // the fused path in prefill too).
    v.push(Box::new(ModelCase { weights: Weightset::Tiny("tiny-gqa"), dtype: Dtype::F32, prompt: 5, decode: 6, quant: None, fused_norms: false }));
    v.push(Box::new(ModelCase {
        weights: Weightset::Tiny("tiny-gqa"),
        dtype: Dtype::F32,
        prompt: 5,
        decode: 6,
        quant: Some(Scheme::Int8(Granularity::PerChannel)),
        fused_norms: false,
    }));
    v.push(Box::new(ModelCase {
        weights: Weightset::Tiny("tiny-gqa"),
        dtype: Dtype::F32,
        prompt: 5,
        decode: 6,
        quant: Some(Scheme::Mxfp4),
        fused_norms: true,
    }));
    // Q8_0, Q4_0 and Q4_1 GGUFs kept quantized on the device (Q8_0 as INT8 groups of 32, Q4 at
    // 4 bits), Adjacent RoPE layout.
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        v.push(Box::new(ModelCase {
            weights: Weightset::TinyGguf("tiny-gqa", ty),
            dtype: Dtype::F32,
            prompt: 13,
            decode: 6,
            quant: None,
            fused_norms: true,
        }));
    }
    // An F16 GGUF converted on upload from the stored bytes (no f32 copy) to each 16-bit type;
    // a Q4_1 GGUF with its linear weights kept at 4 bits and its embeddings in 16 bits.
    for ty in [GgmlType::F16, GgmlType::Q4_1] {
        for dtype in [Dtype::F16, Dtype::BF16] {
            v.push(Box::new(ModelCase::standard(Weightset::TinyGguf("tiny-gqa", ty), dtype)));
        }
    }
    // Prefill of more rows than the `wgmma` GEMMs' minimum: tc v4 where the device has it, its
    // inputs written in 16 bits by the norms and the SwiGLU epilogue (`x16=fused`).
    for dtype in [Dtype::F16, Dtype::BF16] {
        v.push(Box::new(ModelCase { prompt: 40, decode: 3, ..ModelCase::standard(Weightset::Tiny("tiny-gqa"), dtype) }));
    }
    for dtype in [Dtype::F32, Dtype::BF16] {
        v.push(Box::new(ModelCase { weights: Weightset::SmolLm2, dtype, prompt: 9, decode: 3, quant: None, fused_norms: true }));
    }
    v
}
