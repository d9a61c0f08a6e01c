//! `flash_attn(...)`: flash attention v2 over a paged KV cache
//! (`optimized::kernels::{flash_prefill, flash_decode}`) vs the naive
//! `reference::ops::attention::attention_sinks` on each sequence's contiguous K/V.
//!
//! The pools have 3 spare blocks and start as NaN, so a kernel that reads a block the table
//! does not name, or a row past a sequence's length, fails. Block ids come from the pool in
//! order or shuffled (non-contiguous, out of order). K/V are written through the block table
//! with `kv_write_paged` in two pieces (positions `0..S/2`, then `S/2..S`). Output is NaN-poisoned.
//!
//! Pools of f16 (`kv=f16`, the production choice for 16-bit models) hold K and V rounded to
//! nearest even as written, pools of E4M3 (`kv=e4m3`) their nearest codes; the reference gets
//! the same rounded K and V, so the tolerance is the kernel's own arithmetic, as for f32 pools.

use ndarray::Array3;
use optimized::kernels::attention::{flash_decode_tuned, DecodeVersion, PrefillVersion, ScoreStep};
use optimized::kernels::matmul::tc::TcMode;
use optimized::kernels::{flash_prefill, kv_write_paged, Masking};
use optimized::kv_cache::BlockTables;
use optimized::{Client, DeviceTensor};

use super::super::embedding::skip_unsupported;
use super::super::outcome_or_skip;
use crate::{rand_vec, Case, Dtype, Metrics, Op, Outcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// One sequence; the last `t` of its positions are queries.
    Prefill,
    /// One query per sequence, at its last position.
    Decode,
}

#[derive(Debug, Clone)]
pub struct FlashCase {
    pub phase: Phase,
    pub h: usize,
    pub kv: usize,
    pub d: usize,
    /// Positions per sequence (Prefill: one entry).
    pub lens: Vec<usize>,
    /// Prefill: queries (≤ lens[0]); ignored for Decode.
    pub t: usize,
    pub block_size: usize,
    pub window: Option<usize>,
    pub sinks: bool,
    pub shuffled: bool,
    /// Decode kernel version (v2: two launches; v3: one, last cube combines).
    pub version: DecodeVersion,
    /// Decode score step (a lane group per key, or whole keys per unit).
    pub score: ScoreStep,
    /// Prefill kernel version (v2 f32; v3 on the tensor cores, or their emulation).
    pub prefill: PrefillVersion,
    /// The pools' element type (f32 or f16).
    pub kv_dtype: optimized::Dtype,
    /// The output's type: f32, or the 16-bit type the o projection reads (each value rounded
    /// once; compared with the reference rounded the same way).
    pub out_dtype: optimized::Dtype,
}

/// The largest prefill (queries × keys × heads) the grid and proptests give v3's emulation: it
/// runs an MMA through shared memory per step, minutes per case on lavapipe past this.
pub const EMU_MAX_WORK: usize = 40_000;

/// Spare (NaN) blocks in the pool.
const SPARE: usize = 3;

impl FlashCase {
    /// Each sequence's block ids: consecutive slices of the pool's ids, in order or shuffled.
    fn tables(&self) -> (Vec<Vec<u32>>, usize) {
        let bs = self.block_size;
        let need: usize = self.lens.iter().map(|l| l.div_ceil(bs)).sum();
        let n = need + SPARE;
        let mut order: Vec<u32> = (0..n as u32).collect();
        if self.shuffled {
            order.sort_by_key(|&i| reference::synthetic::unit(5, 55, i).to_bits());
        }
        let mut it = order.into_iter();
        let tabs = self.lens.iter().map(|l| it.by_ref().take(l.div_ceil(bs)).collect()).collect();
        (tabs, n)
    }

