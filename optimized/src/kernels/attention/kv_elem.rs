//! What the attention kernels read from a KV pool and what the writers store there: a float
//! pool's own values (f32 / f16, widened as read), or E4M3 codes (`kv=e4m3`: OCP E4M3FN, no
//! scale — vLLM's `fp8` KV cache without calibrated scales), four to a little-endian u32 word,
//! decoded as read by integer bit operations (the same kernels on every backend). A kernel
//! over a pool of `K` takes its vectors as `Vector<K, NK>`: NK = N for float pools, N / 4
//! words for E4M3 (N ≥ 4).

use cubecl::prelude::*;

use crate::kernels::qformat::fp8::e4m3;

/// The value of code `c` (its low byte), NaN for 0x7F / 0xFF as `reference::quant::fp8::decode`
/// gives it (a NaN written into a pool stays one; a poisoned pool's rows read as NaN).
#[cube]
pub fn code_value(c: u32) -> f32 {
    select((c & 0x7Fu32) == 0x7Fu32, f32::reinterpret(0x7FC0_0000u32), e4m3(c))
}

/// The N f32 lanes of one pool vector `x`: a float pool's own (NK = N), or, with `fp8`, the
/// N = 4·NK codes of its NK words (`nv` = N).
#[cube]
pub fn widen<K: Scalar, NK: Size, N: Size>(x: Vector<K, NK>, #[comptime] fp8: bool, #[comptime] nv: usize) -> Vector<f32, N> {
    let mut out = Vector::<f32, N>::new(0.0f32);
    if comptime![fp8] {
        #[unroll]
        for w in 0..nv / 4 {
            let word = u32::cast_from(x.extract(w));
            #[unroll]
            for j in 0..4usize {
                let sh = comptime![(8 * j) as u32];
                out.insert(w * 4 + j, code_value((word >> sh) & 0xFFu32));
            }
        }
    } else {
        out = Vector::<f32, N>::cast_from(x);
    }
    out
}

/// Element `i` of pool `k` as f32: a float pool's own, or, with `fp8`, code `i` of the words.
#[cube]
pub fn widen_one<K: Scalar>(k: &[K], i: usize, #[comptime] fp8: bool) -> f32 {
    if comptime![fp8] {
        let word = u32::cast_from(k[i / 4]);
        code_value((word >> (((i % 4) * 8) as u32)) & 0xFFu32)
    } else {
        f32::cast_from(k[i])
    }
}

/// The scale of dynamically quantized activations whose largest magnitude is `amax`:
/// `max(amax / 448, 2⁻¹²⁶)` — `reference::quant::fp8::dynamic_scale`.
#[cube]
pub fn e4m3_dynamic_scale(amax: f32) -> f32 {
    max(amax / 448.0f32, 1.175_494_4e-38f32)
}

/// The E4M3 code nearest `x` — ties to the even code, saturated to ±448, NaN → 0x7F —
/// exactly `reference::quant::fp8::encode`: normals by rounding the f32 mantissa to 3 bits
/// (ties to even, a carry moves the exponent), below 2⁻⁶ the multiple of 2⁻⁹ (ties to even).
#[cube]
pub fn e4m3_code(x: f32) -> u32 {
    let bits = u32::reinterpret(x);
    let sign = (bits >> 24u32) & 0x80u32;
    let nan = (bits & 0x7FFF_FFFFu32) > 0x7F80_0000u32;
    let a = f32::reinterpret(bits & 0x7FFF_FFFFu32);
    let a = select(a > 448.0f32, 448.0f32, a);
    let ab = u32::reinterpret(a);
    let normal = ((ab + 0x7FFFFu32 + ((ab >> 20u32) & 1u32)) >> 20u32) - 960u32;
    let v = a * 512.0f32;
    let fl = f32::floor(v);
    let frac = v - fl;
    let fi = u32::cast_from(fl);
    let up = frac > 0.5f32 || (frac == 0.5f32 && (fi & 1u32) == 1u32);
    let sub = fi + select(up, 1u32, 0u32);
    let mag = select(a < 0.015625f32, sub, normal);
    select(nan, 0x7Fu32, sign | mag)
}
