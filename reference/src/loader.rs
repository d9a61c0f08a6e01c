//! Opening a model: a `.gguf` file or an HF directory (config.json + *.safetensors).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::config::{Config, RopeLayout};
use crate::dequant::{dequant_bf16, dequant_f16, dequant_f32};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::quant::{self, QuantTensor, Scheme};
use crate::weights::{Naming, RawDense, RawDtype, Tensor, TensorSource, Weights};

impl TensorSource for GgufFile {
    fn holds(&self, t: Tensor) -> Option<bool> {
        Some(self.tensor_info(&t.name(Naming::Gguf)).is_some())
    }

    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        let name = t.name(Naming::Gguf);
        let (_, data) = self.tensor_f32(&name, Some(&t.shape(cfg)))?;
        Ok(data)
    }

    fn load_raw(&mut self, t: Tensor, cfg: &Config) -> Result<Option<RawDense<'_>>> {
        self.raw_dense(&t.name(Naming::Gguf), &t.shape(cfg))
    }

    fn load_raw_as(&mut self, t: Tensor, _cfg: &Config, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        self.raw_dense(&t.name(Naming::Gguf), want)
    }

    /// A quantized linear weight (or untied `output.weight`) as the file stores it, so a backend
    /// keeps the file's weights without requantizing: Q8_0 as INT8 with groups of 32 (`q` as
    /// stored, the f16 block scale widened to f32: `d · q`); Q4_0 / Q4_1 as
    /// [`crate::quant::Q4Weight`] (4-bit codes, the f16 d and m as stored); Q2_K .. Q6_K,
    /// Q5_0 / Q5_1, IQ4_NL / IQ4_XS as their blocks ([`QuantTensor::Ggml`]). Q8_0 stays INT8
    /// groups: the same bytes a weight, and the tensor-core GEMMs already decode that format. Each is exactly what
    /// [`TensorSource::load`] dequantizes. Other types (and a Q8_0 block scale that is negative,
    /// or any d or m that is not finite, legal in ggml but not here) give `None`.
    fn load_quantized(&mut self, t: Tensor, cfg: &Config) -> Result<Option<crate::quant::QuantTensor>> {
        use crate::dequant::GgmlType;
        use crate::quant::{Granularity, Int8Weight, QuantTensor};
        if !(crate::quant::is_linear(t) || t == Tensor::LmHead) {
            return Ok(None);
        }
        let name = t.name(Naming::Gguf);
        let want = t.shape(cfg);
        let info = self.tensor_info(&name).ok_or_else(|| Error::tensor(&self.path, &name, "missing"))?;
        // The types kept as stored (the GPU decodes their blocks in its kernels): the k-quants
        // and llama-quantize's fallbacks for rows that are no whole number of super-blocks.
        let kept = matches!(
            info.ty,
            GgmlType::Q4K
                | GgmlType::Q5K
                | GgmlType::Q6K
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::IQ4NL
                | GgmlType::Q2K
                | GgmlType::Q3K
                | GgmlType::IQ4XS
        );
        if !kept && !matches!(info.ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1) {
            return Ok(None);
        }
        if info.shape != want {
            return Err(Error::tensor(&self.path, &name, format!("shape {:?}, expected {:?}", info.shape, want)));
        }
        if kept {
            let bytes = self.tensor_bytes(info).to_vec();
            return QuantTensor::ggml(&name, info.ty, want[0], want[1], bytes).map(Some).map_err(|e| Error::tensor(&self.path, &name, e.to_string()));
        }
        if matches!(info.ty, GgmlType::Q4_0 | GgmlType::Q4_1) {
            // Kept at 4 bits (`crate::quant::q4`): nibbles repacked, d and m as stored.
            let offset = info.ty == GgmlType::Q4_1;
            let bytes = self.tensor_bytes(info);
            return match crate::quant::q4::from_ggml(&name, want[0], want[1], bytes, offset) {
                Ok(w) => Ok(Some(QuantTensor::Q4(w))),
                // A non-finite d or m (which `from_parts` refuses) loads dequantized instead, as
                // a Q8_0 one does; the blocks are scanned for it only then.
                Err(_) if !q4_scales_finite(bytes, offset) => Ok(None),
                Err(e) => Err(Error::tensor(&self.path, &name, e.to_string())),
            };
        }
        // One Q8_0 block: its f32 scale into `s`, its 32 values into `q`.
        let block = |blk: &[u8], s: &mut f32, q: &mut [i8]| {
            *s = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            q.iter_mut().zip(&blk[2..]).for_each(|(q, &b)| *q = b as i8);
        };
        let (out, in_dim) = (want[0], want[1]);
        let bytes = self.tensor_bytes(info);
        let bb = info.ty.block_bytes();
        // Over all cores, in chunks of blocks (a 7B model's weights pass through here).
        use rayon::prelude::*;
        const BLOCKS: usize = 4096;
        let mut q = vec![0i8; bytes.len() / bb * 32];
        let mut scales = vec![0f32; bytes.len() / bb];
        q.par_chunks_mut(32 * BLOCKS).zip(scales.par_chunks_mut(BLOCKS)).zip(bytes.par_chunks(bb * BLOCKS)).for_each(|((q, s), b)| {
            for ((q, s), blk) in q.chunks_exact_mut(32).zip(s).zip(b.chunks_exact(bb)) {
                block(blk, s, q);
            }
        });
        if scales.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
            return Ok(None);
        }
        Int8Weight::from_parts(&name, out, in_dim, Granularity::Group(32), q, scales).map(|w| Some(QuantTensor::Int8(w)))
    }
}

