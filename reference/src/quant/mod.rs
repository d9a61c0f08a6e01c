//! Quantized weights: INT8 weight-only (W8A16, [`int8`]), OCP MXFP4 ([`mxfp4`]), GGUF's
//! Q4_0 / Q4_1 ([`q4`]), FP8 E4M3 ([`fp8`]; hub FP8 checkpoints kept as stored, [`fp8_hf`]),
//! and ggml blocks kept as a GGUF stores them ([`QuantTensor::Ggml`]:
//! the k-quants, which the GPU decodes block by block).
//!
//! The seven linear weights of each block are quantized (q, k, v, o, gate, up, down;
//! [`is_linear`]), and under INT8 also an untied lm_head ([`quantizes`]); embeddings, MXFP4's
//! lm_head and RMSNorm gains stay full precision. The reference
//! runs a quantized model on `dequant(quantize(W))` in f32, so the only difference from the
//! full model is the quantization error itself; see [`drift`] for how far that moves the
//! next-token distribution and [`store`] for the safetensors layout.

pub mod drift;
pub mod fp8;
pub mod fp8_hf;
pub mod int8;
pub mod mxfp4;
pub mod q4;
pub mod store;

use std::fmt;
use std::str::FromStr;

use crate::config::Config;
use crate::dequant::GgmlType;
use crate::error::{Error, Result};
use crate::weights::{Naming, Tensor, TensorSource};

pub use fp8::{Fp8Scales, Fp8Weight};
pub use int8::{Granularity, Int8Weight};
pub use mxfp4::Mxfp4Weight;
pub use q4::Q4Weight;

/// A quantization scheme: what `--weights` / `--format` choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Int8(Granularity),
    Mxfp4,
    /// GGUF Q4_0: 4-bit codes, an f16 scale per 32 (`d · (n − 8)`).
    Q4_0,
    /// GGUF Q4_1: 4-bit codes, an f16 scale and offset per 32 (`d · n + m`).
    Q4_1,
    /// FP8 E4M3 codes with an f32 scale per output channel ([`fp8`]). Per channel rather than
    /// vLLM's dynamic per-tensor scale: E4M3's 2¹⁵ normal range already covers most of a
    /// tensor, but one outlier row sets a per-tensor scale for every row, pushing the small
    /// weights of quiet rows into the subnormals (2⁻⁹·s apart, a few significant bits or
    /// none); a scale per row keeps each row's largest weights at the top of the grid, for 4
    /// bytes a row, and the gemv applies it once per 32 weights as it would a tensor's.
    Fp8,
}

/// A quantized `[out, in]` linear weight in one of the supported formats.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantTensor {
    Int8(Int8Weight),
    Mxfp4(Mxfp4Weight),
    Q4(Q4Weight),
    /// FP8 E4M3 codes with tensor, channel or block scales (`--weights fp8`, hub FP8
    /// checkpoints as stored).
    Fp8(Fp8Weight),
    /// ggml blocks as stored (`ty` a block type, e.g. Q4_K): `out` rows of
    /// `in_dim / ty.block_elems()` blocks each, `bytes` row-major. What it stands for is
    /// `dequant::dequantize_into` of the bytes. Built by [`QuantTensor::ggml`], which checks
    /// the lengths; loaded from GGUF files only (never quantized to, never stored).
    Ggml {
        ty: GgmlType,
        out: usize,
        in_dim: usize,
        bytes: Vec<u8>,
    },
}

/// Whether `t` is one of the linear weights that a quantized model stores quantized.
pub fn is_linear(t: Tensor) -> bool {
    use Tensor::*;
    matches!(t, Wq(_) | Wk(_) | Wv(_) | Wo(_) | WGate(_) | WUp(_) | WDown(_) | Wqkv(_) | WGateUp(_))
}

