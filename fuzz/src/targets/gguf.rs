//! GGUF files: the header, metadata and tensor table (`reference::gguf`), then everything a
//! loader reads from a file that opened: each tensor dequantized, the llama config and
//! weights, the quantized and raw views, the tokenizer and the chat template.

use std::path::Path;

use reference::chat::ChatTemplate;
use reference::gguf::GgufFile;
use reference::quant::store::all_tensors;
use reference::tokenizer::Tokenizer;
use reference::weights::{TensorSource, Weights};
use reference::Config;

use crate::mutate::Mutator;
use crate::{outcome, signature, Target};

/// Metadata keys and values the loaders look for, spliced into mutants.
const DICT: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "llama",
    "gpt-oss",
    "llama.block_count",
    "llama.embedding_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.vocab_size",
    "llama.context_length",
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.chat_template",
    "token_embd.weight",
    "output.weight",
    "blk.0.attn_q.weight",
    "GGUF",
];

pub struct Gguf;

/// The kind of a fixed-width field of a GGUF header.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    /// A count or length (u64): tensor / metadata counts, string lengths, array counts, dims.
    Count,
    /// A type id (u32): a value type, an array element type or a tensor's ggml type.
    Type,
    /// Any other integer (version, n_dims, offsets).
    Other,
}

/// The fixed-width fields of `data` read as GGUF, as far as it parses: `(offset, width, kind)`.
fn fields(data: &[u8]) -> Vec<(usize, usize, Field)> {
    let mut out = Vec::new();
    let mut w = Walk { data, pos: 0, out: &mut out };
    let _ = w.file();
    out
}

struct Walk<'a, 'b> {
    data: &'a [u8],
    pos: usize,
    out: &'b mut Vec<(usize, usize, Field)>,
}

impl Walk<'_, '_> {
    fn int(&mut self, width: usize, kind: Field) -> Option<u64> {
        let b = self.data.get(self.pos..self.pos + width)?;
        let mut v = [0u8; 8];
        v[..width].copy_from_slice(b);
        self.out.push((self.pos, width, kind));
        self.pos += width;
        Some(u64::from_le_bytes(v))
    }
    fn skip(&mut self, n: u64) -> Option<()> {
        let n = usize::try_from(n).ok()?;
        self.pos = self.pos.checked_add(n).filter(|&p| p <= self.data.len())?;
        Some(())
    }
    fn string(&mut self) -> Option<()> {
        let n = self.int(8, Field::Count)?;
        self.skip(n)
    }
    fn value(&mut self, ty: u64, depth: u32) -> Option<()> {
        match ty {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            8 => self.string(),
            9 if depth < 3 => {
                let ety = self.int(4, Field::Type)?;
                let n = self.int(8, Field::Count)?;
                (0..n.min(1 << 16)).try_for_each(|_| self.value(ety, depth + 1))
            }
            10..=12 => self.skip(8),
            _ => None,
        }
    }
    fn file(&mut self) -> Option<()> {
        self.skip(4)?;
        self.int(4, Field::Other)?;
        let n_tensors = self.int(8, Field::Count)?;
        let n_kv = self.int(8, Field::Count)?;
        for _ in 0..n_kv.min(1 << 16) {
            self.string()?;
            let ty = self.int(4, Field::Type)?;
            self.value(ty, 0)?;
        }
        for _ in 0..n_tensors.min(1 << 16) {
            self.string()?;
            let n_dims = self.int(4, Field::Other)?;
            for _ in 0..n_dims.min(16) {
                self.int(8, Field::Count)?;
            }
            self.int(4, Field::Type)?;
            self.int(8, Field::Other)?;
        }
        Some(())
    }
}

impl Target for Gguf {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn run(&self, data: &[u8], work: &Path) -> String {
        let path = work.join("model.gguf");
        if let Err(e) = std::fs::write(&path, data) {
            return format!("harness: {e}");
        }
        let mut g = match GgufFile::open(&path) {
            Ok(g) => g,
            Err(e) => return signature(&e.to_string(), work),
        };
        let mut sig = String::from("open ok");
        for t in g.tensors.clone() {
            let _ = g.tensor_f32(&t.name, None);
            let _ = g.raw_dense(&t.name, &t.shape);
        }
        for t in g.mxfp4_tensors.clone() {
            let _ = g.tensor_f32(&t.name, Some(&t.shape));
        }
        let tok = Tokenizer::from_gguf(&g);
        sig += &format!(" | tokenizer {}", outcome(&tok, work));
        if let Ok(t) = &tok {
            sig += &super::exercise_tokenizer(t);
        }
        match ChatTemplate::from_gguf(&g) {
            Ok(Some(t)) => sig += &format!(" | template {}", super::chat::render_bounded(&t, work)),
            r => sig += &format!(" | template {}", outcome(&r, work)),
        }
        let cfg = match Config::from_gguf(&g) {
            Ok(c) => c,
            Err(e) => return sig + " | config " + &signature(&e.to_string(), work),
        };
        for t in all_tensors(&cfg) {
            let _ = g.load_quantized(t, &cfg);
            let _ = g.load_raw(t, &cfg);
        }
        sig + " | weights " + &outcome(&Weights::load(&mut g, &cfg), work)
    }

    fn mutate(&self, m: &mut Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        m.set_dict(DICT);
        let mut out = data.to_vec();
        let fields = fields(data);
        match m.below(8) {
            0..=2 if !fields.is_empty() => {
                let (at, width, _) = fields[m.below(fields.len())];
                m.overwrite_int(&mut out, at, width);
            }
            3 if !fields.is_empty() => {
                // A type id changed to another (valid or not) id.
                let types: Vec<_> = fields.iter().filter(|f| f.2 == Field::Type).collect();
                if let Some(&&(at, width, _)) = types.get(m.below(types.len().max(1))) {
                    let id = [0u32, 1, 2, 3, 6, 7, 8, 9, 10, 12, 13, 14, 15, 30, 39, 40, u32::MAX][m.below(17)];
                    out[at..at + width].copy_from_slice(&id.to_le_bytes()[..width]);
                }
            }
            4 if !fields.is_empty() => {
                // Cut inside the header, right after a field.
                let (at, width, _) = fields[m.below(fields.len())];
                out.truncate(at + width);
            }
            _ => m.havoc(&mut out, corpus),
        }
        out
    }
}
