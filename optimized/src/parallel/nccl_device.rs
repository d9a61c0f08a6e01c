//! [`NcclDevice`]: a rank's collectives through NCCL ([`crate::nccl::NcclComm`]) on the CUDA
//! stream cubecl launches the rank's kernels on. The stream and the buffer's address come
//! from the client together (`get_resource`, whose `GpuResource::stream` is the vendored
//! cubecl-cuda's accessor: vendor/README.md), so the collective is enqueued after the kernels
//! that wrote the buffer and before those that read it, with no host sync, and a graph
//! captured on that stream records it.
//!
//! Capture and the other ranks: cubecl begins a capture in CUDA's global mode, under which a
//! thread whose own mode is global may not make a "potentially unsafe" call (an allocation, a
//! synchronous copy) while any thread of the process captures. The ranks are threads of one
//! process, each recording its decode graphs while the others may still allocate (a warm-up
//! run's buffers), so every rank thread sets its own mode to thread-local first
//! ([`DeviceComm::on_rank_thread`]): its own capture still guards its own calls, and the other
//! ranks' captures no longer fail them. cubecl's device servers run on threads of their own,
//! so the vendored cubecl-cuda begins its captures in thread-local mode too (vendor/README.md):
//! in global mode one device's recording made another device's allocations fail, a rank's
//! step became an error, and its peers waited in NCCL for it.
//!
//! Teardown: `ncclCommDestroy` waits until every CUDA graph holding one of the
//! communicator's collectives is destroyed (NCCL's `commDestroySync` polls until the graphs'
//! destructors ran), and cubecl destroys a graph on its device's server, queued unflushed when
//! the handle drops. So a rank's graphs go before its communicator (`GpuRunner` drops its
//! graphs first) and [`NcclDevice`]'s drop flushes that queue (a sync of the client its
//! collectives ran with) before destroying the communicator: without it the destroy waited
//! forever for graphs whose release sat in the queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cubecl_cuda::CudaServer;

use super::DeviceComm;
use crate::nccl::NcclComm;
use crate::{Client, DeviceTensor, Error};

/// A communicator's gate: one call at a time, none once its group is aborted.
#[derive(Default)]
struct Gate {
    calls: Mutex<()>,
    aborted: AtomicBool,
}

/// How long an abort waits for a collective being enqueued (NCCL may block in a call that sets
/// up a connection with the failed rank) before aborting under it — which NCCL allows.
const ENQUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The ranks of one process's group ([`NcclDevice::all_devices`]; a rank of its own for a
/// process rank): the first rank that fails aborts every member (`ncclCommAbort`), so the
/// others' collectives waiting for it on the device return instead of waiting forever.
struct Group {
    members: Vec<(Weak<NcclComm>, Arc<Gate>)>,
    failed: AtomicBool,
    why: OnceLock<String>,
}

impl Group {
    fn of(members: &[(Arc<NcclComm>, Arc<Gate>)]) -> Arc<Group> {
        let members = members.iter().map(|(c, gate)| (Arc::downgrade(c), gate.clone())).collect();
        Arc::new(Group { members, failed: AtomicBool::new(false), why: OnceLock::new() })
    }
}

/// One rank's NCCL communicator as a [`DeviceComm`].
pub struct NcclDevice {
    comm: Arc<NcclComm>,
    gate: Arc<Gate>,
    group: Arc<Group>,
    rank: usize,
    world: usize,
    /// The client of the first collective: synced before the communicator is destroyed.
    client: OnceLock<Client>,
}

impl Drop for NcclDevice {
    fn drop(&mut self) {
        if let Some(c) = self.client.get() {
            // Runs the graph destructions queued on the device's server before NCCL waits for
            // them (see the module's notes). A failed sync leaves nothing to wait for.
            let _ = cubecl::future::block_on(c.sync());
        }
        super::trace(|| format!("NCCL rank {}: synced, destroying the communicator", self.rank));
    }
}

impl NcclDevice {
    /// A rank of its own process: a group of one.
    pub fn new(comm: NcclComm) -> Self {
        let (comm, gate) = (Arc::new(comm), Arc::<Gate>::default());
        let group = Group::of(&[(comm.clone(), gate.clone())]);
        Self::member(comm, gate, group)
    }

    /// One for each of the devices `0 .. world` of this process, rank r on device r, as one
    /// group: a failure of any aborts them all.
    pub fn all_devices(world: usize) -> Result<Vec<NcclDevice>, Error> {
        let comms: Vec<(Arc<NcclComm>, Arc<Gate>)> = NcclComm::all_devices(world)?.into_iter().map(|c| (Arc::new(c), Arc::default())).collect();
        let group = Group::of(&comms);
        Ok(comms.into_iter().map(|(comm, gate)| Self::member(comm, gate, group.clone())).collect())
    }

    fn member(comm: Arc<NcclComm>, gate: Arc<Gate>, group: Arc<Group>) -> Self {
        let (rank, world) = (comm.rank(), comm.world());
        NcclDevice { comm, gate, group, rank, world, client: OnceLock::new() }
    }

