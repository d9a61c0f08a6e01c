//! Quantized HF directories: safetensors layout, config.json marker, writer and reader.
//!
//! For every linear weight `X.weight` of the llama blocks (q, k, v, o, gate, up, down):
//! ```text
//! int8  : X.weight         I8  [out, in]
//!         X.weight_scale   F32 [out]  (per channel)  or  [out, in/g]  (group g)
//! mxfp4 : X.weight_blocks  U8  [out, in/32, 16]
//!         X.weight_scales  U8  [out, in/32]
//! q4_0  : X.weight_blocks  U8  [out, in/32, 16]   (nibbles as mxfp4's; `super::q4`)
//!         X.weight_scales  F16 [out, in/32]
//! q4_1  : as q4_0, and X.weight_mins F16 [out, in/32]
//! fp8   : X.weight            F8_E4M3 [out, in]   (a hub `fp8` checkpoint: `super::fp8_hf`)
//!         X.weight_scale_inv  F32 [out]           (per channel)
//! ```
//! An untied `lm_head.weight` is stored the same way under int8 (`super::quantizes`; a
//! directory written before that holds it in F32, and still loads: the lm_head is read
//! quantized only when stored so). Token embeddings, MXFP4's and Q4's lm_head and the RMSNorm gains
//! stay **F32**: the reference computes in f32, so a quantized directory then loads to exactly
//! the weights `--weights` builds in memory (`dequant(quantize(W))` for the quantized ones, W
//! for the rest), and the drift report measures the quantization alone. A GPU backend rounds
//! the F32 ones to its own `--dtype` on upload.
//!
//! config.json carries `"quantization_config": {"quant_method": "int8" | "mxfp4" | "q4_0" |
//! "q4_1", "group_size": N | null}` (int8: the group, null = per channel; the others: 32). Config parsing
//! ignores the key; [`read_quant_config`] reads it. q/k rows are written in HF half-split order
//! (a GGUF source's adjacent-pair rows are permuted back), like every HF directory.

use std::path::Path;

use safetensors::Dtype;
use serde_json::Value as Json;

use super::{mxfp4, quantize_tensor, Int8Weight, Mxfp4Weight, Q4Weight, QuantTensor, Scheme};
use crate::config::{Config, RopeLayout};
use crate::error::{Error, Result};
use crate::loader::{hf_config_json, permute_for_half_split, SafetensorsDir};
use crate::weights::{Naming, Tensor, TensorSource};

/// Key of the int8 scales of linear weight `name` (`X.weight` → `X.weight_scale`).
pub fn int8_scale_key(name: &str) -> String {
    format!("{name}_scale")
}
/// Key of the MXFP4 nibbles of `name` (`X.weight` → `X.weight_blocks`).
pub fn mxfp4_blocks_key(name: &str) -> String {
    format!("{name}_blocks")
}
/// Key of the MXFP4 scales of `name` (`X.weight` → `X.weight_scales`).
pub fn mxfp4_scales_key(name: &str) -> String {
    format!("{name}_scales")
}
/// Key of the Q4_1 offsets of `name` (`X.weight` → `X.weight_mins`).
pub fn q4_mins_key(name: &str) -> String {
    format!("{name}_mins")
}

/// The `quantization_config` object written into config.json.
pub fn config_json(scheme: Scheme) -> Json {
    serde_json::json!({ "quant_method": scheme.method(), "group_size": scheme.group_size() })
}

/// The scheme of config.json's `quantization_config`; `None` when the file or key is absent.
pub fn read_quant_config(path: &Path) -> Result<Option<Scheme>> {
    read_quant_configs(path).map(|(scheme, _)| scheme)
}

/// config.json's `quantization_config`, read once: tandem's own scheme, or the FP8 settings of
/// a hub FP8 checkpoint (`super::fp8_hf`: those carry their format in each tensor's dtype);
/// both `None` when the file or key is absent.
pub fn read_quant_configs(path: &Path) -> Result<(Option<Scheme>, Option<super::fp8_hf::Fp8Config>)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, None)),
        Err(e) => return Err(Error::io(path, e)),
    };
    let j: Json = serde_json::from_str(&text).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))?;
    let Some(q) = j.get("quantization_config").filter(|v| !v.is_null()) else { return Ok((None, None)) };
    let key = |k: &str| format!("quantization_config.{k}");
    let method = q.get("quant_method").and_then(Json::as_str).ok_or_else(|| Error::key(path, key("quant_method"), "missing or not a string"))?;
    if super::fp8_hf::is_fp8_method(method) {
        return Ok((None, super::fp8_hf::parse(path, q)?));
    }
    let group = match q.get("group_size") {
        None | Some(Json::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .map(|g| g as usize)
                .ok_or_else(|| Error::key(path, key("group_size"), format!("{v} is not a non-negative integer or null")))?,
        ),
    };
    let scheme = Scheme::from_method(method, group).map_err(|e| match e {
        Error::Input(m) => Error::key(path, key("quant_method"), m),
        e => e,
    })?;
    Ok((Some(scheme), None))
}

