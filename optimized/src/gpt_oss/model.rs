//! GPT-OSS's weights on the device and its forward pass over N token rows, kernel by kernel
//! (the equations: `reference::gpt_oss`). Attention is left to the caller (`attend`: RoPE, KV
//! write and flash attention over its own cache layout; see [`super::runner`]).
//!
//! Per block: RMSNorm; q|k|v by ONE matmul over Wq|Wk|Wv stacked at load, the biases by one
//! add (bq|bk|bv stacked); attention with the layer's window and sinks; Wo and bo; x += ·
//! with the MoE's RMSNorm in the same launch (`add_rmsnorm`); the MoE (`kernels::moe`: the
//! router on the device, grouped MXFP4 gemvs for ≤ 8 rows, sort + grouped GEMMs above) adds
//! into x. After the last block the caller picks the rows whose logits it needs
//! ([`GptOssGpu::logits`]: final RMSNorm + lm_head on those rows only).

use reference::gpt_oss::weights::{Dense, GptOssSource};
use reference::gpt_oss::{ExpertWeights, GptOssConfig};

use crate::kernels::moe::{self, MoePath, MoeWeights, Mxfp4Experts};
use crate::kernels::rmsnorm::add_rmsnorm_device;
use crate::kernels::{embedding, matmul, rmsnorm_device};
use crate::upload::{Part, Staging};
use crate::{Backend, Client, DeviceTensor, Dtype, Error};

/// One block's weights on the device: matrices in the model dtype, vectors f32.
pub struct GptOssGpuLayer {
    pub attn_norm: DeviceTensor,
    /// `[(H + 2·Hkv)·D, C]`: Wq, Wk, Wv stacked by rows.
    pub wqkv: DeviceTensor,
    /// `[(H + 2·Hkv)·D]`: bq, bk, bv.
    pub bqkv: DeviceTensor,
    /// `[C, H·D]`, `[C]`.
    pub wo: DeviceTensor,
    pub bo: DeviceTensor,
    /// `[H]` sink logits.
    pub sinks: DeviceTensor,
    pub ffn_norm: DeviceTensor,
    /// Router (f32: a rounded router would move expert choices near ties) and MXFP4 experts.
    pub moe: MoeWeights,
    /// The sliding window of this layer, `None` for full attention.
    pub window: Option<usize>,
}

/// GPT-OSS resident on one device (no KV cache: runners own theirs).
pub struct GptOssGpu {
    pub client: Client,
    pub backend: Backend,
    pub config: GptOssConfig,
    pub dtype: Dtype,
    /// `[V, C]`
    pub tok_embd: DeviceTensor,
    pub layers: Vec<GptOssGpuLayer>,
    /// `[C]` f32
    pub out_norm: DeviceTensor,
    /// `[V, C]`, aliasing `tok_embd` when tied.
    pub lm_head: DeviceTensor,
    /// Bytes of weights uploaded.
    pub weight_bytes: usize,
    /// Bytes one decode step of one token reads: dense weights, the lm_head, K of E experts.
    pub stream_bytes: usize,
    /// How the MoE runs (`Auto` unless a test or benchmark forces a path).
    pub moe_path: MoePath,
}

/// Uploads tensors from a source, counting bytes: the stored bytes through the load's staging
/// buffers where the source has them (a checkpoint: dense tensors converted in parallel, experts
/// repacked row by row in parallel, as the Llama loader does), else its f32 values and
/// per-expert matrices.
struct Uploader<'a> {
    client: &'a Client,
    staging: Staging,
    src: &'a mut dyn GptOssSource,
    cfg: &'a GptOssConfig,
    bytes: usize,
}