/// Whether every block of ggml Q4_0 (`offset` false) / Q4_1 `bytes` has a finite d (and m).
fn q4_scales_finite(bytes: &[u8], offset: bool) -> bool {
    let finite = |g: &[u8], at: usize| half::f16::from_le_bytes([g[at], g[at + 1]]).is_finite();
    bytes.chunks_exact(crate::quant::q4::ggml_block_bytes(offset)).all(|g| finite(g, 0) && (!offset || finite(g, 2)))
}

/// The memory-mapped `*.safetensors` files of an HF directory.
pub struct SafetensorsDir {
    pub dir: PathBuf,
    maps: Vec<(PathBuf, Mmap)>,
    /// tensor name → index into `maps`.
    index: HashMap<String, usize>,
    /// `quantization_config` of the directory's config.json: linear weights are stored
    /// quantized in this scheme (see [`crate::quant::store`]).
    pub quant: Option<Scheme>,
    /// `quantization_config` of an FP8 checkpoint (`fp8` / `compressed-tensors`): how its
    /// F8_E4M3 weights' scales are laid out ([`crate::quant::fp8_hf`]).
    pub fp8: Option<quant::fp8_hf::Fp8Config>,
    /// Hand out tensors holding NaN or ±Inf (`--allow-nonfinite`); by default loading one is an
    /// error naming it ([`crate::finite`]).
    pub allow_nonfinite: bool,
}

/// One stored tensor, undecoded.
pub struct RawTensor<'a> {
    /// The file it is in.
    pub path: &'a Path,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