    fn body(&self, client: &Client) -> Result<Outcome, optimized::Error> {
        let (h, kv, d, bs) = (self.h, self.kv, self.d, self.block_size);
        let (tabs, n_blocks) = self.tables();
        let refs: Vec<&[u32]> = tabs.iter().map(|t| t.as_slice()).collect();
        let tables = BlockTables::upload(client, &refs, &self.lens, bs, n_blocks)?;
        let rows = n_blocks * bs;
        let nan = vec![f32::NAN; rows * kv * d];
        let kp = DeviceTensor::from_f32_as(client, &nan, &[rows, kv, d], self.kv_dtype)?;
        let vp = DeviceTensor::from_f32_as(client, &nan, &[rows, kv, d], self.kv_dtype)?;
        let row = kv * d;
        let mut kvs = Vec::new();
        for (b, &len) in self.lens.iter().enumerate() {
            let k = rand_vec(len * row, 80 + b as u32);
            let v = rand_vec(len * row, 180 + b as u32);
            for (lo, hi) in [(0, len / 2), (len / 2, len)] {
                if hi > lo {
                    kv_write_paged(client, &kp, &DeviceTensor::from_f32(client, &k[lo * row..hi * row], &[hi - lo, kv, d])?, &tables, b, lo)?;
                    kv_write_paged(client, &vp, &DeviceTensor::from_f32(client, &v[lo * row..hi * row], &[hi - lo, kv, d])?, &tables, b, lo)?;
                }
            }
            // The reference reads what the pools hold.
            kvs.push((self.kv_dtype.round(&k), self.kv_dtype.round(&v)));
        }
        let sink_vals: Vec<f32> = rand_vec(h, 77).iter().map(|x| x * 3.0).collect();
        let sinks_d = DeviceTensor::from_f32(client, &sink_vals, &[h])?;
        let mask = Masking { window: self.window, sinks: self.sinks.then_some(&sinks_d) };
        let sinks_ref = self.sinks.then_some(sink_vals.as_slice());
        let reference_with = |q: &[f32], t: usize, b: usize, pos0: usize, kvs: &[(Vec<f32>, Vec<f32>)]| -> Option<Vec<f32>> {
            let len = self.lens[b];
            let qa = Array3::from_shape_vec((t, h, d), q.to_vec()).ok()?;
            let ka = Array3::from_shape_vec((len, kv, d), kvs[b].0.clone()).ok()?;
            let va = Array3::from_shape_vec((len, kv, d), kvs[b].1.clone()).ok()?;
            Some(reference::ops::attention::attention_sinks(qa.view(), ka.view(), va.view(), pos0, self.window, sinks_ref).iter().copied().collect())
        };
        let reference = |q: &[f32], t: usize, b: usize, pos0: usize| reference_with(q, t, b, pos0, &kvs);
        // Wider than U[-1,1) so the softmax is peaked enough to notice a wrong key.
        let (got, want) = match self.phase {
            Phase::Prefill => {
                let (t, len) = (self.t, self.lens[0]);
                let q: Vec<f32> = rand_vec(t * h * d, 71).iter().map(|x| x * 2.0).collect();
                let qd = DeviceTensor::from_f32(client, &q, &[t, h, d])?;
                let out = DeviceTensor::from_f32_as(client, &vec![f32::NAN; t * h * d], &[t, h, d], self.out_dtype)?;
                flash_prefill(client, &qd, &kp, &vp, &tables, len - t, &mask, &out, self.prefill)?;
                let want = match self.prefill {
                    // v3 reads q, k, v as f16: the reference gets the same rounded values.
                    PrefillVersion::Tc(_) => {
                        let r16 = |x: &[f32]| x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect::<Vec<f32>>();
                        let kv16: Vec<(Vec<f32>, Vec<f32>)> = kvs.iter().map(|(k, v)| (r16(k), r16(v))).collect();
                        reference_with(&r16(&q), t, 0, len - t, &kv16)
                    }
                    PrefillVersion::V2 => reference(&q, t, 0, len - t),
                };
                (out.to_f32(client)?, want)
            }
            Phase::Decode => {
                let nb = self.lens.len();
                let q: Vec<f32> = rand_vec(nb * h * d, 72).iter().map(|x| x * 2.0).collect();
                let qd = DeviceTensor::from_f32(client, &q, &[nb, h, d])?;
                let out = DeviceTensor::from_f32_as(client, &vec![f32::NAN; nb * h * d], &[nb, h, d], self.out_dtype)?;
                flash_decode_tuned(client, &qd, &kp, &vp, &tables, &mask, &out, self.version, None, Some(self.score))?;
                let mut want = Some(Vec::new());
                for (b, &len) in self.lens.iter().enumerate() {
                    let r = reference(&q[b * h * d..(b + 1) * h * d], 1, b, len - 1);
                    want = want.zip(r).map(|(mut w, r)| {
                        w.extend(r);
                        w
                    });
                }
                (out.to_f32(client)?, want)
            }
        };
        let dtype = match (self.phase, self.prefill) {
            (Phase::Prefill, PrefillVersion::Tc(_)) => Dtype::F16,
            _ => Dtype::F32,
        };
        // Each output is a weighted mean of V's rows: judged against their scale where it cancels.
        let v_all: Vec<f32> = kvs.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        let tol = crate::tolerance::of_terms(crate::tolerance(Op::Attention, dtype).0, rms(&v_all));
        let (tol, want) = match want {
            Some(w) if self.out_dtype != optimized::Dtype::F32 => (crate::tolerance::out16(tol, self.out_dtype.into()).0, self.out_dtype.round(&w)),
            Some(w) => (tol, w),
            None => return Ok(Outcome::Fail("bad case shape".into())),
        };
        Ok(match crate::compare(&got, &want, tol) {
            Ok(m) => Outcome::Pass(m),
            Err(e) => Outcome::Fail(e),
        })
    }
}

