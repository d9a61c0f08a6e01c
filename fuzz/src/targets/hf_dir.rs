//! HF model directories (`reference::loader::load` of a folder): `config.json` and one
//! `model.safetensors`, plain or quantized (`quantization_config`).
//!
//! An input is both files in one: a u32 (little-endian) length, that many bytes of
//! config.json, then the safetensors file ([`pack`] / [`unpack`]).

use std::path::Path;

use reference::loader;

use crate::mutate::Mutator;
use crate::{outcome, Target};

/// Keys and values of config.json and of safetensors headers.
const DICT: &[&str] = &[
    "model_type",
    "llama",
    "mistral",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rope_theta",
    "rms_norm_eps",
    "sliding_window",
    "rope_scaling",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "quantization_config",
    "quant_method",
    "group_size",
    "int8",
    "mxfp4",
    "q4_0",
    "q4_1",
    "dtype",
    "shape",
    "data_offsets",
    "F32",
    "F16",
    "BF16",
    "I8",
    "U8",
    "F64",
    "__metadata__",
    "model.embed_tokens.weight",
    "lm_head.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.norm.weight",
];

/// One input holding config.json and model.safetensors.
pub fn pack(config: &[u8], safetensors: &[u8]) -> Vec<u8> {
    let mut out = (config.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(config);
    out.extend_from_slice(safetensors);
    out
}

/// The (config.json, model.safetensors) of an input; a length past the end takes all.
pub fn unpack(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else { return (&[], data) };
    let n = (u32::from_le_bytes(*len) as usize).min(rest.len());
    rest.split_at(n)
}

pub struct HfDir;

impl Target for HfDir {
    fn name(&self) -> &'static str {
        "hf_dir"
    }

    fn run(&self, data: &[u8], work: &Path) -> String {
        let (config, st) = unpack(data);
        let written = std::fs::write(work.join("config.json"), config).and_then(|_| std::fs::write(work.join("model.safetensors"), st));
        if let Err(e) = written {
            return format!("harness: {e}");
        }
        outcome(&loader::load(work), work)
    }

    fn mutate(&self, m: &mut Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        m.set_dict(DICT);
        let (config, st) = unpack(data);
        let configs: Vec<Vec<u8>> = corpus.iter().map(|c| unpack(c).0.to_vec()).collect();
        match m.below(5) {
            0 | 1 => pack(&m.json_or_bytes(config, &configs), st),
            2 | 3 if st.len() >= 8 => {
                // The safetensors header: its JSON edited, framed with the new length or
                // (sometimes) the old one.
                let n = u64::from_le_bytes(st[..8].try_into().unwrap_or_default());
                let end = usize::try_from(n).ok().and_then(|n| n.checked_add(8)).filter(|&e| e <= st.len()).unwrap_or(8);
                let header = m.json_or_bytes(&st[8..end], &[]);
                let len = if m.one_in(4) { n } else { header.len() as u64 };
                let mut out = len.to_le_bytes().to_vec();
                out.extend_from_slice(&header);
                out.extend_from_slice(&st[end..]);
                pack(config, &out)
            }
            _ => {
                let mut out = st.to_vec();
                if out.len() >= 8 && m.one_in(3) {
                    m.overwrite_int(&mut out, 0, 8);
                } else {
                    m.havoc(&mut out, &[]);
                }
                pack(config, &out)
            }
        }
    }
}