impl Uploader<'_> {
    /// `ts` stacked by rows (1-D tensors: concatenated) as one tensor stored as `dtype`.
    fn dense(&mut self, ts: &[Dense], dtype: Dtype) -> Result<DeviceTensor, Error> {
        let mut shape = ts.first().map(|t| t.shape(self.cfg)).unwrap_or_default();
        for t in ts.iter().skip(1) {
            shape[0] += t.shape(self.cfg)[0];
        }
        let ds = dtype.size();
        let total = shape.iter().product::<usize>() * ds;
        let handle = self.client.empty(total.max(ds));
        let mut at = 0;
        for &t in ts {
            let n = t.shape(self.cfg).iter().product::<usize>() * ds;
            let part = match self.src.dense_raw(t, self.cfg).map_err(Error::from)? {
                Some(raw) => Part::Raw(raw),
                None => Part::Values(self.src.dense(t, self.cfg).map_err(Error::from)?),
            };
            self.staging.write_part(self.client, &handle, at, n, total, dtype, &part)?;
            at += n;
        }
        self.bytes += total;
        // Weights: no kernel writes them (the gemvs may read them ahead: `kernels::pdl`).
        Ok(DeviceTensor { handle, shape, dtype, read_only: true })
    }

    /// Block `l`'s experts: gate|up interleaved `[E, 2F, C]` and down `[E, C, F]`.
    fn experts(&mut self, l: usize) -> Result<(Mxfp4Experts, Mxfp4Experts), Error> {
        if let Some([gu, dn]) = self.src.experts_stored(l, self.cfg).map_err(Error::from)? {
            let (gu, dn) =
                (Mxfp4Experts::upload_stored(self.client, &self.staging, &gu)?, Mxfp4Experts::upload_stored(self.client, &self.staging, &dn)?);
            self.bytes += gu.bytes() + dn.bytes();
            return Ok((gu, dn));
        }
        let ex: Vec<ExpertWeights> = self.src.experts(l, self.cfg).map_err(Error::from)?;
        // Biases are built contiguous; a view that is not would fail the upload's length check.
        let gate: Vec<_> = ex.iter().map(|x| (&x.gate, x.gate_bias.as_slice().unwrap_or(&[]))).collect();
        let up: Vec<_> = ex.iter().map(|x| (&x.up, x.up_bias.as_slice().unwrap_or(&[]))).collect();
        let down: Vec<_> = ex.iter().map(|x| (&x.down, x.down_bias.as_slice().unwrap_or(&[]))).collect();
        let gu = Mxfp4Experts::upload_glu(self.client, &format!("layer {l} gate|up experts"), &gate, &up)?;
        let (dm, db): (Vec<_>, Vec<_>) = down.into_iter().unzip();
        let dn = Mxfp4Experts::upload(self.client, &format!("layer {l} down experts"), &dm, &db)?;
        self.bytes += gu.bytes() + dn.bytes();
        Ok((gu, dn))
    }
}