/// Whether a model quantized by `scheme` stores `t` quantized: every [`is_linear`] weight, and
/// under INT8 the lm_head of an untied model too — as int8 weight-only quantization usually
/// does (gpt-fast's replaces every linear layer, the output one included; llama.cpp's Q8_0
/// files hold `output.weight` in Q8_0): it is the largest single matrix a decode step reads
/// (Mistral-7B: 131 M weights, 3.6% of the model). MXFP4 and Q4 keep the lm_head full
/// precision, as GPT-OSS ships its unembedding in bf16 (4-bit logits cost far more accuracy;
/// a GGUF's own quantized `output.weight` still loads quantized). A tied lm_head
/// is the token embedding (never loaded as [`Tensor::LmHead`]) and stays full precision.
pub fn quantizes(scheme: Scheme, t: Tensor) -> bool {
    is_linear(t) || (t == Tensor::LmHead && matches!(scheme, Scheme::Int8(_)))
}

impl Scheme {
    /// Quantize a row-major `[out, in_dim]` weight.
    pub fn quantize(&self, w: &[f32], out: usize, in_dim: usize) -> Result<QuantTensor> {
        Ok(match self {
            Scheme::Int8(g) => QuantTensor::Int8(int8::quantize(w, out, in_dim, *g)?),
            Scheme::Mxfp4 => QuantTensor::Mxfp4(mxfp4::quantize(w, out, in_dim)?),
            Scheme::Q4_0 | Scheme::Q4_1 => QuantTensor::Q4(q4::quantize(w, out, in_dim, *self == Scheme::Q4_1)?),
            Scheme::Fp8 => QuantTensor::Fp8(fp8::quantize(w, out, in_dim, Fp8Scales::Channel)?),
        })
    }

    /// `quant_method` of config.json's `quantization_config`.
    pub fn method(&self) -> &'static str {
        match self {
            Scheme::Int8(_) => "int8",
            Scheme::Mxfp4 => "mxfp4",
            Scheme::Q4_0 => "q4_0",
            Scheme::Q4_1 => "q4_1",
            Scheme::Fp8 => "fp8",
        }
    }

    /// `group_size` of `quantization_config`: the int8 group, null per channel (FP8's scales
    /// too), 32 for MXFP4 and Q4.
    pub fn group_size(&self) -> Option<usize> {
        match self {
            Scheme::Int8(Granularity::PerChannel) | Scheme::Fp8 => None,
            Scheme::Int8(Granularity::Group(g)) => Some(*g),
            Scheme::Mxfp4 => Some(mxfp4::BLOCK),
            Scheme::Q4_0 | Scheme::Q4_1 => Some(q4::BLOCK),
        }
    }

    /// From `quant_method` + `group_size` (`int8` with `None` = per channel; `mxfp4`, `q4_0`
    /// and `q4_1` take `None` or 32).
    pub fn from_method(method: &str, group: Option<usize>) -> Result<Scheme> {
        match (method, group) {
            ("int8", None) => Ok(Scheme::Int8(Granularity::PerChannel)),
            ("int8", Some(0)) => Err(Error::Input("int8 group size must be at least 1".into())),
            ("int8", Some(g)) => Ok(Scheme::Int8(Granularity::Group(g))),
            ("mxfp4", None) | ("mxfp4", Some(mxfp4::BLOCK)) => Ok(Scheme::Mxfp4),
            ("mxfp4", Some(g)) => Err(Error::Input(format!("mxfp4 blocks are {} elements; group size {g} is not supported", mxfp4::BLOCK))),
            ("q4_0", None) | ("q4_0", Some(q4::BLOCK)) => Ok(Scheme::Q4_0),
            ("q4_1", None) | ("q4_1", Some(q4::BLOCK)) => Ok(Scheme::Q4_1),
            (m @ ("q4_0" | "q4_1"), Some(g)) => Err(Error::Input(format!("{m} blocks are {} elements; group size {g} is not supported", q4::BLOCK))),
            ("fp8", None) => Ok(Scheme::Fp8),
            ("fp8", Some(g)) => Err(Error::Input(format!("fp8 weights take a scale per output channel; group size {g} is not supported"))),
            (m, _) => Err(Error::Input(format!("quantization `{m}` is not supported (int8, mxfp4, q4_0, q4_1, fp8 are)"))),
        }
    }

    /// Storage bits per weight of a `[out, in_dim]` matrix (scales included).
    pub fn bits_per_weight(&self, in_dim: usize) -> f64 {
        match self {
            Scheme::Int8(g) => 8.0 + 32.0 / g.group_len(in_dim).max(1) as f64,
            Scheme::Mxfp4 => 4.0 + 8.0 / mxfp4::BLOCK as f64,
            Scheme::Q4_0 => 4.0 + 16.0 / q4::BLOCK as f64,
            Scheme::Q4_1 => 4.0 + 32.0 / q4::BLOCK as f64,
            Scheme::Fp8 => 8.0 + 32.0 / in_dim.max(1) as f64,
        }
    }
}

