//! Tensor-parallel ranks as processes (issue 53), torchrun's way: rank 0 is the process that
//! runs `generate`, `serve` or `bench --batches` with `--tensor-parallel N --master-addr
//! HOST:PORT`; ranks 1 .. N−1 are `tandem rank --rank R --world-size N --master-addr HOST:PORT`
//! with the same model flags, on this host or others (env `TANDEM_MASTER_ADDR`, `TANDEM_RANK`,
//! `TANDEM_WORLD_SIZE`, `TANDEM_LOCAL_RANK` stand in for the flags). docs/multi-host.md.
//!
//! Every process loads only its shard and runs it behind the one `ModelRunner` of its device:
//! on the CPU a `RefRunner` over its [`RankModel`] with the collectives over the TCP links
//! ([`TcpComm`]); on a GPU a `GpuRunner` over `optimized::parallel::load_rank`'s model, with
//! NCCL on CUDA (rank 0 mints the unique id and sends it with the setup; each process calls
//! `ncclCommInitRank` on its local GPU) or host-staged collectives over the links on wgpu.
//! Rank 0 wraps its runner in `engine::ranks::LeadRunner`, which sends each step to the workers.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use engine::cpu_runner::{RefForward, RefRunner};
use engine::ranks::{self, LeadRunner, Setup};
use engine::runner::{KvLayout, ModelInfo, ModelRunner};
use ndarray::Array2;
use reference::arch::model::WeightsRef;
use reference::kv_cache::KvCache;
use reference::parallel::rendezvous::{self, Hello, PROTOCOL};
use reference::parallel::tcp::SharedLink;
use reference::parallel::{RankModel, TcpComm};
use reference::Trace;
use sha2::{Digest, Sha256};

use super::source::{resolve, Arch, Opened};
use super::tp::Tp;
use super::{CliError, Device, ModelArgs, Result};

/// Seconds a rank waits for the others to connect and introduce themselves.
const DEFAULT_TIMEOUT: u64 = 120;

/// Rank 0's flags on `generate`, `serve` and `bench`.
#[derive(Args, Debug, Clone, Default)]
pub struct DistArgs {
    /// Run the --tensor-parallel ranks as processes: this one is rank 0 and listens on
    /// HOST:PORT (e.g. 0.0.0.0:29500) for ranks 1 .. N−1, each started as `tandem rank --rank R
    /// --world-size N --master-addr HOST0:PORT` with the same model flags (env
    /// TANDEM_MASTER_ADDR). Without it the ranks are threads of this process.
    #[arg(long, value_name = "HOST:PORT")]
    pub master_addr: Option<String>,
    /// Seconds to wait for every rank to connect (default 120).
    #[arg(long, value_name = "SECS")]
    pub rank_timeout: Option<u64>,
}

/// Rank 0's side of a group of processes.
#[derive(Debug, Clone)]
pub struct Lead {
    addr: String,
    timeout: Duration,
    model: String,
}

/// `flag`'s value, else the environment variable `var`'s (a bad value names it).
fn flag_or_env<T: std::str::FromStr>(flag: Option<T>, var: &str) -> Result<Option<T>> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var(var) {
        Ok(v) => v.trim().parse().map(Some).map_err(|_| CliError::Usage(format!("{var}={v}: not a valid value"))),
        Err(_) => Ok(None),
    }
}

impl DistArgs {
    /// Whether the ranks are processes (`--master-addr` or TANDEM_MASTER_ADDR).
    pub fn processes(&self) -> bool {
        self.master_addr.is_some() || std::env::var_os("TANDEM_MASTER_ADDR").is_some()
    }

    /// Rank 0's settings when the ranks are processes (`--master-addr` or TANDEM_MASTER_ADDR);
    /// `None`: threads of this process.
    pub fn lead(&self, model: &ModelArgs) -> Result<Option<Lead>> {
        let Some(addr) = flag_or_env(self.master_addr.clone(), "TANDEM_MASTER_ADDR")? else { return Ok(None) };
        Ok(Some(Lead { addr, timeout: Duration::from_secs(self.rank_timeout.unwrap_or(DEFAULT_TIMEOUT)), model: identity(model)? }))
    }
}

