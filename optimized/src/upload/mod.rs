//! Host → device weight staging: a tensor's stored bytes (memory-mapped F32 / F16 / BF16)
//! converted to the device's storage type over all cores, straight into the buffer the device
//! copy reads — no f32 copy of the weight, no second copy inside the client.
//!
//! Values are exactly those of `TensorSource::load` followed by
//! [`DeviceTensor::from_f32_as`](crate::DeviceTensor::from_f32_as): decoding to f32 is exact,
//! and the one rounding (to f16 / bf16, nearest even) is the same call.

use std::mem::MaybeUninit;
use std::sync::{Arc, Condvar, Mutex};

use cubecl::bytes::{AccessError, AccessPolicy, AllocationController, AllocationProperty, Bytes};
use cubecl::server::Handle;
use rayon::prelude::*;
use reference::weights::{RawDense, RawDtype};

use crate::{Client, Dtype, Error};

mod direct;
mod experts;

/// Bytes per host chunk handed to the device: under the client's pinned-staging limit (so each
/// chunk is copied into its pinned pool, reused, and sent by DMA) and under glibc's largest
/// mmap threshold (so a freed chunk's pages stay mapped).
pub const CHUNK_BYTES: usize = 16 << 20;
/// Chunks converted ahead of the device's copies before waiting for them (host memory
/// ~8 × 16 MiB).
const AHEAD: usize = 8;

/// Host buffers of one load, reused: a chunk handed to the device returns here once the client
/// is done with it, so converting the next chunk overlaps the copies and no page is touched
/// twice. On CUDA a load goes past the client instead ([`direct`]: page-locked chunks copied by
/// a thread of our own); the client's writes serve wgpu, and CUDA with `TANDEM_UPLOAD=client`.
/// What the client's path costs, measured on one H200 (file in the page cache):
/// TinyLlama F16 (2.3 GB) 1.6 s, 1.16 s of it waiting for the client's thread; Mistral F16
/// (14.8 GB) 7.2–8.3 s with heap buffers, 6.0 s with page-locked ones.
#[derive(Clone, Default)]
pub struct Staging {
    pool: Arc<(Mutex<Pool>, Condvar)>,
    times: Arc<Mutex<StagingTimes>>,
    /// CUDA: the load's copies past the client.
    direct: Option<Arc<Mutex<direct::Batch>>>,
}

/// Seconds a [`Staging`] spent, over a load: waiting for a free host buffer (or the device sync
/// that frees one), filling buffers (reading the mapped file and converting), and in the
/// client's `write` (which copies a buffer into its pinned pool before the DMA) or handing it to
/// the copier thread ([`direct`]; its final wait counts as waiting).
#[derive(Debug, Clone, Copy, Default)]
pub struct StagingTimes {
    pub wait: f64,
    pub fill: f64,
    pub write: f64,
}

#[derive(Default)]
struct Pool {
    free: Vec<Vec<u8>>,
    /// Chunks handed to the device and not yet returned.
    out: usize,
}

/// Makes device 0's primary context — the one cubecl's CUDA client runs in — current on this
/// thread (retaining it again only bumps its count); `None` where there is none.
pub(crate) fn cuda_primary_current() -> Option<()> {
    use cudarc::driver::result as cu;
    // SAFETY: plain driver calls on a device handle the driver returned.
    unsafe {
        let dev = cu::device::get(0).ok()?;
        let ctx = cu::primary_ctx::retain(dev).ok()?;
        cu::ctx::set_current(ctx).ok()
    }
}

/// A host buffer as cubecl [`Bytes`] of its first `len` bytes without copying it
/// (`Bytes::from_bytes_vec` copies any `Vec<u8>` to realign it), returned to its [`Staging`]
/// pool when the client drops it.
struct Owned {
    buf: Vec<u8>,
    len: usize,
    pool: Option<Arc<(Mutex<Pool>, Condvar)>>,
}

impl AllocationController for Owned {
    fn alloc_align(&self) -> usize {
        // The alignment the pointer actually has (the client only reads through it).
        1 << (self.buf.as_ptr() as usize).trailing_zeros().min(12)
    }
    fn property(&self) -> AllocationProperty {
        AllocationProperty::Native
    }
    unsafe fn memory_mut(&mut self, _policy: AccessPolicy) -> Result<&mut [MaybeUninit<u8>], AccessError> {
        let bytes = &mut self.buf[..self.len];
        // SAFETY: initialized u8s viewed as MaybeUninit<u8> (same layout); the caller only
        // writes initialized data (the trait's contract).
        Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<MaybeUninit<u8>>(), bytes.len()) })
    }
    fn memory(&self, _policy: AccessPolicy) -> Result<&[MaybeUninit<u8>], AccessError> {
        // SAFETY: `len` ≤ the buffer's capacity, all of it initialized; read-only view.
        Ok(unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<MaybeUninit<u8>>(), self.len) })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let buf = std::mem::take(&mut self.buf);
            let (lock, cv) = &*pool;
            let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
            p.free.push(buf);
            p.out = p.out.saturating_sub(1);
            cv.notify_one();
        }
    }
}

