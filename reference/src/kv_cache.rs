//! Contiguous KV cache: per layer, keys and values of every position so far.

use ndarray::{Array3, ArrayView3, Axis};

use crate::error::{Error, Result};

/// Keys/values per layer, each `[S, Hkv, D]`, grown along S.
/// Invariant: every layer holds the same S positions once a forward pass returns.
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Vec<Array3<f32>>,
    v: Vec<Array3<f32>>,
}

impl KvCache {
    pub fn new(n_layers: usize, n_kv_heads: usize, head_dim: usize) -> Self {
        let empty = Array3::zeros((0, n_kv_heads, head_dim));
        KvCache { k: vec![empty.clone(); n_layers], v: vec![empty; n_layers] }
    }
    /// S: positions cached (of layer 0).
    pub fn len(&self) -> usize {
        self.k.first().map_or(0, |k| k.dim().0)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Append k, v `[T, Hkv, D]` to layer `l`.
    pub fn append(&mut self, l: usize, k: ArrayView3<f32>, v: ArrayView3<f32>) -> Result<()> {
        let err = |e: ndarray::ShapeError| Error::Input(format!("kv cache layer {l}: cannot append {:?}: {e}", k.dim()));
        self.k[l].append(Axis(0), k).map_err(err)?;
        self.v[l].append(Axis(0), v).map_err(err)
    }
    /// Keys of layer `l`, `[S, Hkv, D]`.
    pub fn keys(&self, l: usize) -> ArrayView3<'_, f32> {
        self.k[l].view()
    }
    /// Values of layer `l`, `[S, Hkv, D]`.
    pub fn values(&self, l: usize) -> ArrayView3<'_, f32> {
        self.v[l].view()
    }
    /// Keep only the first `len` positions.
    pub fn truncate(&mut self, len: usize) {
        for a in self.k.iter_mut().chain(self.v.iter_mut()) {
            if a.dim().0 > len {
                *a = a.slice(ndarray::s![..len, .., ..]).to_owned();
            }
        }
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|a| a.len() * 4).sum()
    }
}
