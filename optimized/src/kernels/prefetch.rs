//! L2 prefetch: a hint that pulls the first bytes of a buffer (a weight the decode step reads
//! next) from DRAM into the L2 cache while latency-bound kernels leave the memory system idle
//! (RoPE + KV write and flash decode between the q|k|v and Wo gemvs). It has no output: the
//! kernels that read the buffer afterwards compute the same values with or without it, and
//! conformance checks those (the model cases run with it on CUDA).
//!
//! Versions (CUDA devices with TMA, sm_90+; elsewhere the launcher refuses it and the model
//! does not ask):
//! - v1: each unit walks its chunk a 128-byte line at a time with `prefetch.global.L2`.
//! - v2: each unit issues one `cp.async.bulk.prefetch.L2.global` for its whole chunk (one
//!   instruction per chunk; the copy engine walks the lines).

use cubecl::features::Tma;
use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::{Client, DeviceTensor, Error};

/// Units per cube.
const BLOCK: u32 = 32;

/// Which kernel issues the prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `prefetch.global.L2` per 128-byte line.
    Lines,
    /// `cp.async.bulk.prefetch.L2.global` per chunk.
    Bulk,
}

/// v1: unit `i` prefetches words `[i·chunk, (i+1)·chunk)` (clipped to `words`), one 128-byte
/// line (32 words) at a time.
#[cube(launch)]
pub fn l2_prefetch_v1(w: &[u32], words: u32, #[comptime] chunk: usize) {
    let start = ABSOLUTE_POS * chunk;
    let n = words as usize;
    let end = if start + chunk < n { start + chunk } else { n };
    let mut i = start;
    while i < end {
        let p = unsafe { w.slice(i, i + 1).as_ptr_unchecked() };
        gpu_asm!("prefetch.global.L2 [{}];", mem_in(_) p, options(explicit_mem));
        i += 32;
    }
}

/// v2: unit `i` prefetches words `[i·chunk, (i+1)·chunk)` (clipped to `words`, the byte count
/// rounded down to a multiple of 16 as the instruction requires) with one bulk prefetch.
#[cube(launch)]
pub fn l2_prefetch_v2(w: &[u32], words: u32, #[comptime] chunk: usize) {
    let start = ABSOLUTE_POS * chunk;
    let n = words as usize;
    if start < n {
        let end = if start + chunk < n { start + chunk } else { n };
        let bytes = (((end - start) * 4) as u32) & 0xFFFF_FFF0u32;
        if bytes > 0 {
            let p = unsafe { w.slice(start, end).as_ptr_unchecked() };
            gpu_asm!("cp.async.bulk.prefetch.L2.global [{}], {};", mem_in(_) p, in(_) bytes, options(explicit_mem));
        }
    }
}

/// Whether the device takes both versions (CUDA with TMA: sm_90 and later).
pub fn supported(client: &Client) -> bool {
    client.properties().features.tma.contains(Tma::Base)
}

/// Prefetch the first `bytes` of `t`'s buffer (all of it when `bytes` is larger) into L2,
/// `chunk_bytes` per unit (a multiple of 128).
pub fn l2_prefetch(client: &Client, t: &DeviceTensor, bytes: usize, chunk_bytes: usize, version: Version) -> Result<(), Error> {
    if !supported(client) {
        return Err(Error::Unsupported("L2 prefetch needs a CUDA device with TMA (sm_90+)".into()));
    }
    if chunk_bytes == 0 || chunk_bytes % 128 != 0 {
        return Err(Error::Shape(format!("L2 prefetch: chunk of {chunk_bytes} bytes, expected a positive multiple of 128")));
    }
    let total = t.numel() * t.dtype.size();
    let words = bytes.min(total) / 4;
    if words == 0 {
        return Ok(());
    }
    let chunk = chunk_bytes / 4;
    let units = words.div_ceil(chunk);
    let too_big = || Error::Shape(format!("L2 prefetch: {words} words or {units} units exceed u32"));
    let words_u32 = u32::try_from(words).map_err(|_| too_big())?;
    let cubes = u32::try_from(units.div_ceil(BLOCK as usize)).map_err(|_| too_big())?;
    let count = CubeCountSelection::new(client, cubes).cube_count();
    let arg = unsafe { cubecl::prelude::BufferArg::from_raw_parts(t.handle.clone(), words) };
    match version {
        Version::Lines => l2_prefetch_v1::launch(client, count, CubeDim::new_1d(BLOCK), arg, words_u32, chunk),
        Version::Bulk => l2_prefetch_v2::launch(client, count, CubeDim::new_1d(BLOCK), arg, words_u32, chunk),
    }
    Ok(())
}

/// What a decode step prefetches into L2 while attention runs: the whole of the next weight
/// (Wo) and the first `extra` bytes of the one after it (gate|up), `chunk` bytes per unit.
/// Parsed from `off` (none) or `VERSION[,EXTRA_MB[,CHUNK_KB]]` with VERSION `bulk` or `lines`
/// (the `TANDEM_L2_PREFETCH` knob at load).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Plan {
    pub version: Version,
    pub extra: usize,
    pub chunk: usize,
}

impl L2Plan {
    /// Parse the knob's value (`off` → `None`).
    pub fn parse(s: &str) -> Result<Option<Self>, Error> {
        let bad = |why: &str| Error::Shape(format!("TANDEM_L2_PREFETCH={s}: {why} (expected off or bulk|lines[,EXTRA_MB[,CHUNK_KB]])"));
        let mut it = s.split(',').map(str::trim);
        let version = match it.next() {
            Some("off") => return Ok(None),
            Some("bulk") => Version::Bulk,
            Some("lines") => Version::Lines,
            _ => return Err(bad("unknown version")),
        };
        let mut num = |what: &str, default: usize| -> Result<usize, Error> {
            it.next().map_or(Ok(default), |v| v.parse::<usize>().map_err(|_| bad(&format!("{what} `{v}` is not a whole number"))))
        };
        let extra = num("EXTRA_MB", 0)? << 20;
        let chunk = num("CHUNK_KB", 16)? << 10;
        if chunk == 0 {
            return Err(bad("CHUNK_KB must be positive"));
        }
        Ok(Some(L2Plan { version, extra, chunk }))
    }

    /// Prefetch every buffer of `whole`, then up to `extra` bytes of `part`'s buffers in order.
    pub fn issue(&self, client: &Client, whole: &[&DeviceTensor], part: &[&DeviceTensor]) -> Result<(), Error> {
        for t in whole {
            l2_prefetch(client, t, usize::MAX, self.chunk, self.version)?;
        }
        let mut left = self.extra;
        for t in part {
            if left == 0 {
                break;
            }
            let n = (t.numel() * t.dtype.size()).min(left);
            l2_prefetch(client, t, n, self.chunk, self.version)?;
            left -= n;
        }
        Ok(())
    }
}