/// `tandem rank`: one worker rank of a tensor-parallel group.
#[derive(Args, Debug)]
pub struct RankArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// This rank, 1 .. N−1 (rank 0 is the `generate` / `serve` / `bench` process); env
    /// TANDEM_RANK.
    #[arg(long)]
    pub rank: Option<usize>,
    /// N, the ranks in the group: rank 0's --tensor-parallel; env TANDEM_WORLD_SIZE.
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Rank 0's address, HOST:PORT; env TANDEM_MASTER_ADDR.
    #[arg(long, value_name = "HOST:PORT")]
    pub master_addr: Option<String>,
    /// The GPU of this host the rank runs on (default: RANK mod the GPUs visible); env
    /// TANDEM_LOCAL_RANK.
    #[arg(long)]
    pub local_rank: Option<usize>,
    /// Seconds to wait for rank 0 to listen and welcome this rank (default 120).
    #[arg(long, value_name = "SECS")]
    pub rank_timeout: Option<u64>,
}

/// What identifies the model every rank must load: the file's size and the sha256 of its
/// first MiB (a GGUF's header: metadata and tensor table), an HF directory's config.json and
/// safetensors sizes, or the synthetic name; and the flags that change the weights.
pub fn identity(m: &ModelArgs) -> Result<String> {
    let base = match (&m.synthetic, &m.model) {
        (Some(name), _) => format!("synthetic {name} seed {}", m.synthetic_seed),
        (None, Some(p)) if p.is_dir() => dir_identity(p)?,
        (None, Some(p)) => file_identity(p)?,
        (None, None) => "the default model".to_string(),
    };
    Ok(format!("{base}, --weights {}, --dtype {}", m.weights.as_deref().unwrap_or("as stored"), m.dtype.as_deref().unwrap_or("default")))
}

fn file_identity(p: &Path) -> Result<String> {
    use std::io::Read;
    let io = |e: std::io::Error| CliError::Lib(reference::Error::io(p, e));
    let f = std::fs::File::open(p).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let mut head = Vec::new();
    f.take(1 << 20).read_to_end(&mut head).map_err(io)?;
    Ok(format!("{size} bytes, sha256 of the first MiB {}", hex8(&Sha256::digest(&head))))
}

fn dir_identity(p: &Path) -> Result<String> {
    let cfg = p.join("config.json");
    let bytes = std::fs::read(&cfg).map_err(|e| CliError::Lib(reference::Error::io(&cfg, e)))?;
    let mut sizes: Vec<(String, u64)> = std::fs::read_dir(p)
        .map_err(|e| CliError::Lib(reference::Error::io(p, e)))?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().map_or(0, |m| m.len())))
        .collect();
    sizes.sort();
    let total: u64 = sizes.iter().map(|s| s.1).sum();
    Ok(format!("config.json sha256 {}, {} safetensors files of {total} bytes", hex8(&Sha256::digest(&bytes)), sizes.len()))
}