/// `buf` as [`Bytes`] without a copy.
pub fn bytes_of(buf: Vec<u8>) -> Bytes {
    let len = buf.len();
    // SAFETY: every one of the `len` bytes of the Vec is initialized.
    unsafe { Bytes::from_controller(Box::new(Owned { buf, len, pool: None }), len) }
}

impl Staging {
    /// Staging for a load through `client`: the copier past the client on CUDA ([`direct`];
    /// syncs the client first), heap buffers and the client's writes otherwise.
    pub fn for_client(client: &Client) -> Result<Self, Error> {
        let direct = match direct::copier(client) {
            Some(c) => Some(Arc::new(Mutex::new(c.batch(client)?))),
            None => None,
        };
        Ok(Self { direct, ..Self::default() })
    }

    /// Where this staging's time went so far.
    pub fn times(&self) -> StagingTimes {
        match &self.direct {
            Some(d) => d.lock().unwrap_or_else(|e| e.into_inner()).times,
            None => *self.times.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Waits for every copy handed out so far (the weights are then on the device, as far as
    /// any later launch can see); a copy's failure as an error. The client's writes are waited
    /// for by a client sync, which the caller makes.
    pub fn finish(&self) -> Result<(), Error> {
        match &self.direct {
            Some(d) => d.lock().unwrap_or_else(|e| e.into_inner()).finish(),
            None => Ok(()),
        }
    }

    /// A buffer of `len` bytes (contents unspecified but initialized). While [`AHEAD`] chunks
    /// are still with the client it waits for one to come back, and if none does (a backend
    /// that holds written bytes until its queue is flushed) syncs the device, which releases
    /// them — never blocking on the pool alone.
    fn take(&self, client: &Client, len: usize) -> Result<Vec<u8>, Error> {
        let (lock, cv) = &*self.pool;
        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
        if p.free.is_empty() && p.out >= AHEAD {
            p = cv.wait_timeout(p, std::time::Duration::from_millis(20)).unwrap_or_else(|e| e.into_inner()).0;
            if p.free.is_empty() {
                drop(p);
                cubecl::future::block_on(client.sync())?;
                p = lock.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
        p.out += 1;
        let buf = p.free.pop();
        drop(p);
        Ok(match buf {
            Some(b) if b.len() >= len => b,
            _ => vec![0; len.max(CHUNK_BYTES)],
        })
    }

    /// Writes `len` bytes at byte `at` of `handle` (a buffer of `total` bytes), chunk by chunk:
    /// `fill(offset, out)` writes the `out.len()` bytes that start `offset` bytes into the range.
    /// Chunks hold a whole number of `unit` bytes (≤ [`CHUNK_BYTES`] unless one unit is more).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        client: &Client,
        handle: &Handle,
        at: usize,
        len: usize,
        total: usize,
        unit: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if at + len > total || unit == 0 {
            return Err(Error::Shape(format!("upload: bytes {at}..{} of a buffer of {total} in units of {unit}", at + len)));
        }
        if let Some(d) = &self.direct {
            return d.lock().unwrap_or_else(|e| e.into_inner()).write(client, handle, at, len, total, unit, fill);
        }
        let chunk = (CHUNK_BYTES / unit).max(1) * unit;
        let mut off = 0;
        while off < len {
            let n = chunk.min(len - off);
            let t0 = std::time::Instant::now();
            let mut buf = self.take(client, n)?;
            let t1 = std::time::Instant::now();
            let filled = fill(off, &mut buf[..n]);
            let t2 = std::time::Instant::now();
            if let Err(e) = filled {
                let (lock, _) = &*self.pool;
                lock.lock().unwrap_or_else(|e| e.into_inner()).out -= 1;
                return Err(e);
            }
            let start = at + off;
            let dest = handle.clone().offset_start(start as u64).offset_end((total - start - n) as u64);
            // SAFETY: all `n` ≤ capacity bytes of the buffer are initialized (zeroed at birth).
            let bytes = unsafe { Bytes::from_controller(Box::new(Owned { buf, len: n, pool: Some(self.pool.clone()) }), n) };
            client.write(&dest, bytes);
            let t3 = std::time::Instant::now();
            let mut t = self.times.lock().unwrap_or_else(|e| e.into_inner());
            t.wait += (t1 - t0).as_secs_f64();
            t.fill += (t2 - t1).as_secs_f64();
            t.write += (t3 - t2).as_secs_f64();
            drop(t);
            off += n;
        }
        Ok(())
    }
}

impl Staging {
    /// `part` (`len` bytes once converted to `dtype`) into bytes `at ..` of `handle`, a buffer
    /// of `total` bytes: chunk by chunk, converted in parallel.
    #[allow(clippy::too_many_arguments)]
    pub fn write_part(
        &self,
        client: &Client,
        handle: &Handle,
        at: usize,
        len: usize,
        total: usize,
        dtype: Dtype,
        part: &Part<'_>,
    ) -> Result<(), Error> {
        let (raw, ds) = (part.raw(), dtype.size());
        // Chunks of whole storage units (ggml blocks).
        self.write(client, handle, at, len, total, ds * raw.dtype.unit().0, |off, out| convert_range(raw, off / ds, dtype, out))
    }

    /// A new device buffer holding `bytes`, zero-padded to whole u32 words.
    pub fn upload_words(&self, client: &Client, bytes: &[u8]) -> Result<Handle, Error> {
        let total = bytes.len().next_multiple_of(4).max(4);
        let handle = client.empty(total);
        self.write(client, &handle, 0, total, total, 4, |off, out| {
            let src = bytes.get(off..).unwrap_or(&[]);
            let n = src.len().min(out.len());
            out[..n].copy_from_slice(&src[..n]);
            out[n..].fill(0);
            Ok(())
        })?;
        Ok(handle)
    }
}

/// Elements per parallel chunk (~128–256 KiB of output).
const CHUNK: usize = 1 << 16;

fn encode(dtype: Dtype, x: f32, out: &mut [u8]) {
    match dtype {
        Dtype::F32 => out.copy_from_slice(&x.to_le_bytes()),
        Dtype::F16 => out.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
        Dtype::BF16 => out.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
        Dtype::E4M3 => out[0] = reference::quant::fp8::encode(x),
    }
}

/// Whether `src` stored as `from` is already `to`'s bytes.
fn same(from: RawDtype, to: Dtype) -> bool {
    matches!((from, to), (RawDtype::F32, Dtype::F32) | (RawDtype::F16, Dtype::F16) | (RawDtype::BF16, Dtype::BF16))
}

/// Converts `src` (whole units of `src.dtype`: values, or ggml blocks) into `out` as `dtype`, in
/// parallel; `out.len()` must be the value count times `dtype.size()`.
pub fn convert_into(src: RawDense<'_>, dtype: Dtype, out: &mut [u8]) -> Result<(), Error> {
    let ((ue, ub), di) = (src.dtype.unit(), dtype.size());
    if !src.bytes.len().is_multiple_of(ub) || out.len() != src.bytes.len() / ub * ue * di {
        return Err(Error::Shape(format!("convert: {} bytes of {:?} into {} bytes of {}", src.bytes.len(), src.dtype, out.len(), dtype.name())));
    }
    if same(src.dtype, dtype) {
        out.par_chunks_mut(CHUNK * di).zip(src.bytes.par_chunks(CHUNK * ub)).for_each(|(o, s)| o.copy_from_slice(s));
        return Ok(());
    }
    let decode: fn(&[u8]) -> f32 = match src.dtype {
        RawDtype::F32 => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        RawDtype::F16 => |b| half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
        RawDtype::BF16 => |b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        RawDtype::Block(ty) => {
            // CHUNK values are whole blocks: each parallel chunk decodes its blocks to f32 (the
            // reference's own decoder), then rounds them once.
            out.par_chunks_mut(CHUNK * di).zip(src.bytes.par_chunks(CHUNK / ue * ub)).for_each(|(o, s)| {
                let mut vals = Vec::with_capacity(CHUNK);
                reference::dequant::dequantize_into(ty, s, &mut vals);
                for (o, &x) in o.chunks_exact_mut(di).zip(&vals) {
                    encode(dtype, x, o);
                }
            });
            return Ok(());
        }
    };
    out.par_chunks_mut(CHUNK * di).zip(src.bytes.par_chunks(CHUNK * ub)).for_each(|(o, s)| {
        for (o, s) in o.chunks_exact_mut(di).zip(s.chunks_exact(ub)) {
            encode(dtype, decode(s), o);
        }
    });
    Ok(())
}

/// A part of a tensor being uploaded: the source's stored bytes, or f32 values it decoded.
pub enum Part<'a> {
    Raw(RawDense<'a>),
    Values(Vec<f32>),
}

impl Part<'_> {
    pub fn raw(&self) -> RawDense<'_> {
        match self {
            Part::Raw(r) => *r,
            Part::Values(v) => {
                use cubecl::CubeElement;
                RawDense { dtype: RawDtype::F32, bytes: f32::as_bytes(v) }
            }
        }
    }
}

/// The bytes of values `first .. first + n` of `src` (whole storage units).
fn value_bytes<'a>(src: RawDense<'a>, first: usize, n: usize) -> Result<&'a [u8], Error> {
    let d = src.dtype;
    d.bytes_for(first).zip(d.bytes_for(first + n)).and_then(|(a, b)| src.bytes.get(a..b)).ok_or_else(|| {
        Error::Shape(format!("upload: values {first}..{} of a tensor of {} bytes of {d:?} (ranges are whole units)", first + n, src.bytes.len()))
    })
}