/// `int8` (per channel), `int8-g<N>` (groups of N inputs), `mxfp4`, `q4_0`, `q4_1`, `fp8`.
impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Int8(Granularity::PerChannel) => write!(f, "int8"),
            Scheme::Int8(Granularity::Group(g)) => write!(f, "int8-g{g}"),
            Scheme::Mxfp4 => write!(f, "mxfp4"),
            Scheme::Q4_0 => write!(f, "q4_0"),
            Scheme::Q4_1 => write!(f, "q4_1"),
            Scheme::Fp8 => write!(f, "fp8"),
        }
    }
}

impl FromStr for Scheme {
    type Err = Error;
    /// Parses what [`Display`](fmt::Display) prints.
    fn from_str(s: &str) -> Result<Scheme> {
        let bad = || Error::Input(format!("weights `{s}`: expected int8, int8-g<N> (e.g. int8-g128), mxfp4, q4_0, q4_1 or fp8"));
        match s {
            "int8" | "mxfp4" | "q4_0" | "q4_1" | "fp8" => Scheme::from_method(s, None),
            _ => {
                let g = s.strip_prefix("int8-g").ok_or_else(bad)?.parse::<usize>().map_err(|_| bad())?;
                Scheme::from_method("int8", Some(g))
            }
        }
    }
}

impl QuantTensor {
    /// `(out, in)`.
    pub fn dims(&self) -> (usize, usize) {
        match self {
            QuantTensor::Int8(x) => (x.out(), x.in_dim()),
            QuantTensor::Mxfp4(x) => (x.out(), x.in_dim()),
            QuantTensor::Q4(x) => (x.out(), x.in_dim()),
            QuantTensor::Fp8(x) => (x.out(), x.in_dim()),
            QuantTensor::Ggml { out, in_dim, .. } => (*out, *in_dim),
        }
    }

    /// `[out, in_dim]` ggml blocks of `ty` (`name` for the error): `in_dim` a whole number of
    /// blocks and `bytes` exactly the `out` rows.
    pub fn ggml(name: &str, ty: GgmlType, out: usize, in_dim: usize, bytes: Vec<u8>) -> Result<QuantTensor> {
        let (be, bb) = (ty.block_elems(), ty.block_bytes());
        let want = out.checked_mul(in_dim / be.max(1)).and_then(|n| n.checked_mul(bb));
        if be == 0 || !in_dim.is_multiple_of(be) || want != Some(bytes.len()) {
            return Err(Error::Input(format!(
                "{name}: {} [{out}, {in_dim}] needs rows of whole {be}-element blocks ({bb} bytes each); {} bytes given",
                ty.name(),
                bytes.len()
            )));
        }
        Ok(QuantTensor::Ggml { ty, out, in_dim, bytes })
    }

    /// The f32 weight `[out, in]` it stands for.
    pub fn dequant(&self) -> Vec<f32> {
        match self {
            QuantTensor::Int8(x) => int8::dequant(x),
            QuantTensor::Mxfp4(x) => mxfp4::dequant(x),
            QuantTensor::Q4(x) => q4::dequant(x),
            QuantTensor::Fp8(x) => fp8::dequant(x),
            QuantTensor::Ggml { ty, bytes, .. } => {
                let mut out = Vec::new();
                crate::dequant::dequantize_into(*ty, bytes, &mut out);
                out
            }
        }
    }

