//! Weight uploads on CUDA past the client's thread: chunks converted over all cores into
//! page-locked buffers, and copied into the weight's device buffer by the driver on a copier
//! thread of our own, while the next chunk is converted.
//!
//! Why: the client handles every `write` on its one thread — a copy of the chunk into its own
//! pinned pool, the DMA, a fence — and a load spent most of its time waiting for it (H200:
//! TinyLlama F16 1.16 of 1.59 s, Mistral F16 3.3 of 6.5 s). Here the client is asked once per
//! tensor for the buffer's device address (`get_resource`, which also keeps the allocation in
//! place) and is otherwise not involved.
//!
//! Ordering: cubecl's streams are non-blocking, so a [`Batch`] begins with a client sync (no
//! kernel still reads memory a new weight reuses) and a weight may be read only after its
//! batch's [`Batch::finish`] (the copies are done; later launches come after on the host).
//!
//! The page-locked buffers ([`SLOTS`] × [`CHUNK_BYTES`]) are allocated once per process and
//! reused by every load (pinning costs ~3 ms per MiB on the H200 machines).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use cubecl::server::Handle;
use cubecl_cuda::CudaServer;

use super::{cuda_primary_current, StagingTimes, CHUNK_BYTES};
use crate::{Client, Error};

/// Page-locked buffers: one being filled, the rest with the copier.
const SLOTS: usize = 4;

/// Page-locked host memory from `cuMemHostAlloc` (portable: pinned for every context).
struct PinnedHost {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is plain host memory owned by this value alone.
unsafe impl Send for PinnedHost {}
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// The first `len` bytes (≤ the allocation's size).
    fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: at most the allocation's bytes, all initialized (zeroed at birth).
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.len)) }
    }
    /// The first `len` bytes (≤ the allocation's size), writable.
    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as `bytes`, through the unique borrow of the owner.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.len)) }
    }

    /// `len` zeroed page-locked bytes, if the driver gives them.
    fn new(len: usize) -> Option<Self> {
        use cudarc::driver::{result as cu, sys};
        cuda_primary_current()?;
        // SAFETY: a fresh allocation of `len` bytes; zeroed before any view of it is made.
        unsafe {
            let ptr = cu::malloc_host(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE).ok()?.cast::<u8>();
            std::ptr::write_bytes(ptr, 0, len);
            Some(Self { ptr, len })
        }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if cuda_primary_current().is_some() {
            // SAFETY: `ptr` came from `malloc_host` and is freed once, here. A failure leaks
            // the buffer (nothing else to do in a destructor).
            let _ = unsafe { cudarc::driver::result::free_host(self.ptr.cast()) };
        }
    }
}

/// The page-locked buffers not in use: taken to be filled, put back once copied.
struct FreeList(Mutex<Vec<PinnedHost>>, Condvar);

