//! NCCL for tensor parallelism (issue 53), through cudarc's bindings with `libnccl` loaded at
//! run time (cudarc's `fallback-dynamic-loading`): a machine without NCCL builds and runs one
//! GPU as before, and gets [`Error::Unavailable`] only when a group of ranks is asked for
//! ([`available`]).
//!
//! [`NcclComm`] is one rank's communicator: all-reduce (sum) and all-gather of f32 / f16 /
//! bf16 device buffers, enqueued on a given CUDA stream, so they order with the kernels of that
//! stream and are recorded into a graph captured on it (NCCL ≥ 2.9 supports stream capture).
//! [`NcclHost`] puts it behind the reference's [`Communicator`] (host buffers copied through the
//! device): the same sharded forward pass as [`reference::parallel::Loopback`], checked on real
//! GPUs by `tests/nccl.rs`.
//!
//! The stream cubecl launches on: cubecl-cuda 0.11.3 has collectives of its own
//! (`ComputeClient::all_reduce` over `CollectiveDriver for Cuda`, vendor/cubecl-cuda
//! `compute/communication.rs`), enqueued on a dedicated communication stream per device
//! (`CudaContext::comm_stream`) that `ComputeClient::sync_collective` orders after the compute
//! stream; it joins a group with `ncclCommInitRank` under an id minted once per process
//! (one process driving every device, each by its own server thread), and refuses when
//! `is_culib_present()` is false. The compute stream's `CUstream` itself is private to the
//! server (`Stream::sys`, reached inside cubecl-cuda only), so a collective of this module on
//! cubecl's stream needs either that collective path (one process, all devices) or a small
//! vendored accessor handing the current stream out (one process per GPU, as vLLM and
//! mistral.rs run); graph capture of an all-reduce needs the collective on the captured stream
//! itself, which argues for the accessor. Not hooked up yet: `GpuRunner` runs one device.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use reference::parallel::Communicator;

use crate::{Backend, Dtype, Error};

type Result<T> = std::result::Result<T, Error>;

/// An error unless this machine has `libnccl` to load (checked before any NCCL call, which
/// would otherwise abort on the missing library).
pub fn available() -> Result<()> {
    // SAFETY: only tries to open the library by its candidate names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Unavailable {
            backend: Backend::Cuda,
            reason: "libnccl was not found: tensor parallelism over GPUs needs NCCL (one GPU runs without it)".into(),
        })
    }
}

/// A new group's unique id (`ncclGetUniqueId`, on rank 0): the bytes every rank passes to
/// [`NcclComm::init_rank`]. It holds rank 0's bootstrap address (NCCL_SOCKET_IFNAME picks the
/// interface).
pub fn unique_id() -> Result<Vec<u8>> {
    available()?;
    let id = result::get_uniqueid().map_err(|e| nccl_err("ncclGetUniqueId", e))?;
    Ok(id.internal.iter().map(|&c| c as u8).collect())
}

/// CUDA devices visible (0 without a driver).
pub fn device_count() -> usize {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

fn nccl_err(what: &str, e: result::NcclError) -> Error {
    Error::Unavailable { backend: Backend::Cuda, reason: format!("NCCL {what}: {e:?}") }
}

fn cuda_err(what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Unavailable { backend: Backend::Cuda, reason: format!("{what}: {e}") }
}

/// NCCL's name of a storage type.
pub fn nccl_type(d: Dtype) -> sys::ncclDataType_t {
    match d {
        Dtype::F32 => sys::ncclDataType_t::ncclFloat32,
        Dtype::F16 => sys::ncclDataType_t::ncclFloat16,
        Dtype::BF16 => sys::ncclDataType_t::ncclBfloat16,
        // Codes moved as bytes (never summed).
        Dtype::E4M3 => sys::ncclDataType_t::ncclUint8,
    }
}

/// One rank's NCCL communicator.
pub struct NcclComm {
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    /// [`NcclComm::abort`] ran (or runs): NCCL frees the communicator, so no call follows and
    /// the drop destroys nothing.
    aborted: std::sync::atomic::AtomicBool,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time: `&self`
// methods are `unsafe` and documented so, and `NcclHost` serialises them with a mutex.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.is_aborted() {
            return;
        }
        // SAFETY: `comm` came from a successful init and is destroyed once. A failure leaves
        // nothing to do in a destructor.
        let _ = unsafe { result::comm_destroy(self.comm) };
        crate::parallel::trace(|| format!("NCCL rank {}: communicator destroyed", self.rank));
    }
}