impl SafetensorsDir {
    /// Map every `*.safetensors` file in `dir` and index their tensors (headers validated).
    pub fn open(dir: &Path) -> Result<Self> {
        let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut files: Vec<PathBuf> =
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "safetensors")).collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::format(dir, "no *.safetensors files in the directory"));
        }
        let mut maps = Vec::new();
        let mut index = HashMap::new();
        for (i, p) in files.into_iter().enumerate() {
            require_regular_file(&p)?;
            let f = std::fs::File::open(&p).map_err(|e| Error::io(&p, e))?;
            // SAFETY: read-only mapping of a file tandem does not modify while it is mapped.
            let m = unsafe { Mmap::map(&f) }.map_err(|e| Error::io(&p, e))?;
            let st = SafeTensors::deserialize(&m).map_err(|e| Error::format(&p, format!("invalid safetensors: {e}")))?;
            for name in st.names() {
                if index.insert(name.to_string(), i).is_some() {
                    return Err(Error::tensor(&p, name, "appears in more than one safetensors file"));
                }
            }
            maps.push((p, m));
        }
        let (quant, fp8) = quant::store::read_quant_configs(&dir.join("config.json"))?;
        Ok(SafetensorsDir { dir: dir.to_path_buf(), maps, index, quant, fp8, allow_nonfinite: false })
    }

    /// Whether some file holds tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tensor `name` as stored (dtype, shape, bytes), borrowed from the mapping.
    pub fn raw(&self, name: &str) -> Result<RawTensor<'_>> {
        let &i = self.index.get(name).ok_or_else(|| Error::tensor(&self.dir, name, "missing from every *.safetensors file"))?;
        let (p, m) = &self.maps[i];
        let st = SafeTensors::deserialize(m).map_err(|e| Error::format(p, format!("invalid safetensors: {e}")))?;
        let v = st.tensor(name).map_err(|e| Error::tensor(p, name, e.to_string()))?;
        Ok(RawTensor { path: p, dtype: v.dtype(), shape: v.shape().to_vec(), data: v.data() })
    }

    /// Tensor `name` as f32 with its shape (F32/F16/BF16 stored).
    pub fn get(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let &i = self.index.get(name).ok_or_else(|| Error::tensor(&self.dir, name, "missing from every *.safetensors file"))?;
        let (p, m) = &self.maps[i];
        let st = SafeTensors::deserialize(m).map_err(|e| Error::format(p, format!("invalid safetensors: {e}")))?;
        let v = st.tensor(name).map_err(|e| Error::tensor(p, name, e.to_string()))?;
        let mut out = Vec::with_capacity(v.data().len() / 2);
        let dtype = match v.dtype() {
            Dtype::F32 => RawDtype::F32,
            Dtype::F16 => RawDtype::F16,
            Dtype::BF16 => RawDtype::BF16,
            Dtype::F8_E4M3 => return Ok((v.shape().to_vec(), quant::fp8::dequant(&self.fp8_weight(p, name, v.shape(), v.data())?))),
            d => return Err(Error::tensor(p, name, format!("dtype {d:?} is not supported (F32, F16, BF16, F8_E4M3 are)"))),
        };
        self.check_finite(p, name, dtype, v.data())?;
        match dtype {
            RawDtype::F32 => dequant_f32(v.data(), &mut out),
            RawDtype::F16 => dequant_f16(v.data(), &mut out),
            _ => dequant_bf16(v.data(), &mut out),
        }
        Ok((v.shape().to_vec(), out))
    }

    /// FP8 weight `name` (codes `data` of `shape`, in file `path`) with its scale tensor
    /// (`name_scale_inv` or `name_scale`).
    pub fn fp8_weight(&self, path: &Path, name: &str, shape: &[usize], data: &[u8]) -> Result<quant::fp8::Fp8Weight> {
        let key = quant::fp8_hf::scale_key(name, |k| self.contains(k))
            .ok_or_else(|| Error::tensor(path, name, format!("F8_E4M3 weight without its scales ({name}_scale_inv or {name}_scale is missing)")))?;
        let (scale_shape, scales) = self.get(&key)?;
        let w = quant::fp8_hf::weight(self.fp8.unwrap_or_default(), name, shape, data, &scale_shape, scales).map_err(|e| match e {
            Error::Input(m) => Error::tensor(path, name, m.trim_start_matches(&format!("{name}: "))),
            e => e,
        })?;
        Ok(w)
    }

    /// An error naming file `path` and tensor `name` if its stored `bytes` hold a NaN or
    /// infinity (unless [`SafetensorsDir::allow_nonfinite`]).
    fn check_finite(&self, path: &Path, name: &str, dtype: RawDtype, bytes: &[u8]) -> Result<()> {
        if self.allow_nonfinite {
            return Ok(());
        }
        crate::finite::check(path, name, dtype, bytes)
    }
}

