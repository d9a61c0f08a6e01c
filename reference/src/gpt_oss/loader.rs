//! Opening a GPT-OSS checkpoint: an HF directory (config.json + *.safetensors, experts in
//! MXFP4 `*_blocks` / `*_scales`) or a llama.cpp GGUF (experts in ggml MXFP4, type 39).
//! Only the model is read: a directory without tokenizer.json loads (see
//! [`super::tokenizer::GptOssTokenizer::for_model`] for the tokenizer).

use std::path::Path;

use ndarray::Array1;
use rayon::prelude::*;
use safetensors::Dtype;

use super::config::GptOssConfig;
use super::model::GptOssModel;
use super::weights::{gguf_expert_names, hf_expert_names, Dense, ExpertWeights, GptOssSource, GptOssWeights, StoredExperts, StoredPart};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::loader::SafetensorsDir;
use crate::quant::mxfp4::{self, Mxfp4Weight, BLOCK, BLOCK_BYTES, GGML_BLOCK_BYTES};
use crate::weights::RawDense;

/// Open `path` (an HF directory or a `.gguf` file) and load config + weights.
pub fn load(path: &Path) -> Result<GptOssModel> {
    let md = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if md.is_dir() {
        load_hf_dir(path)
    } else {
        load_gguf(path)
    }
}

/// An HF directory: `config.json` (`model_type: gpt_oss`) and the safetensors files.
pub fn load_hf_dir(dir: &Path) -> Result<GptOssModel> {
    let config = GptOssConfig::from_hf_json(&dir.join("config.json"))?;
    let mut st = SafetensorsDir::open(dir)?;
    let weights = GptOssWeights::load(&mut st, &config)?;
    Ok(GptOssModel::new(config, weights))
}

/// A llama.cpp GGUF with `general.architecture = gpt-oss`.
pub fn load_gguf(path: &Path) -> Result<GptOssModel> {
    let mut g = GgufFile::open(path)?;
    let config = GptOssConfig::from_gguf(&g)?;
    let weights = GptOssWeights::load(&mut g, &config)?;
    Ok(GptOssModel::new(config, weights))
}

/// A stored U8 tensor that must have `shape`; errors name the file and tensor.
fn raw_u8<'a>(st: &'a SafetensorsDir, key: &str, shape: &[usize]) -> Result<&'a [u8]> {
    if !st.contains(key) {
        return Err(Error::tensor(&st.dir, key, format!("missing from every *.safetensors file (MXFP4 experts need it: U8 {shape:?})")));
    }
    let r = st.raw(key)?;
    if r.dtype != Dtype::U8 || r.shape != shape {
        return Err(Error::tensor(r.path, key, format!("{:?} {:?}, expected U8 {shape:?}", r.dtype, r.shape)));
    }
    Ok(r.data)
}

/// A float tensor (F32/F16/BF16) that must have `shape`.
fn float_tensor(st: &SafetensorsDir, key: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let (got, data) = st.get(key)?;
    if got != shape {
        let p = st.raw(key).map(|r| r.path.to_path_buf()).unwrap_or_else(|_| st.dir.clone());
        return Err(Error::tensor(p, key, format!("shape {got:?}, expected {shape:?}")));
    }
    Ok(data)
}

/// Rows `rows` of a row-major byte matrix with `per_row` bytes per row, concatenated.
fn pick_rows(bytes: &[u8], per_row: usize, rows: impl Iterator<Item = usize>) -> Vec<u8> {
    rows.flat_map(|r| &bytes[r * per_row..(r + 1) * per_row]).copied().collect()
}

/// One expert matrix: rows `first_row + rows` of a `key_blocks` `[E·R, in/32, 16]` /
/// `key_scales` `[E·R, in/32]` pair (`what` says which part, for errors).
fn hf_matrix(
    st: &SafetensorsDir,
    key: &str,
    what: &str,
    (blocks, scales): (&[u8], &[u8]),
    first_row: usize,
    rows: &[usize],
    in_dim: usize,
) -> Result<Mxfp4Weight> {
    let nb = in_dim / BLOCK;
    let b = pick_rows(blocks, nb * BLOCK_BYTES, rows.iter().map(|r| first_row + r));
    let s = pick_rows(scales, nb, rows.iter().map(|r| first_row + r));
    Mxfp4Weight::from_parts(what, rows.len(), in_dim, b, s).map_err(|e| Error::tensor(&st.dir, format!("{key}_blocks"), e.to_string()))
}

