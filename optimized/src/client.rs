//! What every launcher takes: a device's cubecl client together with the kernel choices
//! ([`KernelConfig`]) its launches make.
//!
//! The choices travel with the handle, so they are passed explicitly to each launch and no
//! launcher reads process-wide or thread-local state: a model owns its `Client` (made with its
//! configuration when it loads, replaced when [`crate::model::GpuModel::set_kernels`] changes
//! it), two models in one process run with their own, and a conformance case or a benchmark
//! that wants other choices for one call makes a handle with them ([`Client::with_kernels`]).
//! It dereferences to cubecl's client for everything else (memory, properties, launches).
//! Its clones share one [`Arena`], which serves the activations of recorded decode graphs.

use std::ops::Deref;

use crate::arena::Arena;
use crate::config::KernelConfig;

/// A cubecl client and the kernel configuration its launches use. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    raw: cubecl::client::Client,
    kernels: KernelConfig,
    arena: Arena,
}

impl Client {
    /// `raw` with the production choices ([`KernelConfig::default`]).
    pub fn new(raw: cubecl::client::Client) -> Self {
        Self { raw, kernels: KernelConfig::default(), arena: Arena::default() }
    }

    /// The choices launches on this handle make.
    pub fn kernels(&self) -> &KernelConfig {
        &self.kernels
    }

    /// The same device with other kernel choices (and the same arena).
    pub fn with_kernels(&self, kernels: KernelConfig) -> Self {
        Self { raw: self.raw.clone(), kernels, arena: self.arena.clone() }
    }

    /// The arena recorded graphs take their activations from ([`crate::arena`]).
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// cubecl's client.
    pub fn raw(&self) -> &cubecl::client::Client {
        &self.raw
    }
}

impl Deref for Client {
    type Target = cubecl::client::Client;
    fn deref(&self) -> &Self::Target {
        &self.raw
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("runtime", &self.raw.name()).field("kernels", &self.kernels.name()).finish()
    }
}