impl FreeList {
    fn put(&self, buf: PinnedHost) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
        self.1.notify_one();
    }

    /// A buffer, waiting for the copier to return one if all are out.
    fn take(&self) -> PinnedHost {
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(b) = free.pop() {
                return b;
            }
            free = self.1.wait(free).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The process's copier: page-locked buffers and the thread that copies them to the device.
pub(crate) struct Copier {
    jobs: Mutex<Sender<Job>>,
    free: Arc<FreeList>,
}

struct Job {
    dst: u64,
    buf: PinnedHost,
    len: usize,
    batch: Arc<BatchState>,
}

/// Chunks of a batch still with the copier, and its first error.
#[derive(Default)]
struct BatchState {
    out: Mutex<(usize, Option<String>)>,
    cv: Condvar,
}

impl BatchState {
    fn done(&self, err: Option<String>) {
        let mut g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = g.0.saturating_sub(1);
        if g.1.is_none() {
            g.1 = err;
        }
        self.cv.notify_all();
    }

    /// Waits until the copier has every chunk; the first error, taken.
    fn drain(&self) -> Option<String> {
        let mut g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        while g.0 > 0 {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.1.take()
    }
}

/// Whether `TANDEM_UPLOAD=client` asks for the client's own writes (the path wgpu takes; on
/// CUDA an A/B knob against the direct upload).
fn client_path() -> bool {
    std::env::var("TANDEM_UPLOAD").is_ok_and(|v| v == "client")
}

/// The copier for `client`'s device: CUDA only, `None` where page-locked memory or a thread
/// cannot be had (the caller falls back to the client's writes).
pub(crate) fn copier(client: &Client) -> Option<&'static Copier> {
    static COPIER: OnceLock<Option<Copier>> = OnceLock::new();
    if !client.name().contains("cuda") || client_path() {
        return None;
    }
    COPIER.get_or_init(Copier::new).as_ref()
}

impl Copier {
    fn new() -> Option<Self> {
        let bufs = (0..SLOTS).map(|_| PinnedHost::new(CHUNK_BYTES)).collect::<Option<Vec<_>>>()?;
        let free = Arc::new(FreeList(Mutex::new(bufs), Condvar::new()));
        let (tx, rx) = channel::<Job>();
        let back = free.clone();
        std::thread::Builder::new()
            .name("tandem-upload".into())
            .spawn(move || {
                let ctx = cuda_primary_current();
                for job in rx {
                    let err = match ctx {
                        // SAFETY: `dst .. dst + len` lies in the device buffer the batch holds a
                        // resource guard for; the source is `len` initialized bytes of the
                        // page-locked buffer this job owns. The copy is synchronous.
                        Some(()) => unsafe { cudarc::driver::result::memcpy_htod_sync(job.dst, job.buf.bytes(job.len)) }
                            .err()
                            .map(|e| format!("copying {} bytes of weights to the device: {e}", job.len)),
                        None => Some("the CUDA context is not available on the upload thread".into()),
                    };
                    back.put(job.buf);
                    job.batch.done(err);
                }
            })
            .ok()?;
        Some(Self { jobs: Mutex::new(tx), free })
    }

    /// A new batch of copies; syncs `client` first (see the module's ordering note).
    pub(crate) fn batch(&'static self, client: &Client) -> Result<Batch, Error> {
        cubecl::future::block_on(client.sync())?;
        Ok(Batch { copier: self, state: Arc::new(BatchState::default()), guards: Vec::new(), times: StagingTimes::default() })
    }
}

/// Copies of one load (or one buffer): the device buffers they go to stay in place until
/// [`Batch::finish`], which waits for them.
pub(crate) struct Batch {
    copier: &'static Copier,
    state: Arc<BatchState>,
    /// The device buffers' resources (`ManagedResource`s: each keeps its allocation in place).
    guards: Vec<Box<dyn Send>>,
    pub(crate) times: StagingTimes,
}

impl Batch {
    /// Writes `len` bytes at byte `at` of `handle` (a buffer of `total` bytes), chunk by chunk:
    /// `fill(offset, out)` writes the `out.len()` bytes that start `offset` bytes into the range.
    /// Chunks hold a whole number of `unit` bytes (at most [`CHUNK_BYTES`]; a larger unit is an
    /// error).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &mut self,
        client: &Client,
        handle: &Handle,
        at: usize,
        len: usize,
        total: usize,
        unit: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // The range is checked by the caller (`Staging::write`); chunks here are fixed buffers.
        if unit > CHUNK_BYTES {
            return Err(Error::Shape(format!("upload: units of {unit} bytes exceed a {CHUNK_BYTES}-byte page-locked chunk")));
        }
        let res = client.get_resource::<CudaServer>(handle.clone())?;
        let (base, size) = (res.resource().ptr, res.resource().size as usize);
        if size < total {
            return Err(Error::Shape(format!("upload: a device buffer of {size} bytes for {total}")));
        }
        self.guards.push(Box::new(res));
        let chunk = CHUNK_BYTES / unit * unit;
        let mut off = 0;
        while off < len {
            let n = chunk.min(len - off);
            let t0 = std::time::Instant::now();
            let mut buf = self.copier.free.take();
            let t1 = std::time::Instant::now();
            let filled = fill(off, buf.bytes_mut(n));
            let t2 = std::time::Instant::now();
            if let Err(e) = filled {
                self.copier.free.put(buf);
                return Err(e);
            }
            self.state.out.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
            let job = Job { dst: base + (at + off) as u64, buf, len: n, batch: self.state.clone() };
            if let Err(e) = self.copier.jobs.lock().unwrap_or_else(|e| e.into_inner()).send(job) {
                // The copier thread is gone: its buffer goes back, the batch fails.
                self.copier.free.put(e.0.buf);
                self.state.done(Some("the upload thread has stopped".into()));
                return Err(Error::Upload("the upload thread has stopped".into()));
            }
            let t3 = std::time::Instant::now();
            self.times.wait += (t1 - t0).as_secs_f64();
            self.times.fill += (t2 - t1).as_secs_f64();
            self.times.write += (t3 - t2).as_secs_f64();
            off += n;
        }
        Ok(())
    }

    /// Waits for every copy of the batch; the first failure as an error.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        let t0 = std::time::Instant::now();
        let err = self.state.drain();
        self.times.wait += t0.elapsed().as_secs_f64();
        self.guards.clear();
        err.map_or(Ok(()), |e| Err(Error::Upload(e)))
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // The device buffers must outlive the copies into them.
        let _ = self.state.drain();
    }
}
