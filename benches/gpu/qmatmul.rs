//! Quantized-matmul fixtures shared by `benches/qmatmul.rs` and `tandem bench --kernel qmatmul`:
//! enough copies of one weight (≥ 256 MiB in all) that each call streams W from DRAM.

use optimized::kernels::matmul::{linear_into, Version};
use optimized::kernels::qmatmul::{qlinear_into, QLayout, QWeight};
use optimized::{Client, DeviceTensor, Dtype, Error};
use reference::quant::Scheme;

/// A weight format the benches compare.
#[derive(Debug, Clone, Copy)]
pub enum Format {
    Dense(Dtype),
    Quant(Scheme),
}

/// Rotating copies of one `[out, in]` weight and the x / y of a T-token call.
pub struct Setup {
    pub x: DeviceTensor,
    pub y: DeviceTensor,
    dense: Vec<DeviceTensor>,
    quant: Vec<QWeight>,
    /// Bytes one call reads from W (values + scales).
    pub w_bytes: usize,
    next: usize,
}

pub fn setup(client: &Client, format: Format, n_in: usize, n_out: usize, t: usize) -> Result<Setup, Error> {
    setup_as(client, format, n_in, n_out, t, None)
}

/// [`setup`] with quantized weights stored in a chosen order (`None`: the default).
pub fn setup_as(client: &Client, format: Format, n_in: usize, n_out: usize, t: usize, layout: Option<QLayout>) -> Result<Setup, Error> {
    let w: Vec<f32> = (0..n_in * n_out).map(|i| (((i * 7) % 251) as f32 - 125.0) / 1250.0).collect();
    let one_bytes;
    let (mut dense, mut quant) = (Vec::new(), Vec::new());
    match format {
        Format::Dense(dt) => {
            one_bytes = n_in * n_out * dt.size();
            for _ in 0..(256usize << 20).div_ceil(one_bytes).clamp(1, 64) {
                dense.push(DeviceTensor::from_f32_as(client, &w, &[n_out, n_in], dt)?);
            }
        }
        Format::Quant(s) => {
            let q = s.quantize(&w, n_out, n_in).map_err(|e| Error::Shape(e.to_string()))?;
            let first = QWeight::upload_as(client, &[&q], layout)?;
            one_bytes = first.bytes();
            quant.push(first);
            for _ in 1..(256usize << 20).div_ceil(one_bytes).clamp(1, 64) {
                quant.push(QWeight::upload_as(client, &[&q], layout)?);
            }
        }
    }
    let x = DeviceTensor::from_f32(client, &vec![0.5; t * n_in], &[t, n_in])?;
    let y = DeviceTensor::empty_f32(client, &[t, n_out]);
    Ok(Setup { x, y, dense, quant, w_bytes: one_bytes, next: 0 })
}

/// One call on the next copy (gemv for dense, the fused dequant gemv / dequant + GEMM for quantized).
/// [`run`] of a quantized setup with the gemv's launch choices forced.
pub fn run_tuned(client: &Client, s: &mut Setup, tune: &optimized::kernels::qmatmul::GemvTune) -> Result<(), Error> {
    s.next += 1;
    match s.quant.get(s.next % s.quant.len().max(1)) {
        Some(w) => optimized::kernels::qmatmul::qlinear_into_tuned(client, &s.x, w, &s.y, tune),
        None => Err(Error::Unsupported("rows per group: a dense setup".into())),
    }
}

/// Whether a quantized setup's weight may take the f16-pair 4-bit decode (its probe passed).
pub fn pairs(s: &Setup) -> bool {
    s.quant.first().is_some_and(|w| w.pairs)
}

/// The gemv's default launch choices for a quantized setup's weight.
pub fn default_tune(client: &Client, s: &Setup) -> Result<optimized::kernels::qmatmul::GemvTune, Error> {
    let w = s.quant.first().ok_or_else(|| Error::Unsupported("launch choices: a dense setup".into()))?;
    Ok(optimized::kernels::qmatmul::GemvTune::default_for(client, w))
}

pub fn run(client: &Client, s: &mut Setup) -> Result<(), Error> {
    s.next += 1;
    if !s.dense.is_empty() {
        let w = &s.dense[s.next % s.dense.len()];
        let v = if s.x.shape[0] <= optimized::kernels::matmul::GEMV_MAX_T { Version::Gemv } else { Version::Tiled2 };
        return linear_into(client, &s.x, w, &s.y, v);
    }
    let w = &s.quant[s.next % s.quant.len()];
    qlinear_into(client, &s.x, w, &s.y)
}
