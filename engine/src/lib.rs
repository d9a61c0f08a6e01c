//! # tandem engine
//!
//! The serving engine, device-free: requests, sequences, the KV block manager (with prefix
//! caching) and an iteration-level scheduler (continuous batching, chunked prefill, preemption
//! by recompute), driving any [`ModelRunner`] — the CPU reference ([`RefRunner`]) or a GPU
//! runner — one [`StepPlan`] at a time. Dependencies point one way: this crate knows the
//! reference crate's data types and the runner trait, never a device.
//!
//! ```text
//! add_request ─▶ waiting ─admit─▶ running ─step─▶ RequestOutput (tokens, text, finish)
//!                   ▲                 │
//!                   └──── preempt ────┘   (newest first, KV recomputed on resume)
//! ```
//!
//! Every draw is the counter-based sampler of `reference::sampling::seeded`, so a request's
//! tokens depend only on its logits, seed and output index: the same alone, in any batch, and
//! after a preemption.
//!
//! Speculative decoding ([`spec`], `EngineConfig::speculation`): n-gram lookup or a draft
//! model proposes k tokens per decoding sequence, the target verifies the k + 1 positions in
//! the same batched step, and the KV of rejected positions is rolled back. Greedy requests
//! (and any request with n-gram lookup) get exactly the tokens of plain decoding.
//!
//! [`ModelRunner`]: reference::runner::ModelRunner
//! [`RefRunner`]: reference::runner::RefRunner
//! [`StepPlan`]: reference::runner::StepPlan

pub mod detok;
mod engine;
pub mod harmony;
pub mod request;
mod scheduler;
mod sequence;
pub mod spec;

pub use detok::Detokenizer;
pub use engine::{logprob_of, Engine, EngineConfig, EngineLoad, EngineStats};
pub use request::{FinishReason, Request, RequestId, RequestOutput, TokenLogprob};
pub use spec::{SpecConfig, SpecMethod};