/// Elements `first .. first + out.len() / dtype.size()` of `src`, converted into `out`.
pub fn convert_range(src: RawDense<'_>, first: usize, dtype: Dtype, out: &mut [u8]) -> Result<(), Error> {
    let bytes = value_bytes(src, first, out.len() / dtype.size())?;
    convert_into(RawDense { dtype: src.dtype, bytes }, dtype, out)
}

/// Rows `first .. first + rows` of `src` (rows of `n` elements).
pub fn rows(src: RawDense<'_>, n: usize, first: usize, rows: usize) -> Result<RawDense<'_>, Error> {
    Ok(RawDense { dtype: src.dtype, bytes: value_bytes(src, first * n, rows * n)? })
}

/// Converts one of two `[rows, n]` tensors (`which` = 0 or 1) into the `[2·rows, n]` buffer
/// whose rows interleave them (row 2j + `which` = `src` row j), in parallel over row pairs —
/// one call per tensor, so the caller's source is borrowed for one at a time.
pub fn interleave_into(which: usize, src: RawDense<'_>, rows: usize, dtype: Dtype, out: &mut [u8]) -> Result<(), Error> {
    let (ue, ub) = src.dtype.unit();
    // A row's stored bytes, then its values.
    let rb = src.bytes.len().checked_div(rows).unwrap_or(0);
    let n = rb / ub * ue;
    if rows == 0 || rb * rows != src.bytes.len() || !rb.is_multiple_of(ub) || out.len() != 2 * rows * n * dtype.size() || which > 1 {
        return Err(Error::Shape(format!("interleave: {} bytes of {:?} in {rows} rows into {} bytes", src.bytes.len(), src.dtype, out.len())));
    }
    let row_out = n * dtype.size();
    out.par_chunks_mut(2 * row_out).zip(src.bytes.par_chunks(rb)).try_for_each(|(pair, row)| {
        let half = &mut pair[which * row_out..(which + 1) * row_out];
        convert_into(RawDense { dtype: src.dtype, bytes: row }, dtype, half)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use reference::dequant::GgmlType;

    fn raw(dtype: RawDtype, xs: &[f32]) -> Vec<u8> {
        reference::dequant::quantize(dtype.ggml(), xs)
    }

    const TYPES: [RawDtype; 9] = [
        RawDtype::F32,
        RawDtype::F16,
        RawDtype::BF16,
        RawDtype::Block(GgmlType::Q8_0),
        RawDtype::Block(GgmlType::Q4_0),
        RawDtype::Block(GgmlType::Q4_1),
        RawDtype::Block(GgmlType::Q4K),
        RawDtype::Block(GgmlType::Q5K),
        RawDtype::Block(GgmlType::Q6K),
    ];

    /// Values across two chunk boundaries (whole blocks of 256), with subnormals, infinities
    /// (plain types only) and values that round differently.
    fn values(blocks: bool) -> Vec<f32> {
        (0..(CHUNK * 2 + 256))
            .map(|i| match i % 7 {
                0 => (i as f32 * 0.37).sin() * 1e3,
                1 => 1.0 + (i as f32) * 1e-4,
                2 => 6.1e-5 * (i % 13) as f32,
                3 if blocks => 7.5,
                3 => f32::INFINITY,
                4 => -(i as f32) * 3.3,
                5 => 65504.0,
                _ => 1.0 / (1 + i) as f32,
            })
            .collect()
    }

    /// Every (stored, device) pair gives the bytes of the reference's decode to f32 (what
    /// `load` returns) then one rounding, across chunk boundaries; ggml blocks included.
    #[test]
    fn convert_matches_decode_then_round() {
        for from in TYPES {
            let xs = values(matches!(from, RawDtype::Block(_)));
            let bytes = raw(from, &xs);
            let decoded = reference::dequant::dequantize_par(from.ggml(), &bytes);
            assert_eq!(decoded.len(), xs.len());
            for to in [Dtype::F32, Dtype::F16, Dtype::BF16] {
                let mut out = vec![0u8; xs.len() * to.size()];
                convert_into(RawDense { dtype: from, bytes: &bytes }, to, &mut out).unwrap();
                let mut want = vec![0u8; xs.len() * to.size()];
                for (o, &x) in want.chunks_exact_mut(to.size()).zip(&decoded) {
                    encode(to, x, o);
                }
                assert!(out == want, "{from:?} → {}", to.name());
                // A range of whole units from the middle; a range off the block grid is refused.
                let (first, n) = (CHUNK - 256, 512);
                let mut part = vec![0u8; n * to.size()];
                convert_range(RawDense { dtype: from, bytes: &bytes }, first, to, &mut part).unwrap();
                assert!(part == want[first * to.size()..(first + n) * to.size()], "{from:?} range");
                let off = convert_range(RawDense { dtype: from, bytes: &bytes }, first + 3, to, &mut part);
                assert_eq!(off.is_err(), matches!(from, RawDtype::Block(_)), "{from:?} off the grid");
            }
        }
    }

    /// Two tensors' rows interleaved, for every stored type (rows of 256 values: whole blocks).
    #[test]
    fn interleave_blocks() {
        let (nrows, n) = (5, 256);
        for from in TYPES {
            let a: Vec<f32> = (0..nrows * n).map(|i| (i as f32 * 0.7).sin()).collect();
            let b: Vec<f32> = (0..nrows * n).map(|i| 2.0 + (i as f32 * 0.3).cos()).collect();
            let (ra, rb) = (raw(from, &a), raw(from, &b));
            let mut out = vec![0u8; 2 * nrows * n * 4];
            interleave_into(0, RawDense { dtype: from, bytes: &ra }, nrows, Dtype::F32, &mut out).unwrap();
            interleave_into(1, RawDense { dtype: from, bytes: &rb }, nrows, Dtype::F32, &mut out).unwrap();
            let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let (da, db) = (reference::dequant::dequantize_par(from.ggml(), &ra), reference::dequant::dequantize_par(from.ggml(), &rb));
            for j in 0..nrows {
                assert_eq!(got[2 * j * n..(2 * j + 1) * n], da[j * n..(j + 1) * n], "{from:?}");
                assert_eq!(got[(2 * j + 1) * n..(2 * j + 2) * n], db[j * n..(j + 1) * n], "{from:?}");
            }
            let r = rows(RawDense { dtype: from, bytes: &ra }, n, 2, 2).unwrap();
            assert_eq!(reference::dequant::dequantize_par(from.ggml(), r.bytes), da[2 * n..4 * n], "{from:?} rows");
        }
    }

    #[test]
    fn interleave_puts_rows_in_pairs() {
        let (rows, n) = (5, 3);
        let a: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..rows * n).map(|i| 100.0 + i as f32).collect();
        let mut out = vec![0u8; 2 * rows * n * 4];
        interleave_into(0, RawDense { dtype: RawDtype::F32, bytes: &raw(RawDtype::F32, &a) }, rows, Dtype::F32, &mut out).unwrap();
        interleave_into(1, RawDense { dtype: RawDtype::F32, bytes: &raw(RawDtype::F32, &b) }, rows, Dtype::F32, &mut out).unwrap();
        let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        for j in 0..rows {
            assert_eq!(got[2 * j * n..(2 * j + 1) * n], a[j * n..(j + 1) * n]);
            assert_eq!(got[(2 * j + 1) * n..(2 * j + 2) * n], b[j * n..(j + 1) * n]);
        }
    }

    #[test]
    fn sizes_are_checked() {
        let bytes = [0u8; 6];
        let mut out = [0u8; 4];
        assert!(convert_into(RawDense { dtype: RawDtype::F16, bytes: &bytes }, Dtype::BF16, &mut out).is_err());
        assert!(interleave_into(2, RawDense { dtype: RawDtype::F16, bytes: &bytes }, 3, Dtype::BF16, &mut [0u8; 12]).is_err());
    }
}