impl Case for FlashCase {
    fn op(&self) -> Op {
        Op::Attention
    }
    fn name(&self) -> String {
        let mut s = match self.phase {
            Phase::Prefill => {
                let v = match self.prefill {
                    PrefillVersion::V2 => "prefill",
                    PrefillVersion::Tc(TcMode::Tensor) => "prefill-v3",
                    PrefillVersion::Tc(TcMode::Emulated) => "prefill-v3-emu",
                };
                format!("flash_attn({v},d={},h={},kv={},T={},S={}", self.d, self.h, self.kv, self.t, self.lens[0])
            }
            Phase::Decode => {
                format!("flash_attn(decode-{:?}-{:?},d={},h={},kv={},lens={:?}", self.version, self.score, self.d, self.h, self.kv, self.lens)
            }
        };
        s += &format!(",bs={},causal", self.block_size);
        if let Some(w) = self.window {
            s += &format!(",window={w}");
        }
        if self.sinks {
            s += ",sinks";
        }
        if self.shuffled {
            s += ",shuffled";
        }
        if self.kv_dtype != optimized::Dtype::F32 {
            s += &format!(",kv={}", self.kv_dtype.name());
        }
        if self.out_dtype != optimized::Dtype::F32 {
            s += &format!(",out={}", self.out_dtype.name());
        }
        s + if self.phase == Phase::Prefill && self.prefill != PrefillVersion::V2 { ",f16)" } else { ",f32)" }
    }
    fn run(&self, client: &Client) -> Outcome {
        let bad = self.lens.is_empty()
            || (self.phase == Phase::Prefill && (self.lens.len() != 1 || self.t == 0 || self.t > self.lens[0]))
            || (self.phase == Phase::Decode && self.lens.contains(&0));
        if bad || self.kv == 0 || !self.h.is_multiple_of(self.kv) || self.block_size == 0 {
            return Outcome::Fail(format!("malformed case {}", self.name()));
        }
        if self.phase == Phase::Decode && !self.version.supported(client) {
            return Outcome::Skip(format!("decode {:?} needs device-scope storage sync + u32 atomic add", self.version));
        }
        for t in [self.kv_dtype, self.out_dtype] {
            if let Some(skip) = skip_unsupported(client, t.into()) {
                return skip;
            }
        }
        if let (Phase::Prefill, PrefillVersion::Tc(mode)) = (self.phase, self.prefill) {
            if let Err(e) = optimized::kernels::attention::prefill_tc::supported(client, self.d, mode) {
                return outcome_or_skip(Err(e));
            }
        }
        // E.g. the plane score step for a G or D it does not take: skipped, with the reason.
        outcome_or_skip(self.body(client))
    }
}

/// A block table naming a block outside the pool must be refused before any launch.
#[derive(Debug, Clone)]
pub struct OutOfPoolCase;

impl Case for OutOfPoolCase {
    fn op(&self) -> Op {
        Op::Attention
    }
    fn name(&self) -> String {
        "flash_attn(block table id 4 in a pool of 4 blocks → error)".into()
    }
    fn run(&self, client: &Client) -> Outcome {
        match BlockTables::upload(client, &[&[0, 1], &[2, 4]], &[20, 17], 16, 4) {
            Err(e) if e.to_string().contains("block id 4 is outside the pool of 4") => Outcome::Pass(Metrics::default()),
            Err(e) => Outcome::Fail(format!("refused, but with {e}")),
            Ok(_) => Outcome::Fail("a table naming block 4 of a 4-block pool was accepted".into()),
        }
    }
}

/// `max_decode_len` is the decode kernels' own limit, exactly: one sequence of that many
/// positions decodes (finite output), one block more is refused as unsupported — so the
/// callers that size tables by it (serving's graphs and profile) never meet the refusal.
#[derive(Debug, Clone)]
pub struct MaxLenCase {
    pub h: usize,
    pub kv: usize,
    pub d: usize,
}