fn hex8(d: &[u8]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The device kind every rank must share.
fn device_name(device: Device) -> String {
    resolve(device).map_or_else(|| "cpu".to_string(), |b| b.to_string())
}

/// One rank's shard as the CPU runner's forward pass, its collectives over TCP.
struct RankForward {
    model: RankModel,
    comm: TcpComm,
    info: ModelInfo,
}

impl RefForward for RankForward {
    fn n_layers(&self) -> usize {
        self.model.spec.n_layers()
    }
    fn n_kv_heads(&self) -> usize {
        self.model.n_kv_heads()
    }
    fn head_dim(&self) -> usize {
        self.model.spec.layers.first().map_or(1, |l| l.attn.head_dim)
    }
    fn info(&self) -> ModelInfo {
        self.info.clone()
    }
    /// The rank keeps no hidden states: `trace` stays empty.
    fn forward(&self, ids: &[u32], cache: &mut KvCache, _trace: Option<&mut Trace>) -> reference::Result<Array2<f32>> {
        self.model.forward(&self.comm, ids, cache)
    }
    fn windows(&self) -> Vec<Option<usize>> {
        self.model.spec.layers.iter().map(|l| l.attn.window).collect()
    }
}

/// How a rank's collectives run: over its links (CPU, wgpu), or NCCL under rank 0's id on the
/// GPU `ordinal` of this host.
enum Comms {
    Links(Vec<SharedLink>),
    Nccl { id: Vec<u8>, ordinal: usize },
}

/// Rank `r` of `world`'s runner over `opened`'s shard with pools of `kv`.
fn rank_runner(
    opened: &mut Opened,
    device: Device,
    dtype: Option<&str>,
    r: usize,
    tp: Tp,
    kv: KvLayout,
    comms: Comms,
) -> Result<Box<dyn ModelRunner + Send>> {
    let world = tp.ranks;
    let Some(backend) = resolve(device) else {
        let Comms::Links(links) = comms else { return Err(CliError::Usage("a CPU rank's collectives run over its links".into())) };
        let comm = TcpComm::new(r, world, links)?;
        let (model, info) = with_weights(opened, |spec, w| Ok((RankModel::new(spec, w, &tp.plan(spec)?, r)?, ModelInfo::of_spec(spec))))?;
        return Ok(Box::new(RefRunner::with_layout(RankForward { model, comm, info }, kv)?));
    };
    use optimized::parallel::{load_rank, DeviceComm, HostStaged, NcclDevice};
    let (comm, ordinal): (Arc<dyn DeviceComm>, usize) = match comms {
        Comms::Nccl { id, ordinal } => (Arc::new(NcclDevice::new(optimized::nccl::NcclComm::init_rank(&id, r, world, ordinal)?)), ordinal),
        Comms::Links(links) => (Arc::new(HostStaged::over(Box::new(TcpComm::new(r, world, links)?))), 0),
    };
    let client = optimized::client_on(backend, ordinal)?;
    let dtype = super::source::pick_dtype(&client, dtype)?;
    let kernels = rank_kernels(opened);
    let (spec, mut src) = opened.gpu_tensors()?;
    let plan = tp.plan(&spec)?;
    let m = load_rank(client, src.as_mut(), &spec, &plan, r, comm.clone(), dtype, &kernels)?;
    let mut runner = optimized::runner::GpuRunner::with_layout(m, kv)?;
    // The shard's model knows its own rows of the vocabulary; the steps range over the whole.
    runner.set_info(ModelInfo::of(&spec.dims()?));
    if !comm.captures() {
        // Host-staged collectives read back: a captured graph cannot hold them.
        runner.set_graphs(false);
    }
    Ok(Box::new(runner))
}

/// A split of `spec` under `plan` that GPU ranks do not run (GPT-OSS's MXFP4 experts by rows)
/// as a usage error: checked before any load, by rank threads and by rank 0 of rank processes
/// before it waits for its workers.
pub(super) fn check_gpu_split(spec: &reference::arch::ModelSpec, plan: &reference::parallel::ShardPlan) -> Result<()> {
    optimized::parallel::local_spec(spec, plan, 0).map(|_| ()).map_err(|e| {
        CliError::Usage(match e {
            reference::Error::Input(m) => m,
            e => e.to_string(),
        })
    })
}

/// Rank 0 of `n` processes: wait for the workers, send them the setup, build this rank's
/// runner (pools of `kv`, every rank's) and wrap it to drive theirs.
pub fn lead_runner(
    opened: &mut Opened,
    tp: Tp,
    device: Device,
    dtype: Option<&str>,
    kv: KvLayout,
    lead: &Lead,
) -> Result<Box<dyn ModelRunner + Send>> {
    let n = tp.ranks;
    if resolve(device).is_some() {
        let (spec, _) = opened.gpu_tensors()?;
        check_gpu_split(&spec, &tp.plan(&spec)?)?;
    }
    let hello = Hello { protocol: PROTOCOL, rank: 0, world: n, model: lead.model.clone(), device: device_name(device) };
    eprintln!("  rank 0 of {n}: waiting for ranks 1 .. {} at {} (at most {} s)", n - 1, lead.addr, lead.timeout.as_secs());
    let links = rendezvous::accept_ranks(&lead.addr, &hello, lead.timeout)?;
    let cuda = resolve(device) == Some(optimized::Backend::Cuda);
    let nccl_id = if cuda { Some(optimized::nccl::unique_id()?) } else { None };
    let expert_parallel = tp.moe.map(|m| m == reference::parallel::MoeSplit::Experts);
    ranks::send_setup(&links, &Setup { kv, nccl_id: nccl_id.clone(), expert_parallel })?;
    let comms = match nccl_id {
        Some(id) => Comms::Nccl { id, ordinal: 0 },
        None => Comms::Links(links.clone()),
    };
    let runner = rank_runner(opened, device, dtype, 0, tp, kv, comms)?;
    Ok(Box::new(LeadRunner::new(runner, links)?))
}

/// `tandem rank`: join rank 0, build this rank's runner as it says, run its steps until it
/// shuts the group down.
pub fn run(a: RankArgs) -> Result<()> {
    let missing = |flag: &str, var: &str| CliError::Usage(format!("tandem rank: {flag} (or {var}) is required"));
    let rank = flag_or_env(a.rank, "TANDEM_RANK")?.ok_or_else(|| missing("--rank", "TANDEM_RANK"))?;
    let world = flag_or_env(a.world_size, "TANDEM_WORLD_SIZE")?.ok_or_else(|| missing("--world-size", "TANDEM_WORLD_SIZE"))?;
    let addr = flag_or_env(a.master_addr.clone(), "TANDEM_MASTER_ADDR")?.ok_or_else(|| missing("--master-addr", "TANDEM_MASTER_ADDR"))?;
    if rank == 0 || rank >= world {
        return Err(CliError::Usage(format!(
            "--rank {rank} --world-size {world}: a worker is rank 1 .. {} (rank 0 is the generate / serve / bench process)",
            world.saturating_sub(1)
        )));
    }
    let device = a.model.device;
    let cuda = resolve(device) == Some(optimized::Backend::Cuda);
    if cuda {
        nvls_off();
        optimized::nccl::available()?;
    }
    let mut opened = a.model.open()?;
    opened.check_device(device)?;
    let hello = Hello { protocol: PROTOCOL, rank, world, model: identity(&a.model)?, device: device_name(device) };
    let timeout = Duration::from_secs(a.rank_timeout.unwrap_or(DEFAULT_TIMEOUT));
    let link = rendezvous::join(&addr, &hello, timeout)?;
    eprintln!("  rank {rank} of {world}: joined rank 0 at {addr}");
    let setup = ranks::recv_setup(&link)?;
    let comms = match setup.nccl_id {
        Some(id) => {
            let visible = optimized::nccl::device_count().max(1);
            Comms::Nccl { id, ordinal: flag_or_env(a.local_rank, "TANDEM_LOCAL_RANK")?.unwrap_or(rank % visible) }
        }
        None => Comms::Links(vec![link.clone()]),
    };
    let tp = Tp::of(world, setup.expert_parallel);
    let mut runner = match rank_runner(&mut opened, device, a.model.dtype.as_deref(), rank, tp, setup.kv, comms) {
        Ok(r) => r,
        Err(e) => return Err(ranks::report_failure(&link, reference::Error::Backend(e.to_string())).into()),
    };
    ranks::serve_rank(runner.as_mut(), &link)?;
    eprintln!("  rank {rank} of {world}: rank 0 shut the group down");
    Ok(())
}

/// `NCCL_NVLS_ENABLE=0` unless set: NVLink multicast (NVLS) stays off on the GPU machines.
pub fn nvls_off() {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // SAFETY: called before NCCL starts and before the rank threads exist: no other thread
        // of this process reads the environment concurrently at this point of start-up.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

/// The kernel choices of a rank's GPU model: `opened`'s, with flash attention (the runner
/// pages its own KV cache, whatever the config says).
pub fn rank_kernels(opened: &Opened) -> optimized::KernelConfig {
    optimized::KernelConfig { attention: optimized::model::AttentionImpl::Flash, ..opened.kernels }
}

/// `f` of `opened`'s whole spec and f32 weights, read for the CPU reference (to be sharded
/// over ranks: the weights are dropped once `f` has sliced them).
pub fn with_weights<T>(opened: &mut Opened, f: impl FnOnce(&reference::arch::ModelSpec, &dyn WeightsRef) -> Result<T>) -> Result<T> {
    match &mut opened.arch {
        Arch::Spec(s) => {
            let m = super::source::spec::load(s)?;
            f(&m.spec, &m.weights)
        }
        Arch::Llama => {
            let m = opened.reference_model()?;
            f(&reference::arch::ModelSpec { act_quant: m.act_quant, ..reference::arch::llama::from_config(&m.config) }, &m.weights)
        }
        Arch::GptOss(g) => {
            let w = reference::gpt_oss::GptOssWeights::load(&mut g.files, &g.config)?;
            f(&reference::arch::gpt_oss::from_config(&g.config), &w)
        }
    }
}
