//! `kv_write(e4m3 codes…)`: the codes the device writes into an E4M3 KV pool
//! (`kernels::attention::paged`, `kv_elem::e4m3_code`) are `reference::quant::fp8::encode`'s,
//! exactly, and read back (the readers' decode) as `reference::quant::fp8::decode`'s values —
//! on every code's value, the midpoints between neighbouring codes (ties go to the even code)
//! and a hair either side of them, subnormals, ±0, values past 448 (saturated), ±∞ and NaN.

use optimized::kernels::kv_write_paged;
use optimized::kv_cache::BlockTables;
use optimized::{Client, DeviceTensor, Dtype};
use reference::quant::fp8;

use super::super::outcome_or_skip;
use crate::{Case, Metrics, Op, Outcome};

/// Every value the case writes.
fn values() -> Vec<f32> {
    let mut finite: Vec<f32> = (0u8..=255).map(fp8::decode).filter(|x| x.is_finite()).collect();
    finite.sort_by(f32::total_cmp);
    let mut v = finite.clone();
    for w in finite.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        v.extend([mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits().saturating_sub(1))]);
    }
    v.extend([-0.0, 1e-30, -1e-30, 449.0, 463.9, 464.0, 480.0, 1e6, -1e6, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE]);
    v
}

#[derive(Debug, Clone)]
pub struct E4m3CodesCase;

impl Case for E4m3CodesCase {
    fn op(&self) -> Op {
        Op::Attention
    }
    fn name(&self) -> String {
        "kv_write(e4m3 codes = reference encode: every code, midpoints ± 1 ulp, subnormals, saturation, ±∞, NaN)".into()
    }
    fn run(&self, client: &Client) -> Outcome {
        outcome_or_skip(self.body(client))
    }
}

impl E4m3CodesCase {
    fn body(&self, client: &Client) -> Result<Outcome, optimized::Error> {
        let mut v = values();
        // Rows of 4 values (one KV head of width 4), whole blocks of 16 positions.
        let rows = v.len().div_ceil(4).div_ceil(16) * 16;
        v.resize(rows * 4, 0.0);
        let blocks = rows / 16;
        let table: Vec<u32> = (0..blocks as u32).rev().collect();
        let tables = BlockTables::upload(client, &[&table], &[rows], 16, blocks)?;
        let pool = DeviceTensor::from_f32_as(client, &vec![f32::NAN; rows * 4], &[rows, 1, 4], Dtype::E4M3)?;
        kv_write_paged(client, &pool, &DeviceTensor::from_f32(client, &v, &[rows, 1, 4])?, &tables, 0, 0)?;
        let got = pool.to_f32(client)?;
        // Position p is in pool row (table[p / 16] · 16 + p % 16).
        for (p, chunk) in v.chunks(4).enumerate() {
            let row = table[p / 16] as usize * 16 + p % 16;
            for (i, &x) in chunk.iter().enumerate() {
                let (want, have) = (fp8::decode(fp8::encode(x)), got[row * 4 + i]);
                if want.to_bits() != have.to_bits() && !(want.is_nan() && have.is_nan()) {
                    return Ok(Outcome::Fail(format!("{x:e} ({:#010x}): code value {have:e}, the reference's {want:e}", x.to_bits())));
                }
            }
        }
        Ok(Outcome::Pass(Metrics::default()))
    }
}
