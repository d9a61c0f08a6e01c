//! # tandem reference
//!
//! A plain CPU transformer in f32 that defines ground truth for tandem. It reads like the paper
//! on purpose: one function per equation ([`ops`]), naive attention with materialized scores,
//! no fusion. [`arch`] describes every architecture (Llama, Mistral, Qwen2/3, Qwen3-MoE,
//! Gemma-3, Phi-3, GPT-OSS) layer by layer and runs them all with one forward pass. Shape letters: B batch, T tokens, C model width,
//! H query heads, Hkv key/value heads, D head dim, F MLP width, V vocab, L layers.

/// The ggml types under the name tandem first gave them ([`ggml`]).
pub use ggml as dequant;
pub mod error;
pub mod finite;
pub mod ggml;
pub mod gguf;
pub use ggml::kquants;

pub use error::{Error, Result};
pub mod arch;
pub mod chat;
pub mod config;
pub mod gpt_oss;
pub mod kv_cache;
pub mod loader;
pub mod model;
pub mod ops;
pub mod parallel;
pub mod quant;
pub mod special_text;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;

pub use config::{Config, RopeLayout};
pub use model::{Model, Trace};
