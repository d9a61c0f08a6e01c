//! GPT-OSS's load from a checkpoint's stored bytes (`GptOssSource::dense_raw` /
//! `experts_stored`: dense tensors converted on their way through the staging buffers, experts
//! repacked row by row from ggml's or HF's packing) against the load from the reference's own
//! weights (`InMemory`: f32 values and per-expert matrices, the path every other GPT-OSS case
//! uses) — every device buffer equal byte for byte. A checkpoint: an HF directory (the
//! transformers fixture's BF16 dense tensors as stored, or the writer's F32) or a GGUF (the
//! writer's: ggml MXFP4 experts, gate and up apart). Bad input: an expert block whose scale is
//! 255 (NaN in E8M0) refused with the tensor, expert, row and block named.

use std::path::{Path, PathBuf};

use optimized::kernels::moe::Experts;
use optimized::kernels::qmatmul::Weight;
use optimized::model::{GpuFfn, GpuModel};
use optimized::{Client, DeviceTensor};
use reference::gguf::GgufFile;
use reference::gpt_oss::weights::{gguf_expert_names, GptOssSource, InMemory};
use reference::gpt_oss::writer::{write_gguf, write_hf_dir};
use reference::gpt_oss::{GptOssConfig, GptOssWeights};
use reference::loader::SafetensorsDir;

use super::gpt_oss::{fixture_files, load, Weights};
use crate::{Case, Dtype, Metrics, Op, Outcome};

/// How the checkpoint stores the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Hf,
    Gguf,
}

/// What the case checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Both loads give the same bytes.
    Same,
    /// A scale byte of 255 in block 0 of `blk.0.ffn_down_exps.weight`'s expert 1: refused.
    NanScale,
}

pub struct GptOssLoadCase {
    pub weights: Weights,
    pub format: Format,
    pub dtype: Dtype,
    pub check: Check,
}

/// An opened checkpoint.
enum Opened {
    Hf(SafetensorsDir),
    Gguf(GgufFile),
}

