//! `--tensor-parallel N` (issue 53): the model sharded over N ranks. On `--device cpu` the
//! ranks are N threads of the reference ([`LoopbackGroup`]) behind the batched engine's CPU
//! runner, whose KV pools hold every rank's KV heads side by side. On a GPU they are N
//! `GpuRunner`s in lock-step behind one `TpRunner` (`optimized::parallel`): on `cuda` rank r on
//! device r with NCCL (`NCCL_NVLS_ENABLE=0` set in the process environment unless already set:
//! NVLink multicast stays off), on `wgpu` N ranks on the one adapter with host-staged
//! collectives (slow: for tests).
//!
//! A mixture of experts (Qwen3-MoE) is split as `--expert-parallel` says: `true` (or the bare
//! flag), each rank holds E/N whole experts; `false`, every expert's FFN rows are split N ways;
//! absent, the plan's choice (experts where E divides by N: `ShardPlan::new`). The router is
//! replicated on every rank; each rank's share of the MoE output is all-reduced. GPT-OSS's
//! MXFP4 experts split by expert on a GPU (a per-expert split is refused there); the CPU
//! reference runs both splits.
//! With `--master-addr` the ranks are processes instead, possibly on other hosts
//! ([`super::ranks`]).

use engine::cpu_runner::{RefForward, RefRunner};
use engine::runner::{KvLayout, ModelInfo, ModelRunner};
use ndarray::Array2;
use reference::kv_cache::KvCache;
use reference::parallel::LoopbackGroup;

use reference::Trace;

use super::generate_args::GenerateArgs;
use super::kv_pool::{KvPool, KvSize};
use super::kv_pool_tp;
use super::ranks::Lead;
use super::source::{resolve, Opened};
pub use super::tp::Tp;
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
    fn windows(&self) -> Vec<Option<usize>> {
        self.group.spec.layers.iter().map(|l| l.attn.window).collect()
    }
}

/// An error unless `device` can run `n` ranks: CUDA needs libnccl and `n` GPUs (one when the
/// ranks are `processes`, each on its host's GPUs) and gets `NCCL_NVLS_ENABLE=0` unless the
/// environment sets it; the CPU and wgpu run any `n`.
pub fn check_device(n: usize, device: Device, processes: bool) -> Result<()> {
    if n == 0 {
        return Err(CliError::Usage("--tensor-parallel 0: needs at least 1 rank".into()));
    }
    if n == 1 || resolve(device) != Some(optimized::Backend::Cuda) {
        return Ok(());
    }
    optimized::nccl::available().map_err(|e| CliError::Usage(format!("--tensor-parallel {n}: {e}")))?;
    let have = optimized::nccl::device_count();
    let need = if processes { 1 } else { n };
    if have < need {
        return Err(CliError::Usage(format!("--tensor-parallel {n}: {n} ranks need {need} GPUs here; {have} visible")));
    }
    super::ranks::nvls_off();
    Ok(())
}

/// The runner `generate` asks for: `opened`'s on `--device`, or sharded over
/// `--tensor-parallel` ranks.
pub fn runner(a: &GenerateArgs, opened: &mut Opened, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
    let lead = a.dist.lead(&a.model)?;
    sharded(opened, Tp::of(a.tensor_parallel, a.expert_parallel), a.model.device, a.model.dtype.as_deref(), kv_tokens, lead.as_ref())
}

/// `opened`'s runner on `device` over `tp`'s ranks (1: the one-device runner), KV pools of
/// at least `kv_tokens` positions; the ranks are processes under `lead` where given, threads of
/// this one otherwise.
pub fn sharded(
    opened: &mut Opened,
    tp: Tp,
    device: Device,
    dtype: Option<&str>,
    kv_tokens: usize,
    lead: Option<&Lead>,
) -> Result<Box<dyn ModelRunner + Send>> {
    Ok(sharded_sized(opened, tp, device, dtype, KvSize::Tokens(kv_tokens), lead)?.0)
}