impl TensorSource for SafetensorsDir {
    fn holds(&self, t: Tensor) -> Option<bool> {
        Some(self.contains(&t.name(Naming::Hf)))
    }

    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        if let Some(q) = self.load_quantized(t, cfg)? {
            return Ok(q.dequant());
        }
        let name = t.name(Naming::Hf);
        let (shape, data) = self.get(&name)?;
        let want = t.shape(cfg);
        if shape != want {
            let (p, _) = &self.maps[self.index[&name]];
            return Err(Error::tensor(p, name, format!("shape {shape:?}, expected {want:?}")));
        }
        Ok(data)
    }

    fn load_quantized(&mut self, t: Tensor, cfg: &Config) -> Result<Option<QuantTensor>> {
        match self.quant {
            Some(scheme) if quant::store::stored_quantized(self, t, scheme) => quant::store::read_quantized(self, t, cfg, scheme).map(Some),
            // A hub FP8 checkpoint: its F8_E4M3 linear weights kept as stored, with their scales.
            None if quant::is_linear(t) && quant::store::stored_quantized(self, t, Scheme::Fp8) => {
                quant::store::read_quantized(self, t, cfg, Scheme::Fp8).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn load_raw(&mut self, t: Tensor, cfg: &Config) -> Result<Option<RawDense<'_>>> {
        self.load_raw_as(t, cfg, &t.shape(cfg))
    }

    fn load_raw_as(&mut self, t: Tensor, _cfg: &Config, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        if self.quant.is_some_and(|scheme| quant::store::stored_quantized(self, t, scheme)) {
            return Ok(None);
        }
        self.raw_dense(&t.name(Naming::Hf), want)
    }
}

impl GgufFile {
    /// Tensor `name`'s stored bytes (F32 / F16 / BF16, or ggml blocks; `None` for a missing
    /// tensor), after checking its shape is `want` and each row is whole blocks.
    pub fn raw_dense(&self, name: &str, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        let Some(info) = self.tensor_info(name) else {
            return Ok(None);
        };
        let dtype = RawDtype::of(info.ty);
        if info.shape != want {
            return Err(Error::tensor(&self.path, name, format!("shape {:?}, expected {:?}", info.shape, want)));
        }
        // Blocks run along rows (ggml): a row is whole blocks, so any row range is too.
        if want.last().is_some_and(|&c| dtype.bytes_for(c).is_none()) || Some(info.len) != dtype.bytes_for(want.iter().product::<usize>()) {
            return Err(Error::tensor(&self.path, name, format!("{} bytes for shape {want:?} in {dtype:?}", info.len)));
        }
        let bytes = self.tensor_bytes(info);
        self.check_finite(name, dtype, bytes)?;
        Ok(Some(RawDense { dtype, bytes }))
    }
}

impl SafetensorsDir {
    /// Tensor `name`'s stored bytes when it is F32 / F16 / BF16 (`None` for other types and
    /// for a missing tensor), after checking its shape is `want`.
    pub fn raw_dense(&self, name: &str, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        if !self.contains(name) {
            return Ok(None);
        }
        let raw = self.raw(name)?;
        let dtype = match raw.dtype {
            Dtype::F32 => RawDtype::F32,
            Dtype::F16 => RawDtype::F16,
            Dtype::BF16 => RawDtype::BF16,
            _ => return Ok(None),
        };
        if raw.shape != want {
            return Err(Error::tensor(raw.path, name, format!("shape {:?}, expected {want:?}", raw.shape)));
        }
        self.check_finite(raw.path, name, dtype, raw.data)?;
        Ok(Some(RawDense { dtype, bytes: raw.data }))
    }
}

/// An error unless `path` is a regular file (symlinks followed): opening a FIFO or a device
/// blocks or reads forever, a directory is not a file. Checked before a model's files are
/// opened. A missing file is an I/O error naming it.
pub fn require_regular_file(path: &Path) -> Result<()> {
    let md = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if md.is_file() {
        return Ok(());
    }
    let ft = md.file_type();
    #[cfg(unix)]
    let kind = {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "not a file"
        }
    };
    #[cfg(not(unix))]
    let kind = if ft.is_dir() { "a directory" } else { "not a file" };
    Err(Error::format(path, format!("is {kind}, not a regular file")))
}

/// Where a model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFormat {
    Gguf,
    HfDir,
}

/// A loaded model's parts.
pub struct Loaded {
    pub config: Config,
    pub weights: Weights,
    pub format: ModelFormat,
    pub path: PathBuf,
}

/// Open a `.gguf` file or an HF directory and load config + weights (dequantized to f32).
pub fn load(path: &Path) -> Result<Loaded> {
    let md = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if md.is_dir() {
        let config = Config::from_hf_json(&path.join("config.json"))?;
        let mut src = SafetensorsDir::open(path)?;
        let weights = Weights::load(&mut src, &config)?;
        Ok(Loaded { config, weights, format: ModelFormat::HfDir, path: path.to_path_buf() })
    } else {
        require_regular_file(path)?;
        let mut g = GgufFile::open(path)?;
        let config = Config::from_gguf(&g)?;
        debug_assert_eq!(config.rope_layout, RopeLayout::Adjacent);
        let weights = Weights::load(&mut g, &config)?;
        Ok(Loaded { config, weights, format: ModelFormat::Gguf, path: path.to_path_buf() })
    }
}

/// Write `weights` + `config` as an HF directory (config.json + model.safetensors, F32).
pub fn write_hf_dir(dir: &Path, cfg: &Config, weights: &Weights) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let j = hf_config_json(cfg);
    let cp = dir.join("config.json");
    std::fs::write(&cp, serde_json::to_string_pretty(&j).unwrap_or_default()).map_err(|e| Error::io(&cp, e))?;
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    weights.for_each(cfg, |t, s| {
        bufs.push((t.name(Naming::Hf), t.shape(cfg), s.iter().flat_map(|v| v.to_le_bytes()).collect()));
    });
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bufs
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b).map(|v| (n.clone(), v)).map_err(|e| Error::tensor(dir, n, e.to_string()))
        })
        .collect::<Result<_>>()?;
    let out = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &out).map_err(|e| Error::format(&out, e.to_string()))
}