impl GptOssSource for SafetensorsDir {
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Vec<f32>> {
        float_tensor(self, &t.hf_name(), &t.shape(cfg))
    }

    /// `gate_up_proj_*` `[E, 2F, …]` holds gate in rows 0::2 and up in rows 1::2; `down_proj_*`
    /// `[E, C, …]`. Biases may be F32, F16 or BF16.
    fn experts(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
        let (gu, dn) = hf_expert_names(l);
        let key = |p: &str, s: &str| format!("{p}_{s}");
        let gu_blocks = raw_u8(self, &key(&gu, "blocks"), &[e_n, 2 * f, c / BLOCK, BLOCK_BYTES])?;
        let gu_scales = raw_u8(self, &key(&gu, "scales"), &[e_n, 2 * f, c / BLOCK])?;
        let gu_bias = float_tensor(self, &key(&gu, "bias"), &[e_n, 2 * f])?;
        let dn_blocks = raw_u8(self, &key(&dn, "blocks"), &[e_n, c, f / BLOCK, BLOCK_BYTES])?;
        let dn_scales = raw_u8(self, &key(&dn, "scales"), &[e_n, c, f / BLOCK])?;
        let dn_bias = float_tensor(self, &key(&dn, "bias"), &[e_n, c])?;
        let gate_rows: Vec<usize> = (0..f).map(|i| 2 * i).collect();
        let up_rows: Vec<usize> = (0..f).map(|i| 2 * i + 1).collect();
        let down_rows: Vec<usize> = (0..c).collect();
        let st: &SafetensorsDir = self;
        (0..e_n)
            .map(|e| {
                let gu_b = &gu_bias[e * 2 * f..(e + 1) * 2 * f];
                Ok(ExpertWeights {
                    gate: hf_matrix(st, &gu, &format!("expert {e} gate (rows 0::2)"), (gu_blocks, gu_scales), e * 2 * f, &gate_rows, c)?,
                    gate_bias: gate_rows.iter().map(|&r| gu_b[r]).collect(),
                    up: hf_matrix(st, &gu, &format!("expert {e} up (rows 1::2)"), (gu_blocks, gu_scales), e * 2 * f, &up_rows, c)?,
                    up_bias: up_rows.iter().map(|&r| gu_b[r]).collect(),
                    down: hf_matrix(st, &dn, &format!("expert {e} down"), (dn_blocks, dn_scales), e * c, &down_rows, f)?,
                    down_bias: Array1::from_vec(dn_bias[e * c..(e + 1) * c].to_vec()),
                })
            })
            .collect()
    }

    fn dense_raw(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Option<RawDense<'_>>> {
        self.raw_dense(&t.hf_name(), &t.shape(cfg))
    }

    /// gate|up as stored (one part: its rows already interleave gate and up), down likewise.
    fn experts_stored(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Option<[StoredExperts<'_>; 2]>> {
        let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
        let (gu, dn) = hf_expert_names(l);
        let st: &SafetensorsDir = self;
        let one = |name: &str, out: usize, in_dim: usize| -> Result<StoredExperts<'_>> {
            let key = |s: &str| format!("{name}_{s}");
            let blocks = raw_u8(st, &key("blocks"), &[e_n, out, in_dim / BLOCK, BLOCK_BYTES])?;
            let scales = raw_u8(st, &key("scales"), &[e_n, out, in_dim / BLOCK])?;
            let bias = float_tensor(st, &key("bias"), &[e_n, out])?;
            let s = StoredExperts { name: key("blocks"), parts: vec![StoredPart::Split { blocks, scales }], n_experts: e_n, rows: out, in_dim, bias };
            s.check()?;
            Ok(s)
        };
        Ok(Some([one(&gu, 2 * f, c)?, one(&dn, c, f)?]))
    }
}

impl GptOssSource for GgufFile {
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Vec<f32>> {
        self.tensor_f32(&t.gguf_name(), Some(&t.shape(cfg))).map(|(_, d)| d)
    }