impl NcclComm {
    /// One communicator for each of the devices `0 .. world` of this process
    /// (`ncclCommInitAll`), rank r on device r.
    pub fn all_devices(world: usize) -> Result<Vec<NcclComm>> {
        available()?;
        let have = device_count();
        if world == 0 || world > have {
            return Err(Error::Unavailable { backend: Backend::Cuda, reason: format!("{world} ranks need {world} GPUs; {have} visible") });
        }
        let ordinals: Vec<i32> = (0..world as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); world];
        // SAFETY: `comms` has room for `world` communicators, `ordinals` names `world` devices.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), world as i32, ordinals.as_ptr()) }.map_err(|e| nccl_err("ncclCommInitAll", e))?;
        Ok(comms.into_iter().enumerate().map(|(rank, comm)| NcclComm::wrap(comm, rank, world)).collect())
    }

    /// Rank `rank` of `world` processes (`ncclCommInitRank`) on this host's device `ordinal`,
    /// joining the group whose [`unique_id`] rank 0 minted and sent to every rank. Blocks until
    /// every rank has called it.
    pub fn init_rank(id: &[u8], rank: usize, world: usize, ordinal: usize) -> Result<NcclComm> {
        available()?;
        let mut uid = sys::ncclUniqueId { internal: [0; 128] };
        if id.len() != uid.internal.len() {
            return Err(Error::Unavailable {
                backend: Backend::Cuda,
                reason: format!("an NCCL unique id of {} bytes (NCCL's are {})", id.len(), uid.internal.len()),
            });
        }
        for (d, &b) in uid.internal.iter_mut().zip(id) {
            *d = b as std::ffi::c_char;
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err(&format!("CUDA device {ordinal}"), e))?;
        // ncclCommInitRank joins on the calling thread's current device.
        ctx.bind_to_thread().map_err(|e| cuda_err(&format!("CUDA device {ordinal}"), e))?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` is a valid place for the new communicator; `uid` is rank 0's id.
        unsafe { result::comm_init_rank(&mut comm, world as i32, uid, rank as i32) }.map_err(|e| nccl_err("ncclCommInitRank", e))?;
        Ok(NcclComm::wrap(comm, rank, world))
    }

    fn wrap(comm: sys::ncclComm_t, rank: usize, world: usize) -> NcclComm {
        NcclComm { comm, rank, world, aborted: std::sync::atomic::AtomicBool::new(false) }
    }

    /// `ncclCommAbort`: the collectives of this communicator still running on the device stop
    /// (their kernels see NCCL's abort flag and return, leaving their buffers unfinished), and
    /// the communicator is freed once every graph holding one of its collectives is destroyed —
    /// this call blocks until then, so a runner's graphs must be able to go meanwhile (call it
    /// from a thread of its own). Once only; no collective may be enqueued on it afterwards.
    pub fn abort(&self) {
        if self.aborted.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        crate::parallel::trace(|| format!("NCCL rank {}: aborting the communicator", self.rank));
        // SAFETY: `comm` came from a successful init; the flag makes this the only abort and
        // keeps the drop from destroying it again.
        let _ = unsafe { result::comm_abort(self.comm) };
        crate::parallel::trace(|| format!("NCCL rank {}: communicator aborted", self.rank));
    }

    /// Whether [`NcclComm::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// `buf ← Σ_ranks buf` over `count` elements of `dtype` (`ncclAllReduce`, `ncclSum`, in
    /// place), enqueued on `stream`.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype` on this rank's device, valid until `stream`
    /// has run the reduction; calls on one communicator do not overlap.
    pub unsafe fn all_reduce_sum(&self, buf: u64, count: usize, dtype: Dtype, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        let p = buf as *mut c_void;
        result::all_reduce(p, p, count, nccl_type(dtype), sys::ncclRedOp_t::ncclSum, self.comm, stream as _)
            .map(|_| ())
            .map_err(|e| nccl_err("ncclAllReduce", e))
    }

    /// `recv ← send of every rank, in rank order` (`ncclAllGather`, `count` elements a rank),
    /// enqueued on `stream`.
    ///
    /// # Safety
    /// `send` holds `count`, `recv` `world · count` elements of `dtype` on this rank's device,
    /// valid until `stream` has run the gather; calls on one communicator do not overlap.
    pub unsafe fn all_gather(&self, send: u64, recv: u64, count: usize, dtype: Dtype, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        result::all_gather(send as *const c_void, recv as *mut c_void, count, nccl_type(dtype), self.comm, stream as _)
            .map(|_| ())
            .map_err(|e| nccl_err("ncclAllGather", e))
    }
}

