//! The whole llama-family forward pass on the GPU, kernel by kernel, following the same
//! block diagram as `reference::model` (see there). Weights are uploaded once, each tensor
//! straight from its source (GGUF, safetensors, or synthetic generation) so the host never
//! holds more than one tensor; the KV cache is contiguous on the device.

use reference::engine::Engine;
use reference::weights::{Tensor, TensorSource};
use reference::{Config, Error as RefError};

use crate::kernels::{argmax, attention, embedding, matmul, residual, rmsnorm_device, rope, swiglu};
use crate::{Backend, Client, DeviceTensor, Dtype, Error};

/// One block's weights on the device. Linear weights `[out, in]` in the model dtype; norm
/// gains `[C]` in f32.
pub struct GpuLayer {
    pub attn_norm: DeviceTensor,
    pub wq: DeviceTensor,
    pub wk: DeviceTensor,
    pub wv: DeviceTensor,
    pub wo: DeviceTensor,
    pub ffn_norm: DeviceTensor,
    pub w_gate: DeviceTensor,
    pub w_up: DeviceTensor,
    pub w_down: DeviceTensor,
}

/// A model resident on one device, with its KV cache.
pub struct GpuModel {
    pub client: Client,
    pub backend: Backend,
    pub config: Config,
    pub dtype: Dtype,
    /// `[V, C]`
    pub tok_embd: DeviceTensor,
    pub layers: Vec<GpuLayer>,
    /// `[C]` f32
    pub out_norm: DeviceTensor,
    /// `[V, C]` (aliases `tok_embd` when tied)
    pub lm_head: DeviceTensor,
    rope: rope::RopeTable,
    /// Per layer `[cap, Hkv, D]` f32.
    k_cache: Vec<DeviceTensor>,
    v_cache: Vec<DeviceTensor>,
    /// Positions the cache can hold.
    pub capacity: usize,
    /// Positions cached.
    pos: usize,
    /// Bytes of weights uploaded.
    pub weight_bytes: usize,
}

fn lib(e: RefError) -> Error {
    Error::Shape(e.to_string())
}

