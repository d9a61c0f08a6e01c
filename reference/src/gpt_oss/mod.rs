//! GPT-OSS (OpenAI's open-weight mixture-of-experts models, gpt-oss-20b / -120b) on the
//! reference: plain f32, one function per equation, experts dequantized from MXFP4 when used.
//!
//! ```text
//! x = Emb[ids]                                                   [T, C]   (no scaling)
//! for each block l:
//!     h = RMSNorm(x)·g_attn
//!     q, k, v = h Wqᵀ + bq, h Wkᵀ + bk, h Wvᵀ + bv                [T, H, D], [T, Hkv, D] ×2
//!     q, k = YaRN-RoPE(q), YaRN-RoPE(k)       ; cache ← cache ∪ (k, v)
//!     a_ij = softmax_j([q_i·k_j/√D]_{j visible}, σ_h)   (the sink σ_h joins the softmax, unscaled, and is dropped)
//!     x = x + (Σ_j a_ij v_j) Woᵀ + bo          visible: j ≤ i, and i − j < W on sliding layers (even l)
//!     h = RMSNorm(x)·g_moe
//!     z = h Wrᵀ + br;  (e_k, w_k) = top-K of z, softmax over those K        per token
//!     x = x + Σ_k w_k · FFN_{e_k}(h)
//!         FFN_e(h) = Wd_e (min(g,7)·σ(1.702·min(g,7))·(clamp(u,−7,7) + 1)) + bd_e,
//!         g = Wg_e h + bg_e,  u = Wu_e h + bu_e
//! logits = RMSNorm(x)·g_out · Unembᵀ                              [T, V]
//! ```
//! Shape letters as in the crate, plus E experts, K experts per token, F expert width.
//! [`ops::rope`] has YaRN, [`ops::moe`] the MoE; attention with sinks is
//! [`crate::ops::attention::attention_sinks`].

pub mod config;
pub mod harmony;
pub mod loader;
pub mod model;
pub mod ops;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;
pub mod writer;

pub use config::{GptOssConfig, LayerType, Yarn};
pub use model::GptOssModel;
pub use tokenizer::GptOssTokenizer;
pub use weights::{DenseExpert, ExpertWeights, GptOssLayer, GptOssWeights};
