//! `tandem quantize`: write a quantized HF directory (config.json with `quantization_config`,
//! model.safetensors, and the tokenizer files when the source has a tokenizer) that
//! `tandem generate --model DIR` loads. Layout: `reference::quant::store`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use reference::quant::store::write_quantized_hf_dir;
use reference::quant::Scheme;

use super::{CliError, ModelArgs, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// INT8 weight-only (W8A16): symmetric, f32 scale per output channel (or per --group).
    Int8,
    /// OCP MXFP4: e2m1 values in blocks of 32 inputs sharing one e8m0 power-of-two scale.
    Mxfp4,
    /// GGUF Q4_0: 4-bit codes in blocks of 32 with an f16 scale (`d · (n − 8)`), ggml's quantizer.
    #[value(name = "q4_0")]
    Q4_0,
    /// GGUF Q4_1: 4-bit codes in blocks of 32 with an f16 scale and offset (`d · n + m`).
    #[value(name = "q4_1")]
    Q4_1,
    /// FP8 E4M3 with an f32 scale per output channel, stored as a hub `fp8` checkpoint is
    /// (F8_E4M3 weights, `weight_scale_inv`).
    Fp8,
}

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Quantized format of the linear weights (q, k, v, o, gate, up, down; int8 also an
    /// untied lm_head). Embeddings, mxfp4's and q4's lm_head and norms are stored in f32.
    #[arg(long, value_enum)]
    pub format: Format,
    /// int8 only: one scale per N consecutive inputs instead of one per output channel
    /// (N must divide the input width of every linear layer).
    #[arg(long)]
    pub group: Option<usize>,
    /// Output directory (created if missing; must not hold other *.safetensors files).
    #[arg(long)]
    pub out: PathBuf,
}

/// HF tokenizer and template files copied from an HF source directory when present.
const TOKENIZER_FILES: [&str; 6] =
    ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "chat_template.jinja", "chat_template.json"];

fn scheme(a: &QuantizeArgs) -> Result<Scheme> {
    if a.model.weights.is_some() {
        return Err(CliError::Usage("quantize takes --format (and --group), not --weights".into()));
    }
    match (a.format, a.group) {
        (Format::Int8, g) => Scheme::from_method("int8", g).map_err(|e| CliError::Usage(format!("--group: {e}"))),
        (Format::Mxfp4, None) => Ok(Scheme::Mxfp4),
        (Format::Q4_0, None) => Ok(Scheme::Q4_0),
        (Format::Q4_1, None) => Ok(Scheme::Q4_1),
        (Format::Fp8, None) => Ok(Scheme::Fp8),
        (Format::Fp8, Some(g)) => Err(CliError::Usage(format!("--group {g}: fp8 takes a scale per output channel; --group applies to int8 only"))),
        (f @ (Format::Mxfp4 | Format::Q4_0 | Format::Q4_1), Some(g)) => {
            Err(CliError::Usage(format!("--group {g}: {f:?} has fixed blocks of 32; --group applies to int8 only")))
        }
    }
}

/// `--out` must be a directory (or not exist), not the source, and hold no other safetensors.
fn check_out(out: &Path, source: Option<&Path>) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(CliError::Usage(format!("--out {}: exists and is not a directory", out.display())));
    }
    if let (Some(src), Ok(o)) = (source, out.canonicalize()) {
        if src.canonicalize().is_ok_and(|s| s == o) {
            return Err(CliError::Usage(format!("--out {}: would overwrite the source model", out.display())));
        }
    }
    if out.is_dir() {
        let rd = std::fs::read_dir(out).map_err(|e| reference::Error::io(out, e))?;
        for e in rd.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "safetensors") && p.file_name().is_some_and(|n| n != "model.safetensors") {
                return Err(CliError::Usage(format!("--out {}: already holds {}; choose an empty directory", out.display(), p.display())));
            }
        }
    }
    Ok(())
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    let scheme = scheme(&a)?;
    check_out(&a.out, a.model.model.as_deref())?;
    let mut opened = a.model.open()?;
    let cfg = opened.config.clone();
    let rep = write_quantized_hf_dir(&a.out, &cfg, opened.source_mut(), scheme)?;
    let tokenizer = match a.model.model.as_deref().filter(|p| p.is_dir()) {
        Some(src) => {
            let mut copied = 0;
            for f in TOKENIZER_FILES {
                let (from, to) = (src.join(f), a.out.join(f));
                if from.is_file() {
                    std::fs::copy(&from, &to).map_err(|e| reference::Error::io(&to, e))?;
                    copied += 1;
                }
            }
            format!("{copied} tokenizer/template files copied")
        }
        None => match &opened.tokenizer {
            Some(tok) => {
                tok.save(a.out.join("tokenizer.json"))?;
                let name = |id: Option<u32>| id.and_then(|i| tok.token_str(i));
                let mut tc = serde_json::json!({
                    "add_bos_token": tok.add_bos_default(),
                    "bos_token": name(tok.bos_id()),
                    "eos_token": name(tok.eos_id()),
                });
                if let Some(chat) = &opened.chat {
                    tc["chat_template"] = chat.source().into();
                }
                let p = a.out.join("tokenizer_config.json");
                std::fs::write(&p, serde_json::to_string_pretty(&tc).unwrap_or_default()).map_err(|e| reference::Error::io(&p, e))?;
                "tokenizer.json + tokenizer_config.json exported".to_string()
            }
            None => "no tokenizer (use --ids with it)".to_string(),
        },
    };
    let mb = |b: usize| b as f64 / 1e6;
    eprintln!(
        "[quantize] {} -> {}: {} linear weights as {scheme} ({:.1} MB in f32 -> {:.1} MB, {:.2} bits/weight); {} other tensors in f32; {tokenizer}",
        opened.label,
        a.out.display(),
        rep.quantized,
        mb(rep.linear_f32_bytes),
        mb(rep.linear_quant_bytes),
        32.0 * rep.linear_quant_bytes as f64 / rep.linear_f32_bytes.max(1) as f64,
        rep.tensors - rep.quantized,
    );
    Ok(())
}
