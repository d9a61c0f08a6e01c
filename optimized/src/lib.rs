//! tandem's GPU path: cubecl kernels, checked against the `reference` crate.
//!
//! Runtimes linked (see `Cargo.toml`): CUDA, through NVRTC (`cuda-cpp`: CUDA C++ compiled at run
//! time, so the GPU machine needs libcuda + libnvrtc but no Rust) and wgpu (WGSL; on a machine
//! without a GPU it runs on lavapipe, Mesa's software Vulkan). A [`Backend`] is chosen at run
//! time with [`client`]; kernels take a [`Client`] and keep data on the device as
//! [`DeviceTensor`]s.
//!
//! Building needs only a Rust toolchain (the vendored cubecl-cuda has no LLVM backend); the tests'
//! lavapipe comes from `scripts/setup-build-deps.sh`. See `docs/gpu-build.md`.

pub mod arena;
pub mod bandwidth;
pub mod client;
pub mod config;
pub mod kernel_cache;
pub mod kernels;
pub mod kv_cache;
pub mod model;
pub mod nccl;
pub mod parallel;
pub mod runner;
pub mod tensor;
pub mod upload;

pub use client::Client;
pub use config::KernelConfig;
pub use cubecl;
pub use tensor::{DeviceTensor, Dtype};

use cubecl::device::{Device, WgpuDeviceKind};
use cubecl::features::{Plane, TypeUsage};
use cubecl::ir::{ElemType, FloatKind};

/// Everything that can go wrong on the GPU path. No function of this crate panics on a missing
/// device or a failed launch; they come back as one of these.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime is not linked in this build, or the machine has no such device.
    #[error("{backend} backend unavailable: {reason}")]
    Unavailable { backend: Backend, reason: String },
    /// cubecl panicked while bringing the device up (caught; the message is kept).
    #[error("{backend} client initialisation panicked: {message}")]
    InitPanicked { backend: Backend, message: String },
    /// A launch, compile or device error, surfaced by cubecl on read/sync.
    #[error("device error: {0}")]
    Server(#[from] cubecl::server::ServerError),
    /// Arguments that do not fit together (lengths, shapes).
    #[error("shape error: {0}")]
    Shape(String),
    /// The device lacks something the kernel needs.
    #[error("unsupported on this device: {0}")]
    Unsupported(String),
    /// The paged KV cache has no free block for a request (what was asked, what is free).
    #[error("KV cache pool exhausted: {0}")]
    PoolExhausted(String),
    /// Misuse of the paged KV cache: unknown sequence, double free, block id outside the pool.
    #[error("KV cache: {0}")]
    KvCache(String),
    /// A kernel configuration spec that does not parse (`config::KernelConfig::parse`), or a
    /// change a loaded model cannot take.
    #[error("{0}")]
    Config(String),
    /// A weight's copy to the device failed (the driver's message).
    #[error("weight upload: {0}")]
    Upload(String),
    /// An error of the reference crate (a source's tensor, the block manager, bad input).
    #[error(transparent)]
    Reference(#[from] reference::Error),
}

/// Which cubecl runtime to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// CUDA device 0, kernels compiled to CUDA C++ and through NVRTC at first launch.
    Cuda,
    /// The default wgpu adapter (Vulkan; lavapipe where there is no GPU).
    Wgpu,
    /// cubecl's CPU runtime (MLIR/LLVM). Not linked in this build: [`client`] returns
    /// [`Error::Unavailable`]. Kept so callers can name it once a `cpu` feature exists.
    Cpu,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Cuda, Backend::Wgpu, Backend::Cpu];

    /// The runtime `client` runs on (the clients [`client`] makes: CUDA or wgpu).
    pub fn of(client: &Client) -> Backend {
        if client.name().contains("cuda") {
            Backend::Cuda
        } else {
            Backend::Wgpu
        }
    }

    /// Lower-case name, as accepted by [`std::str::FromStr`].
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Wgpu => "wgpu",
            Backend::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cuda" => Ok(Backend::Cuda),
            "wgpu" | "vulkan" => Ok(Backend::Wgpu),
            "cpu" => Ok(Backend::Cpu),
            other => Err(format!("unknown backend `{other}` (cuda, wgpu, cpu)")),
        }
    }
}

pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Creates (or fetches: cubecl keeps one server per device for the process) the client of
/// `backend`'s default device.
///
/// Absence is detected without panicking: cubecl's `Device::cuda(0)` first checks that libcuda
/// can be dlopened and that the driver reports a device; `Device::wgpu` enumerates adapters.
/// Bringing the device up can still panic inside cubecl (its CUDA init `unwrap`s every driver
/// call), so that step runs under `catch_unwind` and a panic becomes [`Error::InitPanicked`]
/// (the default panic hook still prints the message to stderr).
pub fn client(backend: Backend) -> Result<Client, Error> {
    client_on(backend, 0)
}

