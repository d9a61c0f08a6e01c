//! Recording decode graphs: ahead of the requests ([`prepare`]) and by a step that meets a
//! key first (`try_step`): the input buffers ([`step_bufs`]), the warm-up run and the capture
//! with the temporaries leased from the client's arena ([`capture`]; the parent module's
//! notes say why).

use engine::runner::KvLayout;

use super::inputs::width;
use super::{GraphStep, Inputs, Key, LocalBufs, Recorded, StepBufs, BUCKETS};
use crate::kernels::{advance, argmax, seeded};
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Error};

/// Records, ahead of the requests, the decode steps of up to `rows` sequences — every bucket
/// up to `rows`'s, the largest first — whose lengths stay within `max_len` tokens (one
/// recording per table width they will pass through, the widest first), drawn greedily or
/// sampled — so that no step pays a recording (a warm-up run, the capture and its
/// instantiation: milliseconds) in the middle of decoding. Returns how many it recorded.
///
/// The input buffers of every recording it makes, and of the other draw kind's (kept for a
/// later call), are allocated before its first capture: a capture guards the pages it
/// touched, so a buffer allocated after it starts a page of its own (see the module's notes).
pub(crate) fn prepare<R: GraphStep>(r: &mut R, rows: usize, max_len: usize, greedy: bool) -> Result<usize, Error> {
    // Past the largest bucket, every bucket (steps of more rows run eagerly).
    let Some(&top) = BUCKETS.iter().find(|&&b| b >= rows.max(1)).or(BUCKETS.last()) else { return Ok(0) };
    if !r.graphs().enabled() {
        return Ok(0);
    }
    let layout = r.layout();
    let mut widths: Vec<usize> = (1..=max_len.max(1).div_ceil(layout.block_size)).map(|l| width(layout, l)).collect();
    widths.dedup();
    let max_rows = r.max_rows();
    let keys = |greedy: bool| -> Vec<Key> {
        let buckets = BUCKETS.iter().rev().filter(|&&b| b <= top && b <= max_rows);
        buckets.flat_map(|&bucket| widths.iter().rev().map(move |&width| Key { bucket, width, greedy, masked: false })).collect()
    };
    let (mine, other) = (keys(greedy), keys(!greedy));
    let (c, scratch) = (r.client().clone(), r.scratch_block());
    for &key in mine.iter().chain(&other) {
        let g = r.graphs();
        if !g.map.contains_key(&key) && !g.spare.contains_key(&key) {
            let bufs = step_bufs(&c, layout, &padded(key, scratch, layout))?;
            r.graphs().spare.insert(key, bufs);
        }
    }
    let mut made = 0;
    for key in mine {
        if r.graphs().map.contains_key(&key) {
            continue;
        }
        let Some(bufs) = r.graphs().spare.remove(&key) else { continue };
        if capture(r, &padded(key, scratch, layout), bufs)?.is_none() || !r.graphs().map.contains_key(&key) {
            // Refused by the backend (remembered): steps run eagerly.
            break;
        }
        made += 1;
    }
    r.graphs().recorded_prepared += made as u64;
    Ok(made)
}

/// The inputs of a prepared recording of `key`: padding rows only.
fn padded(key: Key, scratch: u32, layout: KvLayout) -> Inputs {
    let mut x = Inputs::empty(key, 0, layout.local.map(|l| l.num_blocks as u32));
    x.pad(scratch, layout.block_size);
    x
}

/// The launches of a recorded step: the runner's logits, then argmax or the seeded draw — or,
/// for a `masked` key, the logits alone, returned.
fn launches<R: GraphStep>(r: &R, b: &StepBufs, key: Key, advance: bool) -> Result<Option<DeviceTensor>, Error> {
    let (rows, greedy) = (key.bucket, key.greedy);
    let logits = r.logits(b, rows)?;
    if key.masked {
        return Ok(Some(logits));
    }
    if greedy {
        argmax::argmax_into(r.client(), &logits, &b.ids)?;
    } else {
        seeded::seeded_into(r.client(), &logits, &b.params, None, &b.ids, b.draw.as_ref())?;
    }
    if advance {
        advance::advance(r.client(), &b.positions, &b.slots, &b.tables.lens_dev, &b.params)?;
        if let Some(l) = &b.local {
            advance::advance(r.client(), &l.positions, &l.slots, &l.tables.lens_dev, &l.params)?;
        }
    }
    Ok(None)
}