    /// `ffn_{gate,up}_exps.weight` `[E, F, C]` and `ffn_down_exps.weight` `[E, C, F]` in ggml
    /// MXFP4 (type 39), repacked exactly ([`mxfp4::from_ggml`]); `.bias` `[E, out]` any float type.
    fn experts(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
        let mut parts = Vec::with_capacity(3);
        for (name, (out, in_dim)) in gguf_expert_names(l).iter().zip([(f, c), (f, c), (c, f)]) {
            let wname = format!("{name}.weight");
            let bytes = gguf_experts(self, &wname, [e_n, out, in_dim])?;
            let per_expert = out * in_dim / BLOCK * GGML_BLOCK_BYTES;
            // The experts repacked in parallel (a GPT-OSS-20B layer's are ~0.4 GB).
            let mats = (0..e_n)
                .into_par_iter()
                .map(|e| mxfp4::from_ggml(&format!("{wname}[{e}]"), out, in_dim, &bytes[e * per_expert..(e + 1) * per_expert]))
                .collect::<Result<Vec<_>>>()
                .map_err(|e| Error::tensor(&self.path, &wname, e.to_string()))?;
            let (_, bias) = self.tensor_f32(&format!("{name}.bias"), Some(&[e_n, out]))?;
            parts.push((mats, bias, out));
        }
        let mut it = parts
            .into_iter()
            .map(|(mats, bias, out)| mats.into_iter().zip(bias.chunks_exact(out).map(|b| Array1::from_vec(b.to_vec())).collect::<Vec<_>>()));
        let (Some(gate), Some(up), Some(down)) = (it.next(), it.next(), it.next()) else {
            return Err(Error::Input(format!("block {l}: expert tensors incomplete")));
        };
        Ok(gate
            .zip(up)
            .zip(down)
            .map(|(((gate, gate_bias), (up, up_bias)), (down, down_bias))| ExpertWeights { gate, gate_bias, up, up_bias, down, down_bias })
            .collect())
    }

    fn dense_raw(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Option<RawDense<'_>>> {
        self.raw_dense(&t.gguf_name(), &t.shape(cfg))
    }

    /// gate|up as two parts (`ffn_gate_exps`, `ffn_up_exps`; their biases interleaved here),
    /// down as one.
    fn experts_stored(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Option<[StoredExperts<'_>; 2]>> {
        let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
        let [gate, up, down] = gguf_expert_names(l);
        let g: &GgufFile = self;
        let bias = |name: &str, out: usize| g.tensor_f32(&format!("{name}.bias"), Some(&[e_n, out])).map(|(_, b)| b);
        let (gb, ub) = (bias(&gate, f)?, bias(&up, f)?);
        let gate_up_bias =
            gb.chunks_exact(f.max(1)).zip(ub.chunks_exact(f.max(1))).flat_map(|(g, u)| g.iter().zip(u).flat_map(|(&g, &u)| [g, u])).collect();
        let part = |name: &str, out: usize, in_dim: usize| gguf_experts(g, &format!("{name}.weight"), [e_n, out, in_dim]).map(StoredPart::Ggml);
        let gu = StoredExperts {
            name: format!("{gate}.weight / {up}.weight"),
            parts: vec![part(&gate, f, c)?, part(&up, f, c)?],
            n_experts: e_n,
            rows: f,
            in_dim: c,
            bias: gate_up_bias,
        };
        let dn = StoredExperts {
            name: format!("{down}.weight"),
            parts: vec![part(&down, c, f)?],
            n_experts: e_n,
            rows: c,
            in_dim: f,
            bias: bias(&down, c)?,
        };
        gu.check()?;
        dn.check()?;
        Ok(Some([gu, dn]))
    }
}

/// The bytes of MXFP4 expert tensor `wname`, which must have `shape` `[E, out, in]`; errors
/// name the file and tensor (missing, another type, another shape).
fn gguf_experts<'a>(g: &'a GgufFile, wname: &str, shape: [usize; 3]) -> Result<&'a [u8]> {
    let info = match g.mxfp4_info(wname) {
        Some(i) => i,
        None => {
            let what = g
                .tensor_info(wname)
                .map_or("missing".to_string(), |t| format!("stored as {}: only MXFP4 (type 39) experts are supported", t.ty.name()));
            return Err(Error::tensor(&g.path, wname, what));
        }
    };
    if info.shape != shape {
        return Err(Error::tensor(&g.path, wname, format!("shape {:?}, expected {shape:?}", info.shape)));
    }
    Ok(g.tensor_bytes_at(info.start, info.len))
}