impl Case for MaxLenCase {
    fn op(&self) -> Op {
        Op::Attention
    }
    fn name(&self) -> String {
        format!("flash_attn(decode at max_decode_len,d={},h={},kv={}: runs; one block more → unsupported)", self.d, self.h, self.kv)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (h, kv, d, bs) = (self.h, self.kv, self.d, 16);
        let cap = optimized::kernels::attention::max_decode_len(client, h, kv, d);
        if cap == 0 {
            return Outcome::Skip(format!("no decode chunk fits this device's shared memory for {h} heads over {kv} × {d}"));
        }
        let decode = |len: usize| -> Result<Vec<f32>, optimized::Error> {
            let blocks = len.div_ceil(bs);
            let table: Vec<u32> = (0..blocks as u32).collect();
            let tables = BlockTables::upload(client, &[&table], &[len], bs, blocks)?;
            let pool = || DeviceTensor::from_f32(client, &rand_vec(blocks * bs * kv * d, 7), &[blocks * bs, kv, d]);
            let (kp, vp) = (pool()?, pool()?);
            let q = DeviceTensor::from_f32(client, &rand_vec(h * d, 8), &[1, h, d])?;
            let out = DeviceTensor::from_f32(client, &vec![f32::NAN; h * d], &[1, h, d])?;
            let mask = Masking { window: None, sinks: None };
            optimized::kernels::attention::flash_decode(client, &q, &kp, &vp, &tables, &mask, &out)?;
            out.to_f32(client)
        };
        match decode(cap) {
            Ok(o) if o.iter().all(|x| x.is_finite()) => {}
            Ok(_) => return Outcome::Fail(format!("{cap} positions (the cap): a non-finite output")),
            Err(e) => return Outcome::Fail(format!("{cap} positions (the cap) refused: {e}")),
        }
        match decode(cap + bs) {
            Err(optimized::Error::Unsupported(_)) => Outcome::Pass(Metrics::default()),
            Err(e) => Outcome::Fail(format!("{} positions: refused otherwise than unsupported: {e}", cap + bs)),
            Ok(_) => Outcome::Fail(format!("{} positions, past the cap of {cap}, ran: the cap is too low", cap + bs)),
        }
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    use Phase::{Decode, Prefill};
    // GPT-OSS's 8 heads a KV head of 64: the cap is under its 131,072-token context (a Llama's
    // 4 of 128 reach 262,144 positions: pools past what lavapipe allocates).
    let mut v: Vec<Box<dyn Case>> = vec![Box::new(OutOfPoolCase), Box::new(MaxLenCase { h: 64, kv: 8, d: 64 })];
    let mut add = |phase, d, h, kv, lens: &[usize], t, block_size, window, sinks, shuffled| {
        let versions: &[DecodeVersion] = if phase == Decode { &[DecodeVersion::V2, DecodeVersion::V3] } else { &[DecodeVersion::V3] };
        let scores: &[ScoreStep] = if phase == Decode { &[ScoreStep::PerUnit, ScoreStep::Plane] } else { &[ScoreStep::PerUnit] };
        let prefills: &[PrefillVersion] = if phase != Prefill || d > optimized::kernels::attention::prefill_tc::D_MAX {
            &[PrefillVersion::V2]
        } else if t * lens[0] * h <= EMU_MAX_WORK {
            &[PrefillVersion::V2, PrefillVersion::Tc(TcMode::Tensor), PrefillVersion::Tc(TcMode::Emulated)]
        } else {
            &[PrefillVersion::V2, PrefillVersion::Tc(TcMode::Tensor)]
        };
        for &version in versions {
            for &score in scores {
                for &prefill in prefills {
                    // E4M3 pools (read as vectors of 4 codes: D a multiple of 4).
                    let e4m3 = (d % 4 == 0).then_some(optimized::Dtype::E4M3);
                    for kv_dtype in [optimized::Dtype::F32, optimized::Dtype::F16].into_iter().chain(e4m3) {
                        let lens = lens.to_vec();
                        v.push(Box::new(FlashCase {
                            phase,
                            h,
                            kv,
                            d,
                            lens,
                            t,
                            block_size,
                            window,
                            sinks,
                            shuffled,
                            version,
                            score,
                            prefill,
                            kv_dtype,
                            out_dtype: optimized::Dtype::F32,
                        }) as Box<dyn Case>)
                    }
                }
            }
        }
    };
    // Decode: GQA 3, 8, 1, 2 and 3; lengths around the block size, past 1000; mixed batches.
    add(Decode, 64, 9, 3, &[1, 15, 16, 17, 257], 1, 16, None, false, true);
    add(Decode, 128, 32, 4, &[1100], 1, 16, None, true, true);
    add(Decode, 64, 16, 2, &[1030, 3, 700], 1, 16, Some(256), true, false);
    add(Decode, 33, 4, 4, &[17, 40], 1, 7, Some(5), false, true);
    add(Decode, 128, 8, 8, &[4096], 1, 16, None, false, false);
    add(Decode, 96, 12, 4, &[257, 1], 1, 32, Some(16), true, true);
    add(Decode, 64, 8, 1, &[16, 16, 33], 1, 16, Some(1), true, true);
    // The tiny GPT-OSS fixtures' heads (D = 16, G = 2, windows of 4–8, sinks).
    add(Decode, 16, 4, 2, &[174, 9], 1, 16, Some(8), true, true);
    add(Decode, 16, 6, 2, &[174, 9], 1, 16, None, true, false);
    // Gemma-3 4B / 12B heads (D = 256, G = 2), local layers' window of 1024.
    add(Decode, 256, 16, 8, &[1030, 5], 1, 16, Some(1024), false, true);
    add(Decode, 256, 4, 2, &[300], 1, 16, None, false, false);
    // Prefill: full and chunked (queries after cached keys), windows, sinks, T = 1, odd D,
    // block size 1 and 7.
    add(Prefill, 64, 9, 3, &[40], 17, 16, Some(8), true, true);
    add(Prefill, 64, 9, 3, &[17], 17, 16, None, false, false);
    add(Prefill, 128, 16, 2, &[300], 64, 16, Some(100), false, true);
    add(Prefill, 128, 8, 1, &[1100], 1100, 16, None, true, true);
    add(Prefill, 33, 4, 4, &[15], 15, 7, Some(3), false, true);
    add(Prefill, 64, 8, 1, &[16], 1, 16, None, false, false);
    // D = 256 (Gemma-3 4B / 12B): prefill v3 takes D ≤ 128, so v2 only.
    add(Prefill, 256, 8, 4, &[200], 72, 16, Some(64), false, true);
    add(Prefill, 96, 12, 4, &[257], 57, 16, None, true, false);
    add(Prefill, 64, 4, 2, &[257], 257, 1, None, false, true);
    // v3's tile edges: 64 query rows and 64 keys per tile (32 / 32 emulated): T of 63, 65, 129
    // after cached keys, a window inside one key tile, D = 80 and 16.
    add(Prefill, 64, 8, 2, &[200], 129, 16, None, false, true);
    add(Prefill, 128, 4, 4, &[130], 65, 16, Some(33), true, false);
    add(Prefill, 80, 6, 3, &[63], 63, 16, None, true, true);
    add(Prefill, 16, 2, 1, &[97], 97, 8, Some(64), false, false);
    // The output in the o projection's 16-bit type, from every kernel that writes it (decode
    // v2's combine and v3's last cube, prefill v2 and v3), over f16 pools.
    let kv_dtype = optimized::Dtype::F16;
    for out_dtype in [optimized::Dtype::F16, optimized::Dtype::BF16] {
        for version in [DecodeVersion::V2, DecodeVersion::V3] {
            for (d, h, kv, lens) in [(64usize, 16usize, 2usize, vec![1030usize, 3, 700]), (128, 32, 8, vec![130, 17])] {
                let (t, block_size, window, sinks, shuffled, score, prefill) = (1, 16, None, true, true, ScoreStep::PerUnit, PrefillVersion::V2);
                v.push(Box::new(FlashCase {
                    phase: Decode,
                    h,
                    kv,
                    d,
                    lens,
                    t,
                    block_size,
                    window,
                    sinks,
                    shuffled,
                    version,
                    score,
                    prefill,
                    kv_dtype,
                    out_dtype,
                }));
            }
        }
        for prefill in [PrefillVersion::V2, PrefillVersion::Tc(TcMode::Tensor)] {
            for (d, h, kv, s, t) in [(64usize, 8usize, 2usize, 200usize, 129usize), (128, 8, 2, 300, 64)] {
                let (version, score) = (DecodeVersion::V3, ScoreStep::PerUnit);
                let lens = vec![s];
                v.push(Box::new(FlashCase {
                    phase: Prefill,
                    h,
                    kv,
                    d,
                    lens,
                    t,
                    block_size: 16,
                    window: Some(100),
                    sinks: true,
                    shuffled: true,
                    version,
                    score,
                    prefill,
                    kv_dtype,
                    out_dtype,
                }));
            }
        }
    }
    v
}

/// Root mean square of `x` (0 for none).
fn rms(x: &[f32]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / x.len() as f64).sqrt()
}
