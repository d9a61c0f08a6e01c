//! `--tensor-parallel N` (issue 53): the model sharded over N ranks. On `--device cpu` the
//! ranks are N threads of the reference ([`LoopbackGroup`]) behind the batched engine's CPU
//! runner, whose KV pools hold every rank's KV heads side by side. On a GPU they are N
//! `GpuRunner`s in lock-step behind one `TpRunner` (`optimized::parallel`): on `cuda` rank r on
//! device r with NCCL (`NCCL_NVLS_ENABLE=0` set in the process environment unless already set:
//! NVLink multicast stays off), on `wgpu` N ranks on the one adapter with host-staged
//! collectives (slow: for tests). Dense models only on the GPU so far.

use engine::cpu_runner::{RefForward, RefRunner};
use engine::runner::{ModelInfo, ModelRunner};
use ndarray::Array2;
use reference::arch::model::WeightsRef;
use reference::kv_cache::KvCache;
use reference::parallel::{LoopbackGroup, ShardPlan};

use reference::Trace;

use super::generate_args::GenerateArgs;
use super::kv_pool::{KvPool, KvSize};
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

/// An error unless `device` can run `n` ranks: CUDA needs libnccl and `n` GPUs (and gets
/// `NCCL_NVLS_ENABLE=0` unless the environment sets it); the CPU and wgpu run any `n`.
pub fn check_device(n: usize, device: Device) -> Result<()> {
    if n == 0 {
        return Err(CliError::Usage("--tensor-parallel 0: needs at least 1 rank".into()));
    }
    if n == 1 || resolve(device) != Some(optimized::Backend::Cuda) {
        return Ok(());
    }
    optimized::nccl::available().map_err(|e| CliError::Usage(format!("--tensor-parallel {n}: {e}")))?;
    let have = optimized::nccl::device_count();
    if have < n {
        return Err(CliError::Usage(format!("--tensor-parallel {n}: {n} ranks need {n} GPUs; {have} visible")));
    }
    nvls_off();
    Ok(())
}

/// `NCCL_NVLS_ENABLE=0` unless set: NVLink multicast (NVLS) stays off on the GPU machines.
fn nvls_off() {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // SAFETY: called before NCCL starts and before the rank threads exist: no other thread
        // of this process reads the environment concurrently at this point of start-up.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

/// The runner `generate` asks for: `opened`'s on `--device`, or sharded over
/// `--tensor-parallel` ranks.
pub fn runner(a: &GenerateArgs, opened: &mut Opened, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
    sharded(opened, a.tensor_parallel, a.model.device, a.model.dtype.as_deref(), kv_tokens)
}

/// `opened`'s runner on `device` over `n` ranks (`n` = 1: the one-device runner), KV pools of
/// at least `kv_tokens` positions.
pub fn sharded(opened: &mut Opened, n: usize, device: Device, dtype: Option<&str>, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
    Ok(sharded_sized(opened, n, device, dtype, KvSize::Tokens(kv_tokens))?.0)
}

/// [`sharded`] with the pools sized by `size` (`n` = 1: `Opened::runner_sized`). Sharded pools
/// are not sized from the device's memory yet: a memory-sized request takes its fallback.
pub fn sharded_sized(
    opened: &mut Opened,
    n: usize,
    device: Device,
    dtype: Option<&str>,
    size: KvSize,
) -> Result<(Box<dyn ModelRunner + Send>, KvPool)> {
    if n == 1 {
        return opened.runner_sized(device, dtype, size);
    }
    check_device(n, device)?;
    let c = opened.config.clone();
    // Every rank's pools together, f32 (the widest KV type).
    let per_position = (2 * c.n_layers * c.n_kv_heads * c.head_dim * 4) as u64;
    let (blocks, pool) = super::kv_pool::blocks(size, None, &c, per_position, KV_BLOCK)?;
    let runner = match resolve(device) {
        None => cpu_runner(opened, n, blocks * KV_BLOCK)?,
        Some(b) => gpu_runner(opened, n, b, dtype, blocks * KV_BLOCK)?,
    };
    Ok((runner, pool))
}

/// N `GpuRunner`s of `opened`'s slices (`optimized::parallel::load_rank`: each rank reads the
/// whole file once and uploads its slices) behind one `TpRunner`.
fn gpu_runner(
    opened: &mut Opened,
    n: usize,
    backend: optimized::Backend,
    dtype: Option<&str>,
    kv_tokens: usize,
) -> Result<Box<dyn ModelRunner + Send>> {
    use optimized::parallel::{load_rank, TpComms, TpRunner};
    let comms = match backend {
        optimized::Backend::Cuda => TpComms::Nccl,
        _ => TpComms::Host,
    };
    let comms = comms.make(n)?;
    // The runner pages its own KV cache: flash attention whatever the config says.
    let kernels = optimized::KernelConfig { attention: optimized::model::AttentionImpl::Flash, ..opened.kernels };
    let label = opened.label.clone();
    let (spec, mut src) = opened.gpu_tensors()?;
    let plan = ShardPlan::new(&spec, n)?;
    let mut models = Vec::with_capacity(n);
    for (r, comm) in comms.into_iter().enumerate() {
        let client = optimized::client_on(backend, r)?;
        let dtype = super::source::pick_dtype(&client, dtype)?;
        let t0 = std::time::Instant::now();
        let m = load_rank(client, src.as_mut(), &spec, &plan, r, comm, dtype, &kernels)?;
        eprintln!(
            "  {label}: rank {r} of {n}: {:.1} MB of weights on the device in {:.1} s",
            m.weight_bytes as f64 / 1e6,
            t0.elapsed().as_secs_f64()
        );
        models.push(m);
    }
    let info = ModelInfo::of(&spec.dims()?);
    let layout = engine::runner::KvLayout { block_size: KV_BLOCK, num_blocks: kv_tokens.div_ceil(KV_BLOCK).max(1) };
    Ok(Box::new(TpRunner::from_models(models, info, layout)?))
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