impl Opened {
    fn source(&mut self) -> &mut dyn GptOssSource {
        match self {
            Opened::Hf(s) => s,
            Opened::Gguf(g) => g,
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A tensor's bytes as the device holds them (`numel · size`, past any rounding up).
fn bytes_of(client: &Client, t: &DeviceTensor) -> Result<Vec<u8>, String> {
    let b = client.read_one(t.handle.clone()).map_err(|e| format!("{e:?}"))?;
    b.get(..t.bytes()).map(<[u8]>::to_vec).ok_or(format!("{} bytes read back, {} expected", b.len(), t.bytes()))
}

/// A tensor a GPT-OSS layer must hold (`None`: absent, or a weight stored otherwise than dense).
fn need(what: String, t: Option<&DeviceTensor>) -> Result<&DeviceTensor, String> {
    t.ok_or(format!("{what}: missing, or not a dense tensor"))
}

fn dense(w: &Weight) -> Option<&DeviceTensor> {
    match w {
        Weight::Dense(t) => Some(t),
        Weight::Quant(_) | Weight::Parts(_) => None,
    }
}

/// `(what, got, want)` tensors of two models, in one order.
#[allow(clippy::type_complexity)]
fn pairs<'a>(a: &'a GpuModel, b: &'a GpuModel) -> Result<Vec<(String, &'a DeviceTensor, &'a DeviceTensor)>, String> {
    let both = |what: String, p: Option<&'a DeviceTensor>, q: Option<&'a DeviceTensor>| {
        Ok::<_, String>((what.clone(), need(what.clone(), p)?, need(what, q)?))
    };
    let mut v = vec![
        ("tok_embd".to_string(), &a.tok_embd, &b.tok_embd),
        both("lm_head".into(), dense(&a.lm_head), dense(&b.lm_head))?,
        ("out_norm".into(), &a.out_norm, &b.out_norm),
    ];
    for (l, (x, y)) in a.layers.iter().zip(&b.layers).enumerate() {
        let (GpuFfn::Moe(xm), GpuFfn::Moe(ym)) = (&x.ffn, &y.ffn) else {
            return Err(format!("layer {l}: not a mixture of experts"));
        };
        let dense = [
            ("attn_norm", Some(&x.attn_norm), Some(&y.attn_norm)),
            ("wqkv", dense(&x.wqkv), dense(&y.wqkv)),
            ("bqkv", x.bqkv.as_ref(), y.bqkv.as_ref()),
            ("wo", dense(&x.wo), dense(&y.wo)),
            ("bo", x.bo.as_ref(), y.bo.as_ref()),
            ("sinks", x.sinks.as_ref(), y.sinks.as_ref()),
            ("ffn_norm", Some(&x.ffn_norm), Some(&y.ffn_norm)),
            ("router", Some(&xm.router), Some(&ym.router)),
            ("router_bias", Some(&xm.router_bias), Some(&ym.router_bias)),
        ];
        for (n, p, q) in dense {
            v.push(both(format!("layer {l} {n}"), p, q)?);
        }
        let experts = |n: &str, p: &'a Experts, q: &'a Experts| {
            p.tensors().into_iter().zip(q.tensors()).map(|((k, p), (_, q))| (format!("layer {l} {n} {k}"), p, q)).collect::<Vec<_>>()
        };
        v.extend(experts("gate|up", &xm.gate_up, &ym.gate_up));
        v.extend(experts("down", &xm.down, &ym.down));
    }
    Ok(v)
}

/// Sets the scale byte of block 0 of expert 1 of `blk.0.ffn_down_exps.weight` to 255.
fn poison_scale(path: &Path, cfg: &GptOssConfig) -> Result<(), String> {
    let name = format!("{}.weight", gguf_expert_names(0)[2]);
    let start = GgufFile::open(path).map_err(err)?.mxfp4_info(&name).ok_or(format!("{name} missing"))?.start;
    let mut bytes = std::fs::read(path).map_err(err)?;
    let at = start + cfg.hidden * cfg.expert_ffn / 32 * 17;
    *bytes.get_mut(at).ok_or("file too short")? = 255;
    std::fs::write(path, bytes).map_err(err)
}

impl GptOssLoadCase {
    /// Writes the checkpoint into `dir`; returns its path and config.
    fn checkpoint(&self, dir: &Path) -> Result<(PathBuf, GptOssConfig), String> {
        let (cfg, w) = load(self.weights)?;
        match (self.format, self.weights) {
            (Format::Hf, Weights::Fixture(which)) => {
                for (name, bytes) in fixture_files(which) {
                    std::fs::write(dir.join(name), bytes).map_err(err)?;
                }
                Ok((dir.to_path_buf(), cfg))
            }
            (Format::Hf, _) => write_hf_dir(dir, &cfg, &w).map(|_| (dir.to_path_buf(), cfg)).map_err(err),
            (Format::Gguf, _) => {
                let p = dir.join("m.gguf");
                write_gguf(&p, &cfg, &w).map_err(err)?;
                Ok((p, cfg))
            }
        }
    }

    fn body(&self, client: &Client, dir: &Path) -> Result<Outcome, String> {
        if !self.dtype.device().supported(client) {
            return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
        }
        let (path, cfg) = self.checkpoint(dir)?;
        if self.check == Check::NanScale {
            poison_scale(&path, &cfg)?;
        }
        let mut opened = match self.format {
            Format::Hf => Opened::Hf(SafetensorsDir::open(&path).map_err(err)?),
            Format::Gguf => Opened::Gguf(GgufFile::open(&path).map_err(err)?),
        };
        let backend = optimized::Backend::of(client);
        let dd = self.dtype.device();
        let stored = GpuModel::load_gpt_oss(client.clone(), backend, opened.source(), &cfg, dd, client.kernels());
        if self.check == Check::NanScale {
            let e = match stored {
                Ok(_) => return Ok(Outcome::Fail("a scale of 255 loaded".into())),
                Err(e) => e.to_string(),
            };
            let named = ["ffn_down_exps.weight", "expert 1", "row 0", "block 0", "255"].iter().all(|k| e.contains(k));
            return Ok(if named {
                Outcome::Pass(Metrics { n: 1, ..Metrics::default() })
            } else {
                Outcome::Fail(format!("error does not name the block: {e}"))
            });
        }
        let stored = stored.map_err(err)?;
        let w = GptOssWeights::load(opened.source(), &cfg).map_err(err)?;
        let mem = GpuModel::load_gpt_oss(client.clone(), backend, &mut InMemory(&w), &cfg, dd, client.kernels()).map_err(err)?;
        if (stored.weight_bytes, stored.stream_bytes) != (mem.weight_bytes, mem.stream_bytes) {
            return Ok(Outcome::Fail(format!(
                "bytes {:?} vs {:?}",
                (stored.weight_bytes, stored.stream_bytes),
                (mem.weight_bytes, mem.stream_bytes)
            )));
        }
        let mut n = 0;
        for (what, got, want) in pairs(&stored, &mem)? {
            if (&got.shape, got.dtype) != (&want.shape, want.dtype) {
                return Ok(Outcome::Fail(format!("{what}: {:?} {:?} vs {:?} {:?}", got.shape, got.dtype, want.shape, want.dtype)));
            }
            let (g, x) = (bytes_of(client, got)?, bytes_of(client, want)?);
            if let Some(i) = g.iter().zip(&x).position(|(a, b)| a != b) {
                return Ok(Outcome::Fail(format!("{what}: byte {i} of {}: {} vs {}", g.len(), g[i], x[i])));
            }
            n += g.len();
        }
        Ok(Outcome::Pass(Metrics { n, ..Metrics::default() }))
    }
}

impl Case for GptOssLoadCase {
    fn op(&self) -> Op {
        Op::GptOss
    }
    fn name(&self) -> String {
        let w = self.weights.label();
        let check = if self.check == Check::NanScale { ",scale=255" } else { "" };
        format!("gpt_oss_load({w},{:?}{check},{})", self.format, self.dtype.name()).to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        let dir = std::env::temp_dir().join(format!("tandem-conformance-{}-{}", std::process::id(), self.name().replace(['(', ')', ',', '|'], "-")));
        let out = std::fs::create_dir_all(&dir).map_err(err).and_then(|_| self.body(client, &dir));
        let _ = std::fs::remove_dir_all(&dir);
        out.unwrap_or_else(Outcome::Fail)
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for weights in [Weights::Synthetic("tiny-gpt-oss-wide"), Weights::Fixture("a")] {
        for format in [Format::Hf, Format::Gguf] {
            for dtype in [Dtype::F32, Dtype::BF16] {
                v.push(Box::new(GptOssLoadCase { weights, format, dtype, check: Check::Same }));
            }
        }
    }
    v.push(Box::new(GptOssLoadCase { weights: Weights::Synthetic("tiny-gpt-oss"), format: Format::Gguf, dtype: Dtype::F32, check: Check::NanScale }));
    v
}
