//! `tandem tokenize`: the token ids of a text under a model's tokenizer, without loading the
//! model's weights: a GGUF (a whole model or a vocabulary alone, like llama.cpp's
//! `ggml-vocab-*.gguf`), an HF directory (its `tokenizer.json`) or a `tokenizer.json` itself.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use reference::gguf::GgufFile;
use reference::tokenizer::Tokenizer;

use super::{CliError, Result};

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// A .gguf file (a model or a vocabulary alone), an HF directory (with tokenizer.json) or a
    /// tokenizer.json.
    #[arg(long)]
    pub model: PathBuf,
    /// The text to tokenize.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub text: Option<String>,
    /// A UTF-8 file whose whole content (a final newline included) is the text.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Read special-token text (`<|im_end|>`, `<s>`, …) as the control token, as `generate
    /// --parse-special` does; by default it is plain text.
    #[arg(long)]
    pub parse_special: bool,
    /// Add the BOS token even where the model's rule (`add_bos_token`) does not.
    #[arg(long, conflicts_with = "no_bos")]
    pub bos: bool,
    /// Leave out the BOS token the model's rule would add.
    #[arg(long)]
    pub no_bos: bool,
    /// Also print each token's vocabulary entry (byte-level form such as `Ġthe`, `▁` for a
    /// SentencePiece space, `<0x0A>` for a byte token).
    #[arg(long)]
    pub pieces: bool,
    /// One JSON object: `ids`, `n_tokens`, `bos_added`, and `pieces` with --pieces.
    #[arg(long)]
    pub json: bool,
}

/// The tokenizer of `path`: a GGUF's `tokenizer.ggml.*`, or an HF `tokenizer.json` (given, or
/// in the given directory).
fn open(path: &Path) -> Result<Tokenizer> {
    let md = std::fs::metadata(path).map_err(|e| reference::Error::io(path, e))?;
    if md.is_dir() {
        let tj = path.join("tokenizer.json");
        if !tj.is_file() {
            return Err(CliError::Usage(format!("{}: no tokenizer.json in this directory", path.display())));
        }
        return Ok(Tokenizer::from_file(&tj)?);
    }
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
        return Ok(Tokenizer::from_file(path)?);
    }
    Ok(Tokenizer::from_gguf(&GgufFile::open(path)?)?)
}

/// The text of `--text` or `--file`.
fn text(a: &TokenizeArgs) -> Result<String> {
    match (&a.text, &a.file) {
        (Some(t), _) => Ok(t.clone()),
        (None, Some(f)) => {
            let bytes = std::fs::read(f).map_err(|e| reference::Error::io(f, e))?;
            String::from_utf8(bytes).map_err(|e| CliError::Usage(format!("{}: not UTF-8 text (byte {})", f.display(), e.utf8_error().valid_up_to())))
        }
        (None, None) => Err(CliError::Usage("give --text or --file".into())),
    }
}

pub fn run(a: TokenizeArgs) -> Result<()> {
    let tok = open(&a.model)?;
    let text = text(&a)?;
    let add_bos = if a.bos {
        if tok.bos_id().is_none() {
            return Err(CliError::Usage(format!("--bos: {} has no BOS token", a.model.display())));
        }
        true
    } else {
        tok.add_bos_default() && !a.no_bos
    };
    let ids = match a.parse_special {
        true => tok.encode(&text, add_bos)?,
        false => tok.encode_literal(&text, add_bos)?,
    };
    let bos_added = add_bos && tok.bos_id().is_some();
    let pieces: Vec<String> = match a.pieces {
        true => ids.iter().map(|&id| tok.token_str(id).unwrap_or_default()).collect(),
        false => Vec::new(),
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        let mut v = serde_json::json!({ "ids": ids, "n_tokens": ids.len(), "bos_added": bos_added });
        if a.pieces {
            v["pieces"] = serde_json::json!(pieces);
        }
        writeln!(out, "{v}")?;
    } else if a.pieces {
        for (id, p) in ids.iter().zip(&pieces) {
            writeln!(out, "{id}\t{}", serde_json::Value::String(p.clone()))?;
        }
    } else {
        let line: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "{}", line.join(" "))?;
    }
    Ok(())
}
