//! Errors of the reference crate. Every message names the file, key or shape it is about.

use std::path::PathBuf;

/// One error type for the whole reference crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A model file is malformed: bad magic, truncated, lying counts, bad offsets.
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    /// A metadata / config key is missing or has the wrong type.
    #[error("{path}: key `{key}`: {msg}")]
    Key { path: PathBuf, key: String, msg: String },
    /// A tensor is missing, has the wrong shape or an unsupported dtype.
    #[error("{path}: tensor `{name}`: {msg}")]
    Tensor { path: PathBuf, name: String, msg: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// A chat template ran past its render limits (fuel, output size): the template's fault,
    /// not the conversation's.
    #[error("chat template: {0}")]
    TemplateLimit(String),
    /// Invalid user input at run time (token ids, prompt length, sampling values).
    #[error("invalid input: {0}")]
    Input(String),
    /// The paged KV cache has no free block for a request (what was asked, what is free).
    #[error("KV cache pool exhausted: {0}")]
    PoolExhausted(String),
    /// Misuse of the paged KV cache: unknown sequence, double free, block id outside the pool.
    #[error("KV cache: {0}")]
    KvCache(String),
    /// An error of another backend (the GPU path), carried through the
    /// `engine` crate's runner and single-sequence traits.
    #[error("{0}")]
    Backend(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format { path: path.into(), msg: msg.into() }
    }
    pub fn key(path: impl Into<PathBuf>, key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Key { path: path.into(), key: key.into(), msg: msg.into() }
    }
    pub fn tensor(path: impl Into<PathBuf>, name: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Tensor { path: path.into(), name: name.into(), msg: msg.into() }
    }
}