/// [`client`] of CUDA device `index` (a tensor-parallel rank's); other backends have their
/// default device only and ignore it.
pub fn client_on(backend: Backend, index: usize) -> Result<Client, Error> {
    if backend == Backend::Cuda {
        kernel_cache::enable();
    }
    let device = match backend {
        Backend::Cuda => Device::cuda(index),
        Backend::Wgpu => Device::wgpu(WgpuDeviceKind::default()),
        Backend::Cpu => Device::cpu(),
    }
    .map_err(|e| Error::Unavailable { backend, reason: e.to_string() })?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.client()))
        .map(Client::new)
        .map_err(|p| Error::InitPanicked { backend, message: panic_message(p) })
}

/// Free and total device memory in bytes, where the runtime can tell (CUDA: the driver's
/// `cuMemGetInfo` on `client`'s context; `None` elsewhere).
pub fn memory_free(client: &Client) -> Option<(u64, u64)> {
    if !client.name().contains("cuda") {
        return None;
    }
    use cudarc::driver::result as cu;
    if let Ok((f, t)) = cu::mem_get_info() {
        return Some((f as u64, t as u64));
    }
    // No context current on this thread: make device 0's primary context current (the one
    // cubecl retained for the client) and ask again.
    upload::cuda_primary_current()?;
    cu::mem_get_info().ok().map(|(f, t)| (f as u64, t as u64))
}

/// Bytes cubecl's pools hold on `client`'s device (every stream's pages, in use or free), once
/// its queued work has ended: what tandem's own allocations take, on any backend (wgpu and
/// cubecl's CPU runtime included, which cannot say what the device has free).
pub fn memory_reserved(client: &Client) -> u64 {
    let _ = cubecl::future::block_on(client.sync());
    client.memory_report(cubecl::MemoryScope::Device).usage().bytes_reserved
}

/// What a kernel author needs to know about a device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// cubecl runtime name (e.g. `cuda`, `wgpu<wgsl>`).
    pub runtime: &'static str,
    /// Device name as the driver reports it.
    pub name: String,
    /// Plane (warp/subgroup) operations usable (`plane_sum`, `plane_broadcast`, ...).
    pub plane_ops: bool,
    /// Plane size range reported by the device (32..32 on NVIDIA).
    pub plane_size: (u32, u32),
    /// f16 arithmetic supported (not just storage/conversion).
    pub f16: bool,
    /// bf16 arithmetic supported.
    pub bf16: bool,
    /// Shared memory per cube, bytes.
    pub max_shared_memory: usize,
    /// Max units (threads) per cube.
    pub max_units_per_cube: u32,
    /// Widest vector (elements) the device accepts; `None` where the runtime sets no bound
    /// (CUDA reports `usize::MAX`).
    pub max_vector_size: Option<usize>,
    /// Streaming multiprocessors, where the runtime knows.
    pub num_sms: Option<u32>,
    /// Device memory in bytes, where the runtime knows.
    pub memory_bytes: Option<u64>,
    /// Largest single allocation, bytes.
    pub max_allocation: u64,
}

/// Reads [`DeviceInfo`] from a client.
pub fn device_info(client: &Client) -> DeviceInfo {
    let props = client.properties();
    let hw = &props.hardware;
    let arith = |k: FloatKind| props.features.type_usage(ElemType::Float(k)).contains(TypeUsage::Arithmetic);
    DeviceInfo {
        runtime: client.name(),
        name: props.identity.name.clone(),
        plane_ops: props.features.plane.contains(Plane::Ops),
        plane_size: (hw.plane_size_min, hw.plane_size_max),
        f16: arith(FloatKind::F16),
        bf16: arith(FloatKind::BF16),
        max_shared_memory: hw.max_shared_memory_size,
        max_units_per_cube: hw.max_units_per_cube,
        max_vector_size: Some(hw.max_vector_size).filter(|&v| v < 1 << 16),
        num_sms: hw.num_streaming_multiprocessors,
        memory_bytes: props.memory.max_memory(),
        max_allocation: props.memory.max_page_size,
    }
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} [{}]: plane ops {} (size {}..{}), f16 {}, bf16 {}, shared mem {} B, \
             {} units/cube, max vector {}, SMs {:?}, memory {:?} B, max alloc {} B",
            self.name,
            self.runtime,
            self.plane_ops,
            self.plane_size.0,
            self.plane_size.1,
            self.f16,
            self.bf16,
            self.max_shared_memory,
            self.max_units_per_cube,
            self.max_vector_size.map_or_else(|| "unbounded".to_owned(), |v| v.to_string()),
            self.num_sms,
            self.memory_bytes,
            self.max_allocation
        )
    }
}