    /// `f` on the communicator, one call at a time, or why the group stopped. Held only around
    /// the enqueue (the buffers' addresses are taken before).
    fn call<T>(&self, f: impl FnOnce(&NcclComm) -> Result<T, Error>) -> Result<T, Error> {
        let _one = self.gate.calls.lock().map_err(|_| Error::Shape(format!("NCCL rank {}: an earlier collective panicked", self.rank)))?;
        if self.gate.aborted.load(Ordering::SeqCst) {
            let why = self.group.why.get().map_or("a rank failed", String::as_str);
            return Err(Error::Unavailable {
                backend: crate::Backend::Cuda,
                reason: format!("NCCL rank {}: the group was aborted ({why})", self.rank),
            });
        }
        f(&self.comm)
    }
}

/// Aborts `members`: each marked first (no call starts after), then each `ncclCommAbort`ed once
/// a call being enqueued on it has returned, or [`ENQUEUE_WAIT`] has passed.
fn abort_all(members: Vec<(Arc<NcclComm>, Arc<Gate>)>) {
    for (_, gate) in &members {
        gate.aborted.store(true, Ordering::SeqCst);
    }
    for (comm, gate) in &members {
        let t = std::time::Instant::now();
        while matches!(gate.calls.try_lock(), Err(std::sync::TryLockError::WouldBlock)) && t.elapsed() < ENQUEUE_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        comm.abort();
    }
}

/// `f(address, stream)` of `t`'s buffer and the stream the client launches on, the buffer
/// kept in place meanwhile.
fn with_ptr<T>(c: &Client, t: &DeviceTensor, f: impl FnOnce(u64, cudarc::driver::sys::CUstream) -> Result<T, Error>) -> Result<T, Error> {
    let res = c.get_resource::<CudaServer>(t.handle.clone())?;
    let r = res.resource();
    if r.stream.is_null() {
        return Err(Error::Unsupported("NCCL: the client handed out no CUDA stream (not a CUDA client?)".into()));
    }
    if (r.size as usize) < t.bytes() {
        return Err(Error::Shape(format!("NCCL: a device buffer of {} bytes for a tensor of {}", r.size, t.bytes())));
    }
    f(r.ptr, r.stream)
}

impl DeviceComm for NcclDevice {
    fn captures(&self) -> bool {
        true
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, c: &Client, t: &DeviceTensor) -> Result<(), Error> {
        self.client.get_or_init(|| c.clone());
        // SAFETY: `ptr` holds `t.numel()` elements of `t.dtype` on this rank's device (checked
        // by `with_ptr`), kept alive by `t`'s handle, whose later uses the stream orders after
        // the reduction; calls on the communicator are serialised by `call`.
        with_ptr(c, t, |ptr, stream| self.call(|comm| unsafe { comm.all_reduce_sum(ptr, t.numel(), t.dtype, stream) }))
    }
    fn all_gather(&self, c: &Client, part: &DeviceTensor) -> Result<DeviceTensor, Error> {
        let mut shape = vec![self.world];
        shape.extend(&part.shape);
        let out = DeviceTensor::empty(c, &shape, part.dtype);
        self.client.get_or_init(|| c.clone());
        // SAFETY: `send` holds `part.numel()`, `recv` `world ·` that many elements of
        // `part.dtype` on this device (checked by `with_ptr`), alive through their handles;
        // the stream orders the gather after the writes of `part` and before reads of `out`.
        with_ptr(c, part, |send, stream| {
            with_ptr(c, &out, |recv, _| self.call(|comm| unsafe { comm.all_gather(send, recv, part.numel(), part.dtype, stream) }))
        })?;
        Ok(out)
    }
    /// Aborts every communicator of the group, once, from a thread of its own ([`abort_all`]):
    /// the collectives waiting on the device for this rank return, and NCCL frees each
    /// communicator once the ranks' graphs holding its collectives are gone (which the abort
    /// waits for: hence the thread). Ranks in other processes are not reached: their rank 0
    /// ends them.
    fn fail(&self, why: &str) {
        if self.group.failed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.group.why.set(format!("rank {} failed: {why}", self.rank));
        super::trace(|| format!("NCCL rank {}: failed, aborting the group: {why}", self.rank));
        let members = self.group.members.iter().filter_map(|(c, gate)| Some((c.upgrade()?, gate.clone()))).collect();
        if std::thread::Builder::new().name("nccl-abort".into()).spawn(move || abort_all(members)).is_err() {
            super::trace(|| "no thread for the NCCL abort".into());
        }
    }
    fn describe(&self) -> String {
        format!("NCCL on the compute stream (rank {} of {})", self.rank, self.world)
    }
    fn waits_on_dead_peers(&self) -> bool {
        true
    }
    fn on_rank_thread(&self) -> Result<(), Error> {
        use cudarc::driver::sys::{cuThreadExchangeStreamCaptureMode, CUresult, CUstreamCaptureMode};
        let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: sets this thread's capture interaction mode; `mode` is a valid place for the
        // previous one.
        let status = unsafe { cuThreadExchangeStreamCaptureMode(&mut mode) };
        if status != CUresult::CUDA_SUCCESS {
            return Err(Error::Unsupported(format!("NCCL rank {}: cuThreadExchangeStreamCaptureMode: {status:?}", self.rank)));
        }
        Ok(())
    }
}