/// [`sharded`] with the pools sized by `size` (1 rank: `Opened::runner_sized`). In-process
/// GPU ranks size a memory-sized pool from their devices ([`super::kv_pool_tp`]); ranks as
/// processes and the CPU's take its fallback.
pub fn sharded_sized(
    opened: &mut Opened,
    tp: Tp,
    device: Device,
    dtype: Option<&str>,
    size: KvSize,
    lead: Option<&Lead>,
) -> Result<(Box<dyn ModelRunner + Send>, KvPool)> {
    let n = tp.ranks;
    if n == 1 && tp.moe.is_some() {
        return Err(CliError::Usage("--expert-parallel splits experts over ranks: give --tensor-parallel N > 1".into()));
    }
    if n == 1 {
        return opened.runner_sized(device, dtype, size);
    }
    check_device(n, device, lead.is_some())?;
    let c = opened.config.clone();
    let windows = opened.windows();
    let wp = opened.window_pools;
    if let (None, Some(b), Some(profile)) = (lead, resolve(device), kv_pool_tp::profile_layout(size, c.max_ctx)) {
        let mut g = gpu_runner(opened, tp, b, dtype, profile)?;
        let sized = kv_pool_tp::size(&mut g, size, &c, &windows, wp)?;
        g.relayout(sized.layout).map_err(|e| CliError::Gpu(e.to_string()))?;
        for w in kv_pool_tp::headroom_warnings(&g, &sized.ranks)? {
            eprintln!("  warning: {w}");
        }
        return Ok((Box::new(g), sized.pool));
    }
    // Every rank's pools of the same layout (the same groups as one rank's).
    let fixed = kv_pool_tp::fixed(size, &c, &windows, wp)?;
    let runner: Box<dyn ModelRunner + Send> = match (lead, resolve(device)) {
        (Some(lead), _) => super::ranks::lead_runner(opened, tp, device, dtype, fixed.layout, lead)?,
        (None, None) => cpu_runner(opened, tp, fixed.layout)?,
        (None, Some(b)) => Box::new(gpu_runner(opened, tp, b, dtype, fixed.layout)?),
    };
    Ok((runner, fixed.pool))
}

/// N `GpuRunner`s of `opened`'s slices (`optimized::parallel::load_rank`: each rank reads the
/// whole file once and uploads its slices, an expert-parallel rank only its experts) behind
/// one `TpRunner`. The ranks load at once, each on a thread of its own from the model opened
/// again from its arguments (rank 0 from `opened`); one after another here where `opened`
/// keeps no arguments.
fn gpu_runner(
    opened: &mut Opened,
    tp: Tp,
    backend: optimized::Backend,
    dtype: Option<&str>,
    layout: KvLayout,
) -> Result<optimized::parallel::TpRunner> {
    use optimized::parallel::{StreamId, TpComms, TpRunner};
    let comms = match backend {
        optimized::Backend::Cuda => TpComms::Nccl,
        _ => TpComms::Host,
    };
    let n = tp.ranks;
    let comms = comms.make(n)?;
    let kernels = super::ranks::rank_kernels(opened);
    let info = {
        let (spec, _) = opened.gpu_tensors()?;
        super::ranks::check_gpu_split(&spec, &tp.plan(&spec)?)?;
        ModelInfo::of(&spec.dims()?)
    };
    let mut others = Vec::with_capacity(n.saturating_sub(1));
    if let Some(args) = opened.args.clone() {
        for _ in 1..n {
            others.push(args.open()?);
        }
    }
    let load = |o: &mut Opened, r: usize, comm| -> Result<(optimized::model::GpuModel, StreamId)> {
        let label = o.label.clone();
        let (spec, mut src) = o.gpu_tensors()?;
        let plan = tp.plan(&spec)?;
        let client = optimized::client_on(backend, r)?;
        let dtype = super::source::pick_dtype(&client, dtype)?;
        let t0 = std::time::Instant::now();
        let m = optimized::parallel::load_rank(client, src.as_mut(), &spec, &plan, r, comm, dtype, &kernels)?;
        eprintln!(
            "  {label}: rank {r} of {n}: {:.1} MB of weights on the device in {:.1} s",
            m.weight_bytes as f64 / 1e6,
            t0.elapsed().as_secs_f64()
        );
        Ok((m, StreamId::current()))
    };
    let models = if others.len() + 1 == n {
        let all = std::iter::once(opened).chain(others.iter_mut());
        std::thread::scope(|s| {
            let loads: Vec<_> = all.zip(comms).enumerate().map(|(r, (o, comm))| s.spawn(move || load(o, r, comm))).collect();
            loads
                .into_iter()
                .enumerate()
                .map(|(r, h)| h.join().unwrap_or_else(|_| Err(CliError::Gpu(format!("tensor-parallel rank {r}: its load panicked")))))
                .collect::<Result<Vec<_>>>()
        })?
    } else {
        comms.into_iter().enumerate().map(|(r, comm)| load(opened, r, comm)).collect::<Result<Vec<_>>>()?
    };
    Ok(TpRunner::from_models_on(models, info, layout)?)
}

/// The CPU runner of `opened` sharded over `n` ranks, KV pools of `layout`. The whole model
/// is read, sliced per rank, and dropped.
pub fn cpu_runner(opened: &mut Opened, tp: Tp, layout: KvLayout) -> Result<Box<dyn ModelRunner + Send>> {
    let group = super::ranks::with_weights(opened, |spec, w| Ok(LoopbackGroup::new(spec, w, tp.plan(spec)?)?))?;
    let info = ModelInfo::of_spec(&group.spec);
    Ok(Box::new(RefRunner::with_layout(Sharded { group, info }, layout)?))
}