/// A stored tensor that must exist with `dtype` and `shape`; errors name file, key and shape.
fn expect<'a>(st: &'a SafetensorsDir, key: &str, dtype: Dtype, shape: &[usize], why: &str) -> Result<&'a [u8]> {
    if !st.contains(key) {
        return Err(Error::tensor(&st.dir, key, format!("missing from every *.safetensors file ({why} needs it: {dtype:?} {shape:?})")));
    }
    let r = st.raw(key)?;
    if r.dtype != dtype {
        return Err(Error::tensor(r.path, key, format!("dtype {:?} with shape {:?}, expected {dtype:?} {shape:?} ({why})", r.dtype, r.shape)));
    }
    if r.shape != shape {
        return Err(Error::tensor(r.path, key, format!("shape {:?}, expected {shape:?} ({why})", r.shape)));
    }
    Ok(r.data)
}

/// Whether `t` is stored quantized in a directory whose config declares `scheme`: every
/// [`super::is_linear`] weight must be (FP8: those stored as F8_E4M3); an lm_head is when its key holds I8 (int8) or its
/// `_blocks` key exists (mxfp4, q4) — directories written before int8 quantized it hold F32.
pub fn stored_quantized(st: &SafetensorsDir, t: Tensor, scheme: Scheme) -> bool {
    if scheme == Scheme::Fp8 {
        // A hub checkpoint may leave some linear weights unquantized (its `ignore` list).
        return super::is_linear(t) && st.raw(&t.name(Naming::Hf)).is_ok_and(|r| r.dtype == Dtype::F8_E4M3);
    }
    if super::is_linear(t) {
        return true;
    }
    if t != Tensor::LmHead {
        return false;
    }
    let name = t.name(Naming::Hf);
    match scheme {
        Scheme::Int8(_) => st.raw(&name).is_ok_and(|r| r.dtype == Dtype::I8),
        Scheme::Mxfp4 | Scheme::Q4_0 | Scheme::Q4_1 => st.contains(&mxfp4_blocks_key(&name)),
        Scheme::Fp8 => false,
    }
}

/// Read weight `t` (stored quantized: [`stored_quantized`]) of a directory whose config
/// declares `scheme`.
pub fn read_quantized(st: &SafetensorsDir, t: Tensor, cfg: &Config, scheme: Scheme) -> Result<QuantTensor> {
    let name = t.name(Naming::Hf);
    let (out, in_dim) = match t.shape(cfg)[..] {
        [o, i] => (o, i),
        _ => return Err(Error::tensor(&st.dir, &name, "is not a matrix")),
    };
    let at = |key: &str, e: Error| match e {
        Error::Input(m) => Error::tensor(&st.dir, key, m),
        e => e,
    };
    match scheme {
        Scheme::Fp8 => {
            let r = st.raw(&name)?;
            if r.shape != [out, in_dim] {
                return Err(Error::tensor(r.path, &name, format!("shape {:?}, expected [{out}, {in_dim}]", r.shape)));
            }
            st.fp8_weight(r.path, &name, &r.shape, r.data).map(QuantTensor::Fp8)
        }
        Scheme::Int8(g) => {
            let why = format!("quantization_config {scheme}");
            g.check(out, in_dim).map_err(|e| at(&name, e))?;
            let q = expect(st, &name, Dtype::I8, &[out, in_dim], &why)?.iter().map(|&b| b as i8).collect();
            let sk = int8_scale_key(&name);
            let s = expect(st, &sk, Dtype::F32, &g.scale_shape(out, in_dim), &why)?;
            let scales = s.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            Int8Weight::from_parts(&sk, out, in_dim, g, q, scales).map(QuantTensor::Int8).map_err(|e| at(&sk, e))
        }
        Scheme::Mxfp4 | Scheme::Q4_0 | Scheme::Q4_1 => {
            // The packed nibbles (one layout: `mxfp4`'s), then the format's block scales.
            let why = format!("quantization_config {scheme}");
            let fmt = if scheme == Scheme::Mxfp4 { "MXFP4" } else { "Q4" };
            if in_dim % mxfp4::BLOCK != 0 {
                return Err(Error::tensor(
                    &st.dir,
                    &name,
                    format!("shape [{out}, {in_dim}]: in is not a multiple of the {}-element {fmt} block", mxfp4::BLOCK),
                ));
            }
            let nb = in_dim / mxfp4::BLOCK;
            let bk = mxfp4_blocks_key(&name);
            let blocks = expect(st, &bk, Dtype::U8, &[out, nb, mxfp4::BLOCK_BYTES], &why)?.to_vec();
            let sk = mxfp4_scales_key(&name);
            if scheme == Scheme::Mxfp4 {
                let scales = expect(st, &sk, Dtype::U8, &[out, nb], &why)?.to_vec();
                return Mxfp4Weight::from_parts(&bk, out, in_dim, blocks, scales).map(QuantTensor::Mxfp4).map_err(|e| at(&bk, e));
            }
            let halves = |key: &str| -> Result<Vec<half::f16>> {
                let b = expect(st, key, Dtype::F16, &[out, nb], &why)?;
                Ok(b.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]])).collect())
            };
            let d = halves(&sk)?;
            let m = if scheme == Scheme::Q4_1 { Some(halves(&q4_mins_key(&name))?) } else { None };
            Q4Weight::from_parts(&bk, out, in_dim, blocks, d, m).map(QuantTensor::Q4).map_err(|e| at(&bk, e))
        }
    }
}