/// The input buffers of a recording of `x`'s key, holding `x`'s inputs.
pub(super) fn step_bufs(c: &Client, layout: KvLayout, x: &Inputs) -> Result<StepBufs, Error> {
    let b = x.key.bucket;
    let rows: Vec<&[u32]> = x.tables.iter().map(Vec::as_slice).collect();
    let mut tables = BlockTables::upload_padded(c, &rows, &x.lens, layout.block_size, layout.num_blocks + 1, x.key.width)?;
    tables.device_lens = true;
    let local = match (&x.local, layout.local) {
        (Some(l), Some(lk)) => {
            let rows: Vec<&[u32]> = l.tables.iter().map(Vec::as_slice).collect();
            let mut tables = BlockTables::upload_padded(c, &rows, &x.lens, layout.block_size, lk.num_blocks + 1, x.key.width)?;
            tables.device_lens = true;
            Some(LocalBufs {
                slots: DeviceTensor::from_u32(c, &l.slots, &[b])?,
                tables,
                positions: DeviceTensor::from_u32(c, &x.positions, &[b])?,
                params: DeviceTensor::from_u32(c, &x.params, &[b, seeded::PARAMS])?,
            })
        }
        _ => None,
    };
    Ok(StepBufs {
        ids: DeviceTensor::from_u32(c, &x.ids, &[b])?,
        positions: DeviceTensor::from_u32(c, &x.positions, &[b])?,
        slots: DeviceTensor::from_u32(c, &x.slots, &[b])?,
        tables,
        params: DeviceTensor::from_u32(c, &x.params, &[b, seeded::PARAMS])?,
        draw: if x.key.greedy { None } else { seeded::split_scratch(c, b)? },
        local,
    })
}

/// Record the step of `x` over its input buffers `bufs` (holding `x`'s inputs); returns its
/// (warm-up) output — the drawn ids, or a `masked` key's logits `[bucket, V]` —, or `None`
/// when the backend refused before anything ran.
pub(super) fn capture<R: GraphStep>(r: &mut R, x: &Inputs, bufs: StepBufs) -> Result<Option<DeviceTensor>, Error> {
    let c = r.client().clone();
    let ids = bufs.ids.clone();
    if let Err(e) = c.graph_prepare() {
        r.graphs().refused = Some(format!("graph_prepare: {e}"));
        return Ok(None);
    }
    // A masked recording ends at the logits: the eager draw after it reads the step's inputs.
    let advance = c.kernels().advance_device && !x.key.masked;
    // The warm-up's and the recording's temporaries from the arena (see the module's notes);
    // its input buffers (`bufs`) are the recording's own. A masked recording keeps its logits
    // without their lease (`Recorded::logits`): other recordings may lease that slot again.
    let _arena = c.arena().on();
    let out = match launches(r, &bufs, x.key, advance) {
        Ok(logits) => logits.unwrap_or(ids),
        Err(e) => {
            let _ = c.stop_capture();
            return Err(e);
        }
    };
    if let Err(e) = c.start_capture() {
        let _ = c.stop_capture();
        r.graphs().refused = Some(format!("start_capture: {e}"));
        return Ok(Some(out));
    }
    let recorded = launches(r, &bufs, x.key, advance);
    match (recorded, c.stop_capture()) {
        (Ok(logits), Ok(graph)) => {
            let logits = logits.map(|l| l.unleased());
            let mut rec = Recorded { graph, bufs, advance, logits };
            // The warm-up ran the advance.
            rec.ran(x);
            r.graphs().map.insert(x.key, rec);
        }
        (Err(e), _) => r.graphs().refused = Some(format!("recording a decode step: {e}")),
        (_, Err(e)) => r.graphs().refused = Some(format!("stop_capture: {e}")),
    }
    Ok(Some(out))
}