    /// The scheme that quantizes to it (FP8 of any scale granularity: `fp8`); `None` for ggml
    /// blocks (no scheme writes them).
    pub fn scheme(&self) -> Option<Scheme> {
        match self {
            QuantTensor::Int8(x) => Some(Scheme::Int8(x.granularity())),
            QuantTensor::Mxfp4(_) => Some(Scheme::Mxfp4),
            QuantTensor::Q4(x) if x.offset() => Some(Scheme::Q4_1),
            QuantTensor::Q4(_) => Some(Scheme::Q4_0),
            QuantTensor::Fp8(_) => Some(Scheme::Fp8),
            QuantTensor::Ggml { .. } => None,
        }
    }

    /// What a report calls its format: the scheme (`int8-g32`, `q4_0`, ...; FP8 with its
    /// scales: `fp8-channel`, `fp8-block128x128`) or the ggml type name (`Q4_K`).
    pub fn label(&self) -> String {
        match (self, self.scheme()) {
            (QuantTensor::Ggml { ty, .. }, _) => ty.name().to_string(),
            (QuantTensor::Fp8(x), _) => format!("fp8-{}", x.granularity.label()),
            (_, Some(s)) => s.to_string(),
            (_, None) => String::new(),
        }
    }

    /// Bytes of its stored form (values + scales).
    pub fn storage_bytes(&self) -> usize {
        match self {
            QuantTensor::Int8(x) => x.storage_bytes(),
            QuantTensor::Mxfp4(x) => x.storage_bytes(),
            QuantTensor::Q4(x) => x.storage_bytes(),
            QuantTensor::Fp8(x) => x.storage_bytes(),
            QuantTensor::Ggml { bytes, .. } => bytes.len(),
        }
    }
}

/// Quantize linear weight `t` of `cfg`; errors name the tensor and its shape.
pub fn quantize_tensor(scheme: Scheme, t: Tensor, cfg: &Config, w: &[f32]) -> Result<QuantTensor> {
    let s = t.shape(cfg);
    let (out, in_dim) = match s[..] {
        [o, i] => (o, i),
        _ => return Err(Error::Input(format!("{}: shape {s:?} is not a matrix", t.name(Naming::Hf)))),
    };
    scheme.quantize(w, out, in_dim).map_err(|e| match e {
        Error::Input(m) => Error::Input(format!("{} {s:?}: {m}", t.name(Naming::Hf))),
        e => e,
    })
}

/// A [`TensorSource`] that quantizes the linear weights of another one as they load:
/// `load` gives `dequant(quantize(W))`, `load_quantized` the quantized form. What
/// `--weights int8|mxfp4|…` runs. Under [`Scheme::Fp8`] a weight the inner source already holds
/// in FP8 (a hub FP8 checkpoint) is kept as stored, its own scales included, not requantized.
pub struct QuantizeOnLoad<S> {
    pub inner: S,
    pub scheme: Scheme,
}

impl<S: TensorSource> TensorSource for QuantizeOnLoad<S> {
    fn holds(&self, t: Tensor) -> Option<bool> {
        self.inner.holds(t)
    }

    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        match self.load_quantized(t, cfg)? {
            Some(q) => Ok(q.dequant()),
            None => self.inner.load(t, cfg),
        }
    }

    fn load_quantized(&mut self, t: Tensor, cfg: &Config) -> Result<Option<QuantTensor>> {
        if !quantizes(self.scheme, t) {
            return Ok(None);
        }
        if self.scheme == Scheme::Fp8 {
            if let Some(q @ QuantTensor::Fp8(_)) = self.inner.load_quantized(t, cfg)? {
                return Ok(Some(q));
            }
        }
        let w = self.inner.load(t, cfg)?;
        quantize_tensor(self.scheme, t, cfg, &w).map(Some)
    }

    fn load_raw(&mut self, t: Tensor, cfg: &Config) -> Result<Option<crate::weights::RawDense<'_>>> {
        match quantizes(self.scheme, t) {
            true => Ok(None),
            false => self.inner.load_raw(t, cfg),
        }
    }
}

/// `weights` with every weight [`quantizes`] names replaced by `dequant(quantize(W))` (what a
/// model under `scheme` computes with on the reference).
pub fn quantized_weights(weights: &crate::weights::Weights, cfg: &Config, scheme: Scheme) -> Result<crate::weights::Weights> {
    crate::weights::Weights::load(&mut QuantizeOnLoad { inner: crate::weights::InMemory(weights), scheme }, cfg)
}