impl GptOssGpu {
    /// Upload every tensor of `cfg` from `src`: dense matrices (embedding, q|k|v, o, lm_head)
    /// as `dtype`; norms, biases, sinks and the router f32; experts MXFP4 as stored.
    pub fn load(client: Client, backend: Backend, src: &mut dyn GptOssSource, cfg: &GptOssConfig, dtype: Dtype) -> Result<Self, Error> {
        if !dtype.supported(&client) {
            return Err(Error::Unsupported(format!("{} weights: the {backend} device has no {} arithmetic", dtype.name(), dtype.name())));
        }
        let mut up = Uploader { client: &client, staging: Staging::for_client(&client)?, src, cfg, bytes: 0 };
        let tok_embd = up.dense(&[Dense::TokEmbd], dtype)?;
        let lm_head = if cfg.tied_embeddings { tok_embd.clone() } else { up.dense(&[Dense::LmHead], dtype)? };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let [an, q, bq, k, bk, v, bv, o, bo, sinks, fnm, r, br] = Dense::layer(l);
            let (gate_up, down) = up.experts(l)?;
            layers.push(GptOssGpuLayer {
                attn_norm: up.dense(&[an], Dtype::F32)?,
                wqkv: up.dense(&[q, k, v], dtype)?,
                bqkv: up.dense(&[bq, bk, bv], Dtype::F32)?,
                wo: up.dense(&[o], dtype)?,
                bo: up.dense(&[bo], Dtype::F32)?,
                sinks: up.dense(&[sinks], Dtype::F32)?,
                ffn_norm: up.dense(&[fnm], Dtype::F32)?,
                moe: MoeWeights::mxfp4(
                    &client,
                    up.dense(&[r], Dtype::F32)?,
                    up.dense(&[br], Dtype::F32)?,
                    gate_up,
                    down,
                    cfg.n_experts_used,
                    cfg.swiglu_limit,
                    cfg.swiglu_alpha,
                    dtype != Dtype::F32,
                )?,
                window: cfg.layer_window(l),
            });
        }
        let out_norm = up.dense(&[Dense::OutNorm], Dtype::F32)?;
        // Loaded means on the device: the copies still queued finish here (a failure surfaces
        // now, not in the first step).
        up.staging.finish()?;
        cubecl::future::block_on(client.sync())?;
        let weight_bytes = up.bytes;
        let expert_share = |w: &moe::Experts| w.bytes() / w.n_experts().max(1) * cfg.n_experts_used;
        let dense = |t: &DeviceTensor| t.numel() * t.dtype.size();
        let stream_bytes = layers
            .iter()
            .map(|l| dense(&l.wqkv) + dense(&l.wo) + dense(&l.moe.router) + expert_share(&l.moe.gate_up) + expert_share(&l.moe.down))
            .sum::<usize>()
            + dense(&lm_head);
        Ok(GptOssGpu {
            client,
            backend,
            config: cfg.clone(),
            dtype,
            tok_embd,
            layers,
            out_norm,
            lm_head,
            weight_bytes,
            stream_bytes,
            moe_path: MoePath::Auto,
        })
    }

    /// `x [N, C]`: the embedding rows of `ids` (no scaling).
    pub fn embed(&self, ids: &[u32]) -> Result<DeviceTensor, Error> {
        embedding::embedding(&self.client, &self.tok_embd, ids)
    }

    /// `x [N, C]`: the embedding rows of the `n` ids already on the device.
    pub fn embed_device(&self, ids: &DeviceTensor, n: usize) -> Result<DeviceTensor, Error> {
        let x = DeviceTensor::empty_f32(&self.client, &[n, self.config.hidden]);
        embedding::embedding_device_ids_into(&self.client, &self.tok_embd, ids, &x)?;
        Ok(x)
    }

    /// The blocks over the residual stream `x [N, C]` (updated in place), with `attend(l, qkv)`
    /// computing block l's attention output `[N, H, D]` from its biased q|k|v rows.
    pub fn blocks(&self, x: &DeviceTensor, attend: &mut dyn FnMut(usize, &DeviceTensor) -> Result<DeviceTensor, Error>) -> Result<(), Error> {
        let cfg = &self.config;
        let c = &self.client;
        let n = x.shape.first().copied().unwrap_or(0);
        for (l, w) in self.layers.iter().enumerate() {
            let h = rmsnorm_device(c, x, &w.attn_norm, cfg.rms_eps)?;
            // The biases in the decode gemvs' epilogue (one launch each), else after the GEMM.
            let qkv = matmul::linear_bias(c, &h, &w.wqkv, &w.bqkv)?;
            let o = attend(l, &qkv)?.reshape(&[n, cfg.n_heads * cfg.head_dim])?;
            let a = matmul::linear_bias(c, &o, &w.wo, &w.bo)?;
            // x ← x + a, then the MoE's norm, in one launch; the MoE adds into x.
            let hm = add_rmsnorm_device(c, x, &a, &w.ffn_norm, cfg.rms_eps)?;
            moe::moe_into(c, &hm, &w.moe, x, self.moe_path)?;
        }
        Ok(())
    }

    /// Logits `[R, V]` of rows `rows` of the residual stream `x [N, C]` after the blocks: the
    /// rows gathered (all of them when `rows` is every row in order), the final RMSNorm, the
    /// lm_head.
    pub fn logits(&self, x: &DeviceTensor, rows: &[u32]) -> Result<DeviceTensor, Error> {
        let c = &self.client;
        let n = x.shape.first().copied().unwrap_or(0);
        let every = rows.len() == n && rows.iter().enumerate().all(|(i, &r)| r as usize == i);
        let picked = if every {
            x.clone()
        } else {
            let p = DeviceTensor::empty_f32(c, &[rows.len(), self.config.hidden]);
            embedding::embedding_device_ids_into(c, x, &DeviceTensor::from_u32(c, rows, &[rows.len()])?, &p)?;
            p
        };
        let h = rmsnorm_device(c, &picked, &self.out_norm, self.config.rms_eps)?;
        matmul::linear(c, &h, &self.lm_head)
    }
}
