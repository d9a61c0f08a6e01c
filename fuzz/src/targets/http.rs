//! Request bodies of `/v1/completions` and `/v1/chat/completions` (`server::api::parse`, the
//! function the route handlers call on the body: no sockets), each against a model with a
//! tokenizer and chat template and against one with neither.

use std::path::Path;
use std::sync::Arc;

use engine::runner::ModelInfo;
use reference::chat::ChatTemplate;
use reference::tokenizer::Tokenizer;
use server::api::{parse, Endpoint};
use server::ModelFront;

use crate::mutate::Mutator;
use crate::{signature, Target};

/// Field names and values of the OpenAI request schema.
const DICT: &[&str] = &[
    "model",
    "tiny",
    "prompt",
    "messages",
    "role",
    "content",
    "user",
    "system",
    "assistant",
    "type",
    "text",
    "image_url",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "ignore_eos",
    "stream",
    "stream_options",
    "include_usage",
    "return_token_ids",
    "n",
    "best_of",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "echo",
    "suffix",
    "tools",
    "tool_choice",
    "auto",
    "none",
    "required",
    "function",
    "name",
    "parameters",
    "properties",
    "tool_calls",
    "tool_call_id",
    "arguments",
    "tool",
    "response_format",
    "json_object",
    "reasoning_effort",
    "low",
    "high",
];

/// The served model's name (what a request's `model` must be).
const SERVED: &str = "tiny";

pub struct Http {
    /// A model with the seed tokenizer and the ChatML template.
    full: ModelFront,
    /// A model with neither (token ids only).
    bare: ModelFront,
}

impl Http {
    /// The models of the checked-in corpus: `corpus/tokenizer/tiny.json`, `corpus/chat/chatml.jinja`.
    pub fn new() -> Result<Self, String> {
        let corpus = crate::fuzz_dir().join("corpus");
        let tok = Tokenizer::from_file(corpus.join("tokenizer/tiny.json")).map_err(|e| e.to_string())?;
        let path = corpus.join("chat/chatml.jinja");
        let src = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let chat = ChatTemplate::new(src, path.display().to_string(), "", "<|im_end|>").map_err(|e| e.to_string())?;
        let vocab = tok.vocab_size();
        let info = ModelInfo { vocab, max_ctx: 1024, bos_id: tok.bos_id(), eos_id: tok.eos_id() };
        let full = ModelFront { tokenizer: Some(Arc::new(tok)), chat: Some(Arc::new(chat)), info, parse_special: false };
        let bare =
            ModelFront { tokenizer: None, chat: None, info: ModelInfo { vocab: 32, max_ctx: 16, bos_id: None, eos_id: None }, parse_special: false };
        Ok(Http { full, bare })
    }
}

impl Target for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn run(&self, data: &[u8], work: &Path) -> String {
        let mut sig = String::new();
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            for front in [&self.full, &self.bare] {
                match parse(endpoint, data, front, SERVED) {
                    Ok(job) => sig += &format!("[ok {} ids]", job.request.prompt.len().min(2)),
                    Err(e) => sig += &format!("[{} {}]", e.status.as_u16(), signature(&e.message, work)),
                }
            }
        }
        sig
    }

    fn mutate(&self, m: &mut Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        m.set_dict(DICT);
        m.json_or_bytes(data, corpus)
    }

    fn stack_size(&self) -> usize {
        2 << 20
    }
}
