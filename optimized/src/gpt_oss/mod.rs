//! GPT-OSS (OpenAI's open-weight mixture-of-experts models) on the GPU, against
//! `reference::gpt_oss`: [`model::GptOssGpu`] holds the weights (dense matrices in the model
//! dtype, q/k/v/o biases, sinks and router f32, experts MXFP4 as stored) and runs the blocks;
//! [`runner::GptOssRunner`] serves the batched engine (paged KV pools, one forward pass per
//! step over a ragged batch, per-layer windows and sinks in the flash kernels, YaRN RoPE);
//! `runner::batch` lays out a ragged step and draws from its logits (shared with the llama runner).
//!
//! New kernels: `kernels::bias` (the `+ b` of the affine layers), `kernels::moe` (router top-K
//! on the device, grouped MXFP4 gemvs, sort by expert + grouped GEMMs, combine) and
//! `RopeTable::from_freqs` (YaRN cos/sin with the concentration factor).

pub mod model;
pub mod runner;

pub use model::{GptOssGpu, GptOssGpuLayer};
pub use runner::GptOssRunner;
