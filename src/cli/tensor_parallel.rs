//! `--tensor-parallel N` (issue 53): the model sharded over N ranks. On `--device cpu` the
//! ranks are N threads of the reference ([`LoopbackGroup`]) behind the batched engine's CPU
//! runner, whose KV pools hold every rank's KV heads side by side. Other devices refuse it
//! (NCCL ranks on CUDA are not built yet).

use engine::cpu_runner::{RefForward, RefRunner};
use engine::runner::{ModelInfo, ModelRunner};
use ndarray::Array2;
use reference::arch::model::WeightsRef;
use reference::kv_cache::KvCache;
use reference::parallel::{LoopbackGroup, ShardPlan};
use reference::Trace;

use super::generate_args::GenerateArgs;
use super::source::{resolve, Arch, Opened, KV_BLOCK};
use super::{CliError, Device, Result};

/// A sharded model as the CPU runner's forward pass.
struct Sharded {
    group: LoopbackGroup,
    info: ModelInfo,
}

impl RefForward for Sharded {
    fn n_layers(&self) -> usize {
        self.group.spec.n_layers()
    }
    fn n_kv_heads(&self) -> usize {
        self.group.joined_kv_heads()
    }
    fn head_dim(&self) -> usize {
        self.group.spec.layers.first().map_or(1, |l| l.attn.head_dim)
    }
    fn info(&self) -> ModelInfo {
        self.info.clone()
    }
    /// The ranks keep no hidden states: `trace` stays empty.
    fn forward(&self, ids: &[u32], cache: &mut KvCache, _trace: Option<&mut Trace>) -> reference::Result<Array2<f32>> {
        self.group.forward_joined(ids, cache)
    }
}

/// An error unless `device` runs tensor parallelism (the CPU reference does).
pub fn check_device(n: usize, device: Device) -> Result<()> {
    let name = match (device, resolve(device)) {
        (Device::Cpu, _) | (Device::Auto, None) => return Ok(()),
        (_, Some(optimized::Backend::Cuda)) | (Device::Cuda, _) => "cuda",
        _ => "wgpu",
    };
    Err(CliError::Usage(format!("--tensor-parallel {n}: tensor parallelism on {name} is not built yet (--device cpu runs it)")))
}

/// The runner `generate` asks for: `opened`'s on `--device`, or sharded over
/// `--tensor-parallel` ranks on the CPU.
pub fn runner(a: &GenerateArgs, opened: &mut Opened, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
    match a.tensor_parallel {
        1 => opened.runner(a.model.device, a.model.dtype.as_deref(), kv_tokens),
        n => {
            check_device(n, a.model.device)?;
            cpu_runner(opened, n, kv_tokens)
        }
    }
}

/// The CPU runner of `opened` sharded over `n` ranks, KV pools of at least `kv_tokens`
/// positions. The whole model is read, sliced per rank, and dropped.
pub fn cpu_runner(opened: &mut Opened, n: usize, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
    let blocks = kv_tokens.div_ceil(KV_BLOCK).max(1);
    let group = match &opened.arch {
        Arch::Spec(s) => {
            let m = super::source::spec::load(s)?;
            shard(&m.spec, &m.weights, n)?
        }
        Arch::Llama => {
            let m = opened.reference_model()?;
            shard(&reference::arch::llama::from_config(&m.config), &m.weights, n)?
        }
        Arch::GptOss(_) => return Err(CliError::Usage(format!("--tensor-parallel {n}: GPT-OSS's CLI path is not sharded yet"))),
    };
    let info = ModelInfo::of_spec(&group.spec);
    Ok(Box::new(RefRunner::new(Sharded { group, info }, KV_BLOCK, blocks)?))
}

fn shard(spec: &reference::arch::ModelSpec, w: &dyn WeightsRef, n: usize) -> Result<LoopbackGroup> {
    Ok(LoopbackGroup::new(spec, w, ShardPlan::new(spec, n)?)?)
}
