//! The per-device probes of gemv v2's bit-pattern decodes: whether fp4 pairs through f16
//! ([`super::e2m1_pair`]) and int8 bytes as subnormal f32s ([`super::sub_word_dot`]) come out
//! exact on this device, each probed once per device and process.

use cubecl::prelude::*;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::{e2m1_pair, q4_pair, sub_prescale, sub_word_dot, SUB_SHIFT_BITS};
use crate::{Client, DeviceTensor, Dtype, Error};

#[cube(launch_unchecked)]
fn pairs_probe(words: &[u32], out: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < 16 {
        #[unroll]
        for e in 0..4usize {
            let v = e2m1_pair(words[i * 4 + e], e);
            out[(i * 4 + e) * 2] = v.extract(0usize);
            out[(i * 4 + e) * 2 + 1] = v.extract(1usize);
        }
    }
}

/// Whether [`super::e2m1_pair`] gives the right values on this device: probed once per device and
/// process (every nibble at every position, against `reference::quant`'s e2m1 table), because
/// the u32 → f16×2 bitcast it relies on is not computed right everywhere (lavapipe returns
/// the u32's f32 view in both halves). The first call syncs with the device: make it outside
/// a graph capture ([`crate::kernels::qmatmul::QWeight::upload`] does, for mxfp4, and records the answer).
pub fn pairs_supported(client: &Client) -> bool {
    probed(client, "fp4-pairs", |c| Ok(Dtype::F16.supported(c) && probe_pairs(c)?))
}

#[cube(launch_unchecked)]
fn q4_pairs_probe(words: &[u32], out: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < 16 {
        #[unroll]
        for e in 0..4usize {
            let v = q4_pair(words[i * 4 + e], e);
            out[(i * 4 + e) * 2] = v.extract(0usize);
            out[(i * 4 + e) * 2 + 1] = v.extract(1usize);
        }
    }
}

/// Whether [`super::q4_pair`] gives the right values on this device (every code at every
/// position: `n · 2^−24`, f16 subnormals widened): probed once per device and process, like
/// [`pairs_supported`] (the same bitcast; [`crate::kernels::qmatmul::QWeight::upload`] makes
/// the first call, for Q4).
pub fn q4_pairs_supported(client: &Client) -> bool {
    probed(client, "q4-pairs", |c| Ok(Dtype::F16.supported(c) && probe_q4_pairs(c)?))
}

fn probe_q4_pairs(client: &Client) -> Result<bool, Error> {
    let words = pair_probe_words();
    let w = DeviceTensor::from_u32(client, &words, &[words.len()])?;
    let out = DeviceTensor::from_f32(client, &vec![f32::NAN; words.len() * 2], &[words.len() * 2])?;
    unsafe {
        q4_pairs_probe::launch_unchecked(client, CubeCount::Static(1, 1, 1), CubeDim::new_1d(16), w.as_arg(1), out.as_arg(1));
    }
    let got = out.to_f32(client)?;
    Ok(pair_probe_matches(&got, |n| n as f32 / 16_777_216.0))
}

/// Words of the pair probes: word 4n + e holds code n at nibble e and 15 − n at nibble e + 4.
fn pair_probe_words() -> Vec<u32> {
    (0..16u32).flat_map(|n| (0..4u32).map(move |e| n << (4 * e) | (15 - n) << (4 * e + 16))).collect()
}

/// Whether a pair probe's output is `want(n)`, `want(15 − n)` for every word, bit for bit.
fn pair_probe_matches(got: &[f32], want: impl Fn(u32) -> f32) -> bool {
    (0..16u32).all(|n| {
        (0..4usize).all(|e| {
            let i = (n as usize * 4 + e) * 2;
            got.get(i).map(|g| g.to_bits()) == Some(want(n).to_bits()) && got.get(i + 1).map(|g| g.to_bits()) == Some(want(15 - n).to_bits())
        })
    })
}

/// Whether [`super::sub_word_dot`] gives the right values on this device (every byte at every
/// position, exactly): it multiplies by subnormal f32s, which a device that flushes them to
/// zero (or a compiler told to) gets wrong. Probed once per device and process, like
/// [`pairs_supported`] (the first call syncs: [`crate::kernels::qmatmul::QWeight::upload`] makes it).
pub fn subnormal_supported(client: &Client) -> bool {
    probed(client, "int8-subnormal", probe_subnormal)
}

/// `probe(client)`'s answer, computed once per (probe, device) and process; an error is "no".
fn probed(client: &Client, what: &str, probe: impl FnOnce(&Client) -> Result<bool, Error>) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let key = format!("{what}/{}/{}", client.name(), client.properties().identity.name);
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(ok) = seen.lock().ok().and_then(|m| m.get(&key).copied()) {
        return ok;
    }
    let ok = probe(client).unwrap_or(false);
    if let Ok(mut m) = seen.lock() {
        m.insert(key, ok);
    }
    ok
}

fn probe_pairs(client: &Client) -> Result<bool, Error> {
    let words = pair_probe_words();
    let w = DeviceTensor::from_u32(client, &words, &[words.len()])?;
    let out = DeviceTensor::from_f32(client, &vec![f32::NAN; words.len() * 2], &[words.len() * 2])?;
    unsafe {
        pairs_probe::launch_unchecked(client, CubeCount::Static(1, 1, 1), CubeDim::new_1d(16), w.as_arg(1), out.as_arg(1));
    }
    let got = out.to_f32(client)?;
    Ok(pair_probe_matches(&got, |n| reference::quant::mxfp4::E2M1[n as usize] / 16384.0))
}

#[cube(launch_unchecked)]
fn subnormal_probe<N: Size>(words: &[u32], x: &[Vector<f32, N>], out: &mut [f32]) {
    let i = ABSOLUTE_POS;
    if i < 256 {
        // x = e_j (one element 1, the others 0): the decoded byte j alone, offset removed.
        #[unroll]
        for j in 0..4usize {
            let d = sub_word_dot(words[i], sub_prescale(x[j]), 0.0f32);
            out[i * 4 + j] = d * f32::reinterpret(SUB_SHIFT_BITS) - 128.0f32;
        }
    }
}

fn probe_subnormal(client: &Client) -> Result<bool, Error> {
    // Word i: bytes i, i + 1, i + 2, i + 3 (mod 256) — every byte value at every position.
    let words: Vec<u32> = (0..256u32).map(|i| (0..4u32).fold(0, |w, e| w | ((i + e) % 256) << (8 * e))).collect();
    let x: Vec<f32> = (0..16).map(|k| if k % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let wd = DeviceTensor::from_u32(client, &words, &[256])?;
    let xd = DeviceTensor::from_f32(client, &x, &[16])?;
    let out = DeviceTensor::from_f32(client, &vec![f32::NAN; 1024], &[1024])?;
    unsafe {
        subnormal_probe::launch_unchecked(client, CubeCount::Static(1, 1, 1), CubeDim::new_1d(256), 4, wd.as_arg(1), xd.as_arg(4), out.as_arg(1));
    }
    let got = out.to_f32(client)?;
    Ok((0..256usize).all(|i| (0..4usize).all(|j| got[i * 4 + j].to_bits() == (((i + j) % 256) as u8 as i8 as f32).to_bits())))
}