/// The HF `config.json` of `cfg` (llama, or mistral when it has a sliding window).
pub fn hf_config_json(cfg: &Config) -> serde_json::Value {
    let mut j = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_size": cfg.hidden,
        "intermediate_size": cfg.ffn,
        "vocab_size": cfg.vocab,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_eps,
        "max_position_embeddings": cfg.max_ctx,
        "tie_word_embeddings": cfg.tied_embeddings,
        "sliding_window": cfg.sliding_window,
        "bos_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "torch_dtype": "float32",
    });
    if cfg.sliding_window.is_some() {
        j["model_type"] = "mistral".into();
        j["architectures"] = serde_json::json!(["MistralForCausalLM"]);
    }
    j
}

/// Permute the rows of a q/k weight `[n_heads·D, C]` from HF half-split order to the
/// adjacent-pair order GGUF llama files store (what llama.cpp's converter does):
/// within each head, GGUF row `2i + j` is HF row `j·D/2 + i` (j ∈ {0, 1}).
pub fn permute_for_adjacent(w: &[f32], n_heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_dim + j * half + i) * cols;
                let dst = (h * head_dim + 2 * i + j) * cols;
                out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

/// The inverse of [`permute_for_adjacent`]: GGUF adjacent-pair q/k rows back to HF half-split
/// order (HF row `j·D/2 + i` = GGUF row `2i + j`).
pub fn permute_for_half_split(w: &[f32], n_heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_dim + 2 * i + j) * cols;
                let dst = (h * head_dim + j * half + i) * cols;
                out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

/// Write a llama GGUF (v3) of `weights`, every tensor stored as `ty` (norms stay F32).
/// `cfg` must be in HF layout ([`RopeLayout::HalfSplit`]): q/k rows are permuted so the file
/// runs with [`RopeLayout::Adjacent`] like a converted llama checkpoint.
pub fn write_gguf(path: &Path, cfg: &Config, weights: &Weights, ty: crate::dequant::GgmlType) -> Result<()> {
    use crate::gguf::{GgufWriter, Value};
    if cfg.rope_layout != RopeLayout::HalfSplit {
        return Err(Error::Input("write_gguf expects half-split (HF) weights".into()));
    }
    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    w.kv("general.architecture", Value::String("llama".into()))
        .kv("llama.block_count", u(cfg.n_layers))
        .kv("llama.attention.head_count", u(cfg.n_heads))
        .kv("llama.attention.head_count_kv", u(cfg.n_kv_heads))
        .kv("llama.attention.key_length", u(cfg.head_dim))
        .kv("llama.rope.dimension_count", u(cfg.head_dim))
        .kv("llama.embedding_length", u(cfg.hidden))
        .kv("llama.feed_forward_length", u(cfg.ffn))
        .kv("llama.vocab_size", u(cfg.vocab))
        .kv("llama.context_length", u(cfg.max_ctx))
        .kv("llama.rope.freq_base", Value::F32(cfg.rope_theta))
        .kv("llama.attention.layer_norm_rms_epsilon", Value::F32(cfg.rms_eps));
    if let Some(sw) = cfg.sliding_window {
        w.kv("llama.attention.sliding_window", u(sw));
    }
    if let Some(b) = cfg.bos_id {
        w.kv("tokenizer.ggml.bos_token_id", Value::U32(b));
    }
    if let Some(e) = cfg.eos_id {
        w.kv("tokenizer.ggml.eos_token_id", Value::U32(e));
    }
    let mut err = None;
    weights.for_each(cfg, |t, data| {
        let shape = t.shape(cfg);
        let data = match t {
            Tensor::Wq(_) => permute_for_adjacent(data, cfg.n_heads, cfg.head_dim, cfg.hidden),
            Tensor::Wk(_) => permute_for_adjacent(data, cfg.n_kv_heads, cfg.head_dim, cfg.hidden),
            _ => data.to_vec(),
        };
        let tty = if shape.len() == 1 { crate::dequant::GgmlType::F32 } else { ty };
        let row = shape.last().copied().unwrap_or(0);
        if row % tty.block_elems() != 0 && err.is_none() {
            err = Some(Error::tensor(path, t.name(Naming::Gguf), format!("rows of {row} elements are not a whole number of {} blocks", tty.name())));
        }
        w.tensor(&t.name(Naming::Gguf), &shape, tty, &data);
    });
    if let Some(e) = err {
        return Err(e);
    }
    w.write(path)
}