impl GpuModel {
    /// Upload every tensor of `cfg` from `src` (matrices as `dtype`, norms as f32) and allocate
    /// a KV cache of `capacity` positions (at most the context length).
    pub fn load(client: Client, backend: Backend, src: &mut dyn TensorSource, cfg: &Config, dtype: Dtype, capacity: usize) -> Result<Self, Error> {
        if !dtype.supported(&client) {
            return Err(Error::Unsupported(format!("{} weights: the {} device has no {} arithmetic", dtype.name(), backend, dtype.name())));
        }
        let mut bytes = 0usize;
        let mut up = |t: Tensor, as_dtype: Dtype| -> Result<DeviceTensor, Error> {
            let data = src.load(t, cfg).map_err(lib)?;
            bytes += data.len() * as_dtype.size();
            DeviceTensor::from_f32_as(&client, &data, &t.shape(cfg), as_dtype)
        };
        let tok_embd = up(Tensor::TokEmbd, dtype)?;
        let lm_head = if cfg.tied_embeddings { tok_embd.clone() } else { up(Tensor::LmHead, dtype)? };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let [an, q, k, v, o, fnm, g, u, d] = Tensor::layer(l);
            layers.push(GpuLayer {
                attn_norm: up(an, Dtype::F32)?,
                wq: up(q, dtype)?,
                wk: up(k, dtype)?,
                wv: up(v, dtype)?,
                wo: up(o, dtype)?,
                ffn_norm: up(fnm, Dtype::F32)?,
                w_gate: up(g, dtype)?,
                w_up: up(u, dtype)?,
                w_down: up(d, dtype)?,
            });
        }
        let out_norm = up(Tensor::OutNorm, Dtype::F32)?;
        let capacity = capacity.clamp(1, cfg.max_ctx);
        let rope = rope::RopeTable::new(&client, capacity, cfg.head_dim, cfg.rope_theta)?;
        let kv_shape = [capacity, cfg.n_kv_heads, cfg.head_dim];
        let k_cache = (0..cfg.n_layers).map(|_| DeviceTensor::empty_f32(&client, &kv_shape)).collect();
        let v_cache = (0..cfg.n_layers).map(|_| DeviceTensor::empty_f32(&client, &kv_shape)).collect();
        Ok(GpuModel { client, backend, config: cfg.clone(), dtype, tok_embd, layers, out_norm, lm_head, rope, k_cache, v_cache, capacity, pos: 0, weight_bytes: bytes })
    }

    /// Bytes of the KV cache allocation.
    pub fn kv_bytes(&self) -> usize {
        2 * self.config.n_layers * self.capacity * self.config.n_kv_heads * self.config.head_dim * 4
    }

    /// Run `ids` at positions `pos ..`; returns the final hidden states normalized and projected:
    /// logits `[T, V]` on the device. With `trace`, each block's output `[T, C]` is read back.
    pub fn forward(&mut self, ids: &[u32], mut trace: Option<&mut Vec<Vec<f32>>>) -> Result<DeviceTensor, Error> {
        let cfg = self.config.clone();
        let (t, d) = (ids.len(), cfg.head_dim);
        if t == 0 {
            return Err(Error::Shape("no tokens to run".into()));
        }
        if self.pos + t > self.capacity {
            return Err(Error::Shape(format!("{t} tokens at position {} exceed the KV cache capacity {}", self.pos, self.capacity)));
        }
        let c = &self.client;
        let pos0 = self.pos;
        let x = embedding::embedding(c, &self.tok_embd, ids)?;
        for (l, w) in self.layers.iter().enumerate() {
            // Attention block.
            let h = rmsnorm_device(c, &x, &w.attn_norm, cfg.rms_eps)?;
            let q = matmul::linear(c, &h, &w.wq)?.reshape(&[t, cfg.n_heads, d])?;
            let k = matmul::linear(c, &h, &w.wk)?.reshape(&[t, cfg.n_kv_heads, d])?;
            let v = matmul::linear(c, &h, &w.wv)?.reshape(&[t, cfg.n_kv_heads, d])?;
            let q = rope::rope(c, &q, &self.rope, pos0, cfg.rope_layout)?;
            let k = rope::rope(c, &k, &self.rope, pos0, cfg.rope_layout)?;
            attention::kv_append(c, &self.k_cache[l], &k, pos0)?;
            attention::kv_append(c, &self.v_cache[l], &v, pos0)?;
            let o = attention::attention(c, &q, &self.k_cache[l], &self.v_cache[l], pos0 + t, pos0, cfg.sliding_window)?;
            let o = o.reshape(&[t, cfg.n_heads * d])?;
            let a = matmul::linear(c, &o, &w.wo)?;
            residual::residual_add(c, &x, &a)?;
            // MLP block.
            let h = rmsnorm_device(c, &x, &w.ffn_norm, cfg.rms_eps)?;
            let g = matmul::linear(c, &h, &w.w_gate)?;
            let u = matmul::linear(c, &h, &w.w_up)?;
            let m = matmul::linear(c, &swiglu::swiglu(c, &g, &u)?, &w.w_down)?;
            residual::residual_add(c, &x, &m)?;
            if let Some(tr) = trace.as_deref_mut() {
                tr.push(x.to_f32(c)?);
            }
        }
        self.pos += t;
        let h = rmsnorm_device(c, &x, &self.out_norm, cfg.rms_eps)?;
        // Only the last position's logits are needed for generation; all are kept for checks.
        matmul::linear(c, &h, &self.lm_head)
    }

    /// The last row of a `[T, V]` device tensor as a `[1, V]` view-copy on the device.
    fn last_row(&self, logits: &DeviceTensor) -> Result<Vec<f32>, Error> {
        let v = self.config.vocab;
        let all = logits.to_f32(&self.client)?;
        Ok(all[all.len() - v..].to_vec())
    }

    pub fn reset(&mut self) {
        self.pos = 0;
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
}

/// A [`GpuModel`] behind the reference's [`Engine`] trait (what `tandem generate` drives).
pub struct GpuEngine(pub GpuModel);

fn to_ref(e: Error) -> RefError {
    RefError::Backend(e.to_string())
}

impl Engine for GpuEngine {
    fn config(&self) -> &Config {
        &self.0.config
    }
    fn reset(&mut self) {
        self.0.reset();
    }
    fn pos(&self) -> usize {
        self.0.pos()
    }
    fn step(&mut self, ids: &[u32]) -> reference::Result<Vec<f32>> {
        let l = self.0.forward(ids, None).map_err(to_ref)?;
        self.0.last_row(&l).map_err(to_ref)
    }
    fn step_greedy(&mut self, ids: &[u32]) -> reference::Result<u32> {
        let l = self.0.forward(ids, None).map_err(to_ref)?;
        let ids = argmax::argmax(&self.0.client, &l).map_err(to_ref)?.to_u32(&self.0.client).map_err(to_ref)?;
        ids.last().copied().ok_or_else(|| RefError::Backend("argmax returned no id".into()))
    }
    fn name(&self) -> String {
        format!("{}-{}", self.0.backend, self.0.dtype.name())
    }
}