/// A rank's [`NcclComm`] behind the reference's [`Communicator`]: host buffers copied to the
/// device, the collective run on `stream`, the result copied back.
pub struct NcclHost {
    comm: Mutex<NcclComm>,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
}

impl NcclHost {
    /// Rank `comm.rank()` on its device's default stream.
    pub fn new(comm: NcclComm) -> Result<Self> {
        let ctx = CudaContext::new(comm.rank).map_err(|e| cuda_err("CUDA context", e))?;
        let (rank, world) = (comm.rank, comm.world);
        Ok(NcclHost { comm: Mutex::new(comm), stream: ctx.default_stream(), rank, world })
    }

    fn run<T>(&self, f: impl FnOnce(&NcclComm, &Arc<CudaStream>) -> Result<T>) -> reference::Result<T> {
        let comm = self.comm.lock().map_err(|_| reference::Error::Input(format!("NCCL rank {}: a call panicked", self.rank)))?;
        self.stream.context().bind_to_thread().map_err(|e| reference::Error::Input(format!("NCCL rank {}: {e}", self.rank)))?;
        f(&comm, &self.stream).map_err(|e| reference::Error::Input(format!("NCCL rank {}: {e}", self.rank)))
    }
}

impl Communicator for NcclHost {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, buf: &mut [f32]) -> reference::Result<()> {
        let out = self.run(|comm, stream| {
            let mut d = stream.clone_htod(buf).map_err(|e| cuda_err("copy to the device", e))?;
            {
                let (p, _sync) = d.device_ptr_mut(stream);
                // SAFETY: `d` holds `buf.len()` f32 on this device until the copy back below,
                // which `stream` orders after the reduction.
                unsafe { comm.all_reduce_sum(p, buf.len(), Dtype::F32, stream.cu_stream())? };
            }
            stream.clone_dtoh(&d).map_err(|e| cuda_err("copy to the host", e))
        })?;
        buf.copy_from_slice(&out);
        Ok(())
    }
    fn all_gather(&self, part: &[f32]) -> reference::Result<Vec<f32>> {
        self.run(|comm, stream| {
            let send = stream.clone_htod(part).map_err(|e| cuda_err("copy to the device", e))?;
            let mut recv = stream.alloc_zeros::<f32>(part.len() * comm.world).map_err(|e| cuda_err("device allocation", e))?;
            {
                let (s, _s) = send.device_ptr(stream);
                let (r, _r) = recv.device_ptr_mut(stream);
                // SAFETY: `send` holds `part.len()`, `recv` `world ·` that many f32 on this
                // device until the copy back, ordered after the gather on `stream`.
                unsafe { comm.all_gather(s, r, part.len(), Dtype::F32, stream.cu_stream())? };
            }
            stream.clone_dtoh(&recv).map_err(|e| cuda_err("copy to the host", e))
        })
    }
    /// Not on NCCL yet (grouped `ncclSend` / `ncclRecv` of sizes agreed first): the reference's
    /// expert parallelism combines by all-reduce and does not call it.
    fn all_to_all(&self, _send: Vec<Vec<f32>>) -> reference::Result<Vec<Vec<f32>>> {
        Err(reference::Error::Input("NCCL all-to-all is not built yet (expert parallelism combines by all-reduce)".into()))
    }
}
