//! # tandem engine
//!
//! The serving engine, device-free: requests, sequences, the KV block manager with prefix
//! caching ([`kv_blocks`]) and an iteration-level scheduler (continuous batching, chunked
//! prefill, preemption by recompute or by swapping KV to host memory: [`swap`]), driving any [`ModelRunner`] — the CPU reference
//! ([`RefRunner`]) or a GPU runner — one [`StepPlan`] at a time. The interfaces every backend
//! implements live here: the runner trait ([`runner`]), the sampling definitions with the
//! counter-based draw ([`sampling`]), and the single-sequence generation loop ([`single`]).
//! Dependencies point one way: this crate knows the reference crate's model and data types,
//! never a device; the GPU crate depends on this one for the traits.
//!
//! ```text
//! add_request ─▶ waiting ─admit─▶ running ─step─▶ RequestOutput (tokens, text, finish)
//!                   ▲                 │
//!                   └──── preempt ────┘   (newest first, KV recomputed or swapped back on resume)
//! ```
//!
//! Every draw is the counter-based sampler of [`sampling::seeded`], so a request's
//! tokens depend only on its logits, seed and output index: the same alone, in any batch, and
//! after a preemption.
//!
//! Speculative decoding ([`spec`], `EngineConfig::speculation`): n-gram lookup or a draft
//! model proposes k tokens per decoding sequence, the target verifies the k + 1 positions in
//! the same batched step, and the KV of rejected positions is rolled back. Greedy requests
//! (and any request with n-gram lookup) get exactly the tokens of plain decoding.
//!
//! [`ModelRunner`]: runner::ModelRunner
//! [`RefRunner`]: cpu_runner::RefRunner
//! [`StepPlan`]: runner::StepPlan

pub mod constraint;
pub mod cpu_runner;
pub mod detok;
mod engine;
pub mod harmony;
pub mod kv_blocks;
mod priority;
mod push;
pub mod ranks;
pub mod request;
pub mod runner;
pub mod sampling;
mod scheduler;
mod sequence;
pub mod single;
pub mod spec;
pub mod swap;

pub use detok::Detokenizer;
pub use engine::{Engine, EngineConfig, EngineLoad, EngineStats};
pub use request::logprob_of;
pub use request::{FinishReason, Request, RequestId, RequestOutput, TokenLogprob};
pub use spec::{SpecConfig, SpecMethod};