/// Every tensor of `cfg` in file order (lm_head only when untied).
pub fn all_tensors(cfg: &Config) -> Vec<Tensor> {
    let mut v = vec![Tensor::TokEmbd];
    if !cfg.tied_embeddings {
        v.push(Tensor::LmHead);
    }
    for l in 0..cfg.n_layers {
        v.extend(Tensor::layer(l));
    }
    v.push(Tensor::OutNorm);
    v
}

/// What [`write_quantized_hf_dir`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteReport {
    pub tensors: usize,
    /// Linear weights stored quantized.
    pub quantized: usize,
    /// Bytes the linear weights take in f32.
    pub linear_f32_bytes: usize,
    /// Bytes they take quantized (values + scales).
    pub linear_quant_bytes: usize,
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Write every tensor of `src` under `cfg` into `dir` (config.json + model.safetensors) with
/// the linear weights quantized by `scheme`. A GGUF source (`RopeLayout::Adjacent`) gets its
/// q/k rows permuted back to HF half-split order first (quantization is per row, so this
/// commutes with the permutation).
pub fn write_quantized_hf_dir(dir: &Path, cfg: &Config, src: &mut dyn TensorSource, scheme: Scheme) -> Result<WriteReport> {
    let mut bufs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut rep = WriteReport::default();
    for t in all_tensors(cfg) {
        let mut w = src.load(t, cfg)?;
        if cfg.rope_layout == RopeLayout::Adjacent {
            match t {
                Tensor::Wq(_) => w = permute_for_half_split(&w, cfg.n_heads, cfg.head_dim, cfg.hidden),
                Tensor::Wk(_) => w = permute_for_half_split(&w, cfg.n_kv_heads, cfg.head_dim, cfg.hidden),
                _ => {}
            }
        }
        let (name, shape) = (t.name(Naming::Hf), t.shape(cfg));
        rep.tensors += 1;
        if !super::quantizes(scheme, t) {
            bufs.push((name, Dtype::F32, shape, le_bytes(&w)));
            continue;
        }
        let q = quantize_tensor(scheme, t, cfg, &w)?;
        rep.quantized += 1;
        rep.linear_f32_bytes += 4 * w.len();
        rep.linear_quant_bytes += q.storage_bytes();
        match q {
            QuantTensor::Int8(x) => {
                let s = x.scale_shape();
                bufs.push((int8_scale_key(&name), Dtype::F32, s, le_bytes(x.scales())));
                bufs.push((name, Dtype::I8, shape, x.q().iter().map(|&v| v as u8).collect()));
            }
            QuantTensor::Mxfp4(x) => {
                bufs.push((mxfp4_blocks_key(&name), Dtype::U8, x.blocks_shape(), x.blocks().to_vec()));
                bufs.push((mxfp4_scales_key(&name), Dtype::U8, x.scales_shape(), x.scales().to_vec()));
            }
            QuantTensor::Q4(x) => {
                let halves = |v: &[half::f16]| v.iter().flat_map(|h| h.to_le_bytes()).collect::<Vec<u8>>();
                bufs.push((mxfp4_blocks_key(&name), Dtype::U8, x.blocks_shape(), x.blocks().to_vec()));
                bufs.push((mxfp4_scales_key(&name), Dtype::F16, x.scales_shape(), halves(x.d())));
                if let Some(m) = x.m() {
                    bufs.push((q4_mins_key(&name), Dtype::F16, x.scales_shape(), halves(m)));
                }
            }
            QuantTensor::Fp8(x) => {
                // A hub `fp8` checkpoint: codes as F8_E4M3, a scale per output channel.
                bufs.push((super::fp8_hf::scale_inv_key(&name), Dtype::F32, x.granularity.shape(x.out(), x.in_dim()), le_bytes(&x.scales)));
                bufs.push((name, Dtype::F8_E4M3, shape, x.codes));
            }
            // `quantize_tensor` writes no ggml blocks (they come from GGUF files only).
            QuantTensor::Ggml { ty, .. } => return Err(Error::Input(format!("{name}: {} blocks are not stored in safetensors", ty.name()))),
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut j = hf_config_json(cfg);
    j["quantization_config"] = config_json(scheme);
    let cp = dir.join("config.json");
    let text = serde_json::to_string_pretty(&j).map_err(|e| Error::format(&cp, e.to_string()))?;
    std::fs::write(&cp, text).map_err(|e| Error::io(&cp, e))?;
    let views = bufs
        .iter()
        .map(|(n, d, s, b)| {
            safetensors::tensor::TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)).map_err(|e| Error::tensor(dir, n, e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let out = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &out).map_err(|e| Error::format(&out, e.to_string()))?;
    Ok(rep)
}
