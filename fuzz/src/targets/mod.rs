//! One [`Target`] per kind of untrusted input.

pub mod chat;
pub mod gguf;
pub mod hf_dir;
pub mod http;
pub mod tokenizer;

use reference::tokenizer::Tokenizer;

use crate::Target;

/// Every target's name, in the order the long run goes through them.
pub const NAMES: &[&str] = &["gguf", "hf_dir", "tokenizer", "chat", "http"];

/// The target called `name`.
pub fn by_name(name: &str) -> Result<Box<dyn Target>, String> {
    Ok(match name {
        "gguf" => Box::new(gguf::Gguf),
        "hf_dir" => Box::new(hf_dir::HfDir),
        "tokenizer" => Box::new(tokenizer::TokenizerJson),
        "chat" => Box::new(chat::Chat),
        "http" => Box::new(http::Http::new()?),
        other => return Err(format!("no fuzz target `{other}` (targets: {})", NAMES.join(", "))),
    })
}

/// Texts every loaded tokenizer encodes: empty, plain, special tokens, digits, non-ASCII,
/// lone whitespace.
const TEXTS: &[&str] = &["", "Hello world", "<|im_start|>user\n12345 héllo 🎉<|im_end|>", " \t\r\n  ", "the the thethe"];

/// Use a loaded tokenizer as the engine does: encode (with and without BOS), decode, stream,
/// and look up ids at and past the ends of the vocabulary. A signature suffix.
pub fn exercise_tokenizer(t: &Tokenizer) -> String {
    let mut encoded = 0;
    for text in TEXTS {
        for bos in [false, true] {
            let Ok(ids) = t.encode(text, bos) else { continue };
            encoded += 1;
            let _ = t.decode(&ids);
            let mut s = t.stream();
            for &id in &ids {
                let _ = s.push(id);
            }
            let _ = s.finish();
        }
    }
    let n = u32::try_from(t.vocab_size()).unwrap_or(u32::MAX);
    let edges = [0, 1, n.saturating_sub(1), n, n.saturating_add(7), u32::MAX];
    let _ = t.decode(&edges);
    let mut s = t.stream();
    for id in edges {
        let _ = t.token_str(id);
        let _ = t.is_eog(id);
        let _ = s.push(id);
    }
    let _ = s.finish();
    let _ = (t.token_id("<|im_start|>"), t.eog_ids(), t.bos_id(), t.eos_id(), t.add_bos_default());
    format!(" (encoded {encoded})")
}
