//! GPT-OSS weights: every dense tensor in f32, experts kept in MXFP4 as stored and dequantized
//! when a token is routed to them (gpt-oss-20b has 19.1 billion expert weights: 76 GB in f32,
//! 10.2 GB in MXFP4).

use std::ops::Range;

use ndarray::{Array1, Array2};

use super::config::GptOssConfig;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::quant::mxfp4::{self, Mxfp4Weight};
use crate::weights::{Naming, RawDense, Tensor, TensorSource};

/// One expert. Matrices `[out, in]` in MXFP4 (OCP layout, [`crate::quant::mxfp4`]), biases f32.
/// Gate and up are kept apart (GGUF's layout); HF interleaves them in one `gate_up_proj`
/// (gate = rows 0::2, up = rows 1::2), which the loader splits — exactly, since MXFP4 blocks
/// run along the input and a row is a whole number of blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertWeights {
    /// `[F, C]`
    pub gate: Mxfp4Weight,
    /// `[F]`
    pub gate_bias: Array1<f32>,
    /// `[F, C]`
    pub up: Mxfp4Weight,
    /// `[F]`
    pub up_bias: Array1<f32>,
    /// `[C, F]`
    pub down: Mxfp4Weight,
    /// `[C]`
    pub down_bias: Array1<f32>,
}

/// An expert dequantized to f32 (what [`super::ops::moe::expert_ffn`] multiplies with).
#[derive(Debug, Clone)]
pub struct DenseExpert {
    /// `[F, C]`
    pub gate: Array2<f32>,
    /// `[F]`
    pub gate_bias: Array1<f32>,
    /// `[F, C]`
    pub up: Array2<f32>,
    /// `[F]`
    pub up_bias: Array1<f32>,
    /// `[C, F]`
    pub down: Array2<f32>,
    /// `[C]`
    pub down_bias: Array1<f32>,
}

fn dense_matrix(w: &Mxfp4Weight) -> Result<Array2<f32>> {
    Array2::from_shape_vec((w.out(), w.in_dim()), mxfp4::dequant(w))
        .map_err(|e| Error::Input(format!("expert matrix [{}, {}]: {e}", w.out(), w.in_dim())))
}

impl ExpertWeights {
    /// `w' = E2M1[nibble] · 2^(scale − 127)` of every matrix (exact), biases copied.
    pub fn dequant(&self) -> Result<DenseExpert> {
        Ok(DenseExpert {
            gate: dense_matrix(&self.gate)?,
            gate_bias: self.gate_bias.clone(),
            up: dense_matrix(&self.up)?,
            up_bias: self.up_bias.clone(),
            down: dense_matrix(&self.down)?,
            down_bias: self.down_bias.clone(),
        })
    }

    /// Check every shape against `cfg`; `what` (e.g. "layer 3 expert 7") goes into errors.
    pub fn check(&self, cfg: &GptOssConfig, what: &str) -> Result<()> {
        let (c, f) = (cfg.hidden, cfg.expert_ffn);
        for (name, w, want) in [("gate", &self.gate, (f, c)), ("up", &self.up, (f, c)), ("down", &self.down, (c, f))] {
            if (w.out(), w.in_dim()) != want {
                return Err(Error::Input(format!("{what}: {name} is [{}, {}], config wants {want:?}", w.out(), w.in_dim())));
            }
        }
        for (name, b, want) in [("gate_bias", &self.gate_bias, f), ("up_bias", &self.up_bias, f), ("down_bias", &self.down_bias, c)] {
            if b.len() != want {
                return Err(Error::Input(format!("{what}: {name} has {} values, config wants {want}", b.len())));
            }
        }
        Ok(())
    }
}

/// One transformer block. Linear weights are `[out, in]` (y = x Wᵀ + b).
#[derive(Debug, Clone)]
pub struct GptOssLayer {
    /// `[C]` RMSNorm gain before attention.
    pub attn_norm: Array1<f32>,
    /// `[H·D, C]`, `[H·D]`
    pub wq: Array2<f32>,
    pub bq: Array1<f32>,
    /// `[Hkv·D, C]`, `[Hkv·D]`
    pub wk: Array2<f32>,
    pub bk: Array1<f32>,
    /// `[Hkv·D, C]`, `[Hkv·D]`
    pub wv: Array2<f32>,
    pub bv: Array1<f32>,
    /// `[C, H·D]`, `[C]`
    pub wo: Array2<f32>,
    pub bo: Array1<f32>,
    /// `[H]` attention sink logit per query head.
    pub sinks: Array1<f32>,
    /// `[C]` RMSNorm gain before the MoE (HF `post_attention_layernorm`).
    pub ffn_norm: Array1<f32>,
    /// `[E, C]`, `[E]`
    pub router: Array2<f32>,
    pub router_bias: Array1<f32>,
    /// E experts.
    pub experts: Vec<ExpertWeights>,
}

/// All weights of a GPT-OSS model.
#[derive(Debug, Clone)]
pub struct GptOssWeights {
    /// `[V, C]` token embeddings.
    pub tok_embd: Array2<f32>,
    /// L blocks.
    pub layers: Vec<GptOssLayer>,
    /// `[C]` final RMSNorm gain.
    pub out_norm: Array1<f32>,
    /// `[V, C]` unembedding; `None` when tied to `tok_embd`.
    pub lm_head: Option<Array2<f32>>,
}

/// Every dense (non-expert) tensor, independent of file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dense {
    TokEmbd,
    OutNorm,
    LmHead,
    AttnNorm(usize),
    Wq(usize),
    Bq(usize),
    Wk(usize),
    Bk(usize),
    Wv(usize),
    Bv(usize),
    Wo(usize),
    Bo(usize),
    Sinks(usize),
    FfnNorm(usize),
    Router(usize),
    RouterBias(usize),
}

impl Dense {
    /// The dense tensors of block `l`, in file order.
    pub fn layer(l: usize) -> [Dense; 13] {
        use Dense::*;
        [AttnNorm(l), Wq(l), Bq(l), Wk(l), Bk(l), Wv(l), Bv(l), Wo(l), Bo(l), Sinks(l), FfnNorm(l), Router(l), RouterBias(l)]
    }

    /// The block a per-layer tensor belongs to (`None` for the global ones).
    pub fn block(self) -> Option<usize> {
        use Dense::*;
        match self {
            TokEmbd | OutNorm | LmHead => None,
            AttnNorm(l) | Wq(l) | Bq(l) | Wk(l) | Bk(l) | Wv(l) | Bv(l) | Wo(l) | Bo(l) | Sinks(l) | FfnNorm(l) | Router(l) | RouterBias(l) => {
                Some(l)
            }
        }
    }

    /// Row-major shape under `cfg`.
    pub fn shape(self, cfg: &GptOssConfig) -> Vec<usize> {
        let (c, v, e) = (cfg.hidden, cfg.vocab, cfg.n_experts);
        let (qd, kvd) = (cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim);
        use Dense::*;
        match self {
            TokEmbd | LmHead => vec![v, c],
            OutNorm | AttnNorm(_) | FfnNorm(_) | Bo(_) => vec![c],
            Wq(_) => vec![qd, c],
            Bq(_) => vec![qd],
            Wk(_) | Wv(_) => vec![kvd, c],
            Bk(_) | Bv(_) => vec![kvd],
            Wo(_) => vec![c, qd],
            Sinks(_) => vec![cfg.n_heads],
            Router(_) => vec![e, c],
            RouterBias(_) => vec![e],
        }
    }

    /// The tensor of the table every architecture shares ([`Tensor`]) whose names this one
    /// has: the FFN norm is stored under the post-attention norm's names (HF
    /// `post_attention_layernorm`, llama.cpp `post_attention_norm`).
    pub fn tensor(self) -> Tensor {
        use Dense::*;
        match self {
            TokEmbd => Tensor::TokEmbd,
            OutNorm => Tensor::OutNorm,
            LmHead => Tensor::LmHead,
            AttnNorm(l) => Tensor::AttnNorm(l),
            Wq(l) => Tensor::Wq(l),
            Bq(l) => Tensor::Bq(l),
            Wk(l) => Tensor::Wk(l),
            Bk(l) => Tensor::Bk(l),
            Wv(l) => Tensor::Wv(l),
            Bv(l) => Tensor::Bv(l),
            Wo(l) => Tensor::Wo(l),
            Bo(l) => Tensor::Bo(l),
            Sinks(l) => Tensor::Sinks(l),
            FfnNorm(l) => Tensor::PostAttnNorm(l),
            Router(l) => Tensor::Router(l),
            RouterBias(l) => Tensor::RouterBias(l),
        }
    }

    /// The GPT-OSS tensor `t` of the shared table is (`None`: GPT-OSS has no such tensor).
    pub fn of_tensor(t: Tensor) -> Option<Dense> {
        use Dense::*;
        Some(match t {
            Tensor::TokEmbd => TokEmbd,
            Tensor::OutNorm => OutNorm,
            Tensor::LmHead => LmHead,
            Tensor::AttnNorm(l) => AttnNorm(l),
            Tensor::Wq(l) => Wq(l),
            Tensor::Bq(l) => Bq(l),
            Tensor::Wk(l) => Wk(l),
            Tensor::Bk(l) => Bk(l),
            Tensor::Wv(l) => Wv(l),
            Tensor::Bv(l) => Bv(l),
            Tensor::Wo(l) => Wo(l),
            Tensor::Bo(l) => Bo(l),
            Tensor::Sinks(l) => Sinks(l),
            Tensor::FfnNorm(l) | Tensor::PostAttnNorm(l) => FfnNorm(l),
            Tensor::Router(l) => Router(l),
            Tensor::RouterBias(l) => RouterBias(l),
            _ => return None,
        })
    }

    /// Name in an HF safetensors checkpoint ([`Tensor::name`]).
    pub fn hf_name(self) -> String {
        self.tensor().name(Naming::Hf)
    }

    /// Name in a llama.cpp GGUF ([`Tensor::name`]).
    pub fn gguf_name(self) -> String {
        self.tensor().name(Naming::Gguf)
    }
}

/// The expert tensors of block `l` in an HF checkpoint: `(gate_up, down)` name prefixes; each
/// has `_blocks` `[E, out, in/32, 16]` U8, `_scales` `[E, out, in/32]` U8, `_bias` `[E, out]`.
pub fn hf_expert_names(l: usize) -> (String, String) {
    let p = format!("model.layers.{l}.mlp.experts");
    (format!("{p}.gate_up_proj"), format!("{p}.down_proj"))
}

/// The expert tensors of block `l` in a GGUF: `blk.l.ffn_{gate,up,down}_exps` (`.weight` MXFP4
/// `[E, out, in]`, `.bias` `[E, out]`).
pub fn gguf_expert_names(l: usize) -> [String; 3] {
    ["gate", "up", "down"].map(|k| format!("blk.{l}.ffn_{k}_exps"))
}

/// Anything that hands out GPT-OSS tensors (a checkpoint, synthetic weights).
pub trait GptOssSource {
    /// The f32 data of `t`, after checking its shape is `t.shape(cfg)`.
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Vec<f32>>;
    /// The E experts of block `l`.
    fn experts(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>>;

    /// The experts `held` of block `l` (an expert-parallel rank's share): those of
    /// [`GptOssSource::experts`]; a source that builds experts builds only these.
    fn experts_in(&mut self, l: usize, held: Range<usize>, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        let mut ex = self.experts(l, cfg)?;
        if held.end > ex.len() {
            return Err(Error::Input(format!("experts {held:?} of layer {l}: it has {}", ex.len())));
        }
        ex.truncate(held.end);
        Ok(ex.split_off(held.start))
    }

    /// `t`'s stored bytes when the source holds it dense (F32 / F16 / BF16) with the shape
    /// `t.shape(cfg)`, so that [`GptOssSource::dense`] would return exactly their values; `None`
    /// otherwise (then `dense` is the way). A backend converts them straight to its own type.
    fn dense_raw(&mut self, _t: Dense, _cfg: &GptOssConfig) -> Result<Option<RawDense<'_>>> {
        Ok(None)
    }

    /// Block `l`'s experts as the file stores them, `[gate|up, down]`, borrowed where the
    /// source can (a memory-mapped checkpoint): what [`GptOssSource::experts`] returns, row for
    /// row ([`StoredExperts::row_into`]), without building it. `None` where the source has no
    /// stored form (then `experts` is the way).
    fn experts_stored(&mut self, _l: usize, _cfg: &GptOssConfig) -> Result<Option<[StoredExperts<'_>; 2]>> {
        Ok(None)
    }
}

/// One part of a projection's experts as a file stores them, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum StoredPart<'a> {
    /// [`Mxfp4Weight`]'s own packing (HF): `blocks [E, R, in/32, 16]`, `scales [E, R, in/32]`.
    Split { blocks: &'a [u8], scales: &'a [u8] },
    /// ggml MXFP4 (GGUF type 39): `[E, R, in/32]` blocks of 17 bytes ([`mxfp4::from_ggml`]).
    Ggml(&'a [u8]),
}

/// Every expert of one projection (gate|up or down) of a block, as stored. Row `i` of expert
/// `e` (of `P · rows` rows) is row `i / P` of part `i % P`: gate|up is one part in an HF
/// checkpoint (gate and up rows already interleaved) and two in a GGUF (gate, then up) — the
/// order of [`ExpertWeights`]'s gate and up rows interleaved.
#[derive(Debug, Clone)]
pub struct StoredExperts<'a> {
    /// The tensor, for errors.
    pub name: String,
    pub parts: Vec<StoredPart<'a>>,
    pub n_experts: usize,
    /// Rows of each part per expert.
    pub rows: usize,
    pub in_dim: usize,
    /// `[E, P · rows]` f32, rows in the interleaved order.
    pub bias: Vec<f32>,
}

impl StoredExperts<'_> {
    /// Rows per expert, all parts.
    pub fn out(&self) -> usize {
        self.parts.len() * self.rows
    }

    /// Checks that every part holds `n_experts · rows` rows of `in_dim` and the bias `[E, out]`.
    pub fn check(&self) -> Result<()> {
        let nb = self.in_dim / mxfp4::BLOCK;
        let n_rows = self.n_experts * self.rows;
        let bad = |m: String| Err(Error::Input(format!("{}: {m}", self.name)));
        if self.parts.is_empty() || nb == 0 || !self.in_dim.is_multiple_of(mxfp4::BLOCK) {
            return bad(format!("{} parts of rows of {} (a positive multiple of {} is needed)", self.parts.len(), self.in_dim, mxfp4::BLOCK));
        }
        for p in &self.parts {
            let (got, want) = match p {
                StoredPart::Split { blocks, scales } => ((blocks.len(), scales.len()), (n_rows * nb * mxfp4::BLOCK_BYTES, n_rows * nb)),
                StoredPart::Ggml(b) => ((b.len(), 0), (n_rows * nb * mxfp4::GGML_BLOCK_BYTES, 0)),
            };
            if got != want {
                return bad(format!("{got:?} bytes (blocks, scales), [{}, {}, {}] needs {want:?}", self.n_experts, self.rows, self.in_dim));
            }
        }
        if self.bias.len() != self.n_experts * self.out() {
            return bad(format!("bias has {} values, expected [{}, {}]", self.bias.len(), self.n_experts, self.out()));
        }
        Ok(())
    }

    /// Row `i` of expert `e` in [`Mxfp4Weight`]'s packing: `in/32 · 16` bytes into `blocks`,
    /// `in/32` scale bytes into `scales` — an error naming the tensor, expert, row and block for
    /// a block [`Mxfp4Weight::from_parts`] refuses.
    pub fn row_into(&self, e: usize, i: usize, blocks: &mut [u8], scales: &mut [u8]) -> Result<()> {
        let (nb, pn) = (self.in_dim / mxfp4::BLOCK, self.parts.len().max(1));
        let (part, r) = (i % pn, i / pn);
        let src = e * self.rows + r;
        let short = || Error::Input(format!("{}: expert {e} row {i} is past the stored bytes", self.name));
        if blocks.len() != nb * mxfp4::BLOCK_BYTES || scales.len() != nb {
            return Err(Error::Input(format!("{}: a row is {nb} blocks", self.name)));
        }
        match self.parts.get(part).ok_or_else(short)? {
            StoredPart::Split { blocks: b, scales: s } => {
                let rb = mxfp4::BLOCK_BYTES * nb;
                blocks.copy_from_slice(b.get(src * rb..(src + 1) * rb).ok_or_else(short)?);
                scales.copy_from_slice(s.get(src * nb..(src + 1) * nb).ok_or_else(short)?);
            }
            StoredPart::Ggml(g) => {
                let rg = mxfp4::GGML_BLOCK_BYTES * nb;
                let row = g.get(src * rg..(src + 1) * rg).ok_or_else(short)?;
                for ((g, b), s) in row.chunks_exact(mxfp4::GGML_BLOCK_BYTES).zip(blocks.chunks_exact_mut(mxfp4::BLOCK_BYTES)).zip(scales.iter_mut()) {
                    *s = mxfp4::ggml_block_into(g, b);
                }
            }
        }
        for (b, (&s, blk)) in scales.iter().zip(blocks.chunks_exact(mxfp4::BLOCK_BYTES)).enumerate() {
            if let Some(p) = mxfp4::block_problem(s, blk) {
                return Err(Error::Input(format!("{}: expert {e} row {i} block {b}: {p}", self.name)));
            }
        }
        Ok(())
    }
}

/// Dense matrix `t` from `src` as `[rows, cols]`.
fn matrix(src: &mut dyn GptOssSource, t: Dense, cfg: &GptOssConfig) -> Result<Array2<f32>> {
    let s = t.shape(cfg);
    Array2::from_shape_vec((s[0], s[1]), src.dense(t, cfg)?).map_err(|e| Error::Input(format!("{}: {e}", t.hf_name())))
}

impl GptOssWeights {
    /// Load every tensor of `cfg` from `src`, checking every shape.
    pub fn load(src: &mut dyn GptOssSource, cfg: &GptOssConfig) -> Result<Self> {
        let tok_embd = matrix(src, Dense::TokEmbd, cfg)?;
        let lm_head = if cfg.tied_embeddings { None } else { Some(matrix(src, Dense::LmHead, cfg)?) };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let [an, q, bq, k, bk, v, bv, o, bo, sinks, fnm, r, br] = Dense::layer(l);
            let (wq, wk, wv, wo, router) =
                (matrix(src, q, cfg)?, matrix(src, k, cfg)?, matrix(src, v, cfg)?, matrix(src, o, cfg)?, matrix(src, r, cfg)?);
            let mut vec1 = |t: Dense| src.dense(t, cfg).map(Array1::from_vec);
            let layer = GptOssLayer {
                attn_norm: vec1(an)?,
                wq,
                bq: vec1(bq)?,
                wk,
                bk: vec1(bk)?,
                wv,
                bv: vec1(bv)?,
                wo,
                bo: vec1(bo)?,
                sinks: vec1(sinks)?,
                ffn_norm: vec1(fnm)?,
                router,
                router_bias: vec1(br)?,
                experts: src.experts(l, cfg)?,
            };
            if layer.experts.len() != cfg.n_experts {
                return Err(Error::Input(format!("layer {l}: {} experts, config wants {}", layer.experts.len(), cfg.n_experts)));
            }
            for (e, x) in layer.experts.iter().enumerate() {
                x.check(cfg, &format!("layer {l} expert {e}"))?;
            }
            layers.push(layer);
        }
        let out_norm = Array1::from_vec(src.dense(Dense::OutNorm, cfg)?);
        Ok(GptOssWeights { tok_embd, layers, out_norm, lm_head })
    }

    /// The unembedding `[V, C]` (the token embedding when tied).
    pub fn head(&self) -> &Array2<f32> {
        self.lm_head.as_ref().unwrap_or(&self.tok_embd)
    }

    /// Visit every dense tensor with its identity (for writers and uploads). All arrays are
    /// built in standard layout, so each is one contiguous slice.
    pub fn for_each_dense(&self, cfg: &GptOssConfig, mut f: impl FnMut(Dense, &[f32])) {
        f(Dense::TokEmbd, self.tok_embd.as_slice().unwrap_or(&[]));
        for (l, w) in self.layers.iter().enumerate() {
            let [an, q, bq, k, bk, v, bv, o, bo, sinks, fnm, r, br] = Dense::layer(l);
            for (t, s) in [
                (an, w.attn_norm.as_slice()),
                (q, w.wq.as_slice()),
                (bq, w.bq.as_slice()),
                (k, w.wk.as_slice()),
                (bk, w.bk.as_slice()),
                (v, w.wv.as_slice()),
                (bv, w.bv.as_slice()),
                (o, w.wo.as_slice()),
                (bo, w.bo.as_slice()),
                (sinks, w.sinks.as_slice()),
                (fnm, w.ffn_norm.as_slice()),
                (r, w.router.as_slice()),
                (br, w.router_bias.as_slice()),
            ] {
                f(t, s.unwrap_or(&[]));
            }
        }
        f(Dense::OutNorm, self.out_norm.as_slice().unwrap_or(&[]));
        if let (Some(h), false) = (&self.lm_head, cfg.tied_embeddings) {
            f(Dense::LmHead, h.as_slice().unwrap_or(&[]));
        }
    }
}

impl GptOssWeights {
    /// A copy with `round` applied to every dense matrix a GPU stores in its weight dtype
    /// (token embedding, unembedding, Wq, Wk, Wv, Wo); norms, biases, sinks, the router (kept
    /// f32 on the GPU: a rounded router would move expert choices near ties) and the MXFP4
    /// experts are copied as they are.
    pub fn map_matrices(&self, round: impl Fn(f32) -> f32) -> GptOssWeights {
        let m = |a: &Array2<f32>| a.mapv(&round);
        GptOssWeights {
            tok_embd: m(&self.tok_embd),
            layers: self.layers.iter().map(|w| GptOssLayer { wq: m(&w.wq), wk: m(&w.wk), wv: m(&w.wv), wo: m(&w.wo), ..w.clone() }).collect(),
            out_norm: self.out_norm.clone(),
            lm_head: self.lm_head.as_ref().map(m),
        }
    }

    /// The f32 data of dense tensor `t` (the token embedding for a tied `LmHead`).
    pub fn dense_slice(&self, t: Dense) -> Result<&[f32]> {
        let layer = |l: usize| self.layers.get(l).ok_or_else(|| Error::Input(format!("{}: layer {l} does not exist", t.hf_name())));
        let s = match t {
            Dense::TokEmbd => self.tok_embd.as_slice(),
            Dense::OutNorm => self.out_norm.as_slice(),
            Dense::LmHead => self.head().as_slice(),
            Dense::AttnNorm(l) => layer(l)?.attn_norm.as_slice(),
            Dense::Wq(l) => layer(l)?.wq.as_slice(),
            Dense::Bq(l) => layer(l)?.bq.as_slice(),
            Dense::Wk(l) => layer(l)?.wk.as_slice(),
            Dense::Bk(l) => layer(l)?.bk.as_slice(),
            Dense::Wv(l) => layer(l)?.wv.as_slice(),
            Dense::Bv(l) => layer(l)?.bv.as_slice(),
            Dense::Wo(l) => layer(l)?.wo.as_slice(),
            Dense::Bo(l) => layer(l)?.bo.as_slice(),
            Dense::Sinks(l) => layer(l)?.sinks.as_slice(),
            Dense::FfnNorm(l) => layer(l)?.ffn_norm.as_slice(),
            Dense::Router(l) => layer(l)?.router.as_slice(),
            Dense::RouterBias(l) => layer(l)?.router_bias.as_slice(),
        };
        s.ok_or_else(|| Error::Input(format!("{}: not contiguous", t.hf_name())))
    }
}

/// Loaded weights as a [`GptOssSource`] (a GPU upload from the same weights the reference runs).
pub struct InMemory<'a>(pub &'a GptOssWeights);

impl GptOssSource for InMemory<'_> {
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Vec<f32>> {
        let s = self.0.dense_slice(t)?;
        let want: usize = t.shape(cfg).iter().product();
        if s.len() != want {
            return Err(Error::Input(format!("{}: {} values, config wants {:?}", t.hf_name(), s.len(), t.shape(cfg))));
        }
        Ok(s.to_vec())
    }
    fn experts(&mut self, l: usize, _cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        self.0.layers.get(l).map(|w| w.experts.clone()).ok_or_else(|| Error::Input(format!("experts of layer {l}: the layer does not exist")))
    }
}

/// A block's MXFP4 experts from a source ([`TensorSource::mxfp4_experts`]): `[gate|up, down]`
/// as the file stores them (borrowed: all E), or built per expert (only those asked for).
#[derive(Debug, Clone)]
pub enum Mxfp4Experts<'a> {
    Stored([StoredExperts<'a>; 2]),
    Built(Vec<ExpertWeights>),
}

/// A GPT-OSS source seen through the shared tensor table: what a backend loading any
/// architecture by [`Tensor`] (`optimized::model::GpuModel`) reads GPT-OSS from. Shapes are
/// checked by the source against `cfg` (the [`Config`] a loader passes is not consulted: it has
/// no expert count).
pub struct GptOssTensors<'a> {
    pub src: &'a mut dyn GptOssSource,
    pub cfg: &'a GptOssConfig,
}

impl GptOssTensors<'_> {
    fn dense_of(t: Tensor) -> Result<Dense> {
        Dense::of_tensor(t).ok_or_else(|| Error::Input(format!("{t:?}: GPT-OSS has no such tensor")))
    }
}

impl TensorSource for GptOssTensors<'_> {
    fn load(&mut self, t: Tensor, _cfg: &Config) -> Result<Vec<f32>> {
        self.src.dense(Self::dense_of(t)?, self.cfg)
    }
    fn load_raw(&mut self, t: Tensor, _cfg: &Config) -> Result<Option<RawDense<'_>>> {
        self.src.dense_raw(Self::dense_of(t)?, self.cfg)
    }
    fn mxfp4_experts(&mut self, l: usize, held: Range<usize>) -> Result<Option<Mxfp4Experts<'_>>> {
        if l >= self.cfg.n_layers {
            return Err(Error::Input(format!("experts of layer {l}: the model has {} layers", self.cfg.n_layers)));
        }
        if held.is_empty() || held.end > self.cfg.n_experts {
            return Err(Error::Input(format!("experts {held:?} of layer {l}: the model has {}", self.cfg.n_experts)));
        }
        // Two calls where the source has no stored form: a borrow returned from the first
        // would outlive the branch otherwise.
        if self.src.experts_stored(l, self.cfg)?.is_none() {
            let ex = self.src.experts_in(l, held.clone(), self.cfg)?;
            if ex.len() != held.len() {
                return Err(Error::Input(format!("layer {l}: {} experts built, {held:?} asked for", ex.len())));
            }
            for (e, x) in held.zip(&ex) {
                x.check(self.cfg, &format!("layer {l} expert {e}"))?;
            }
            return Ok(Some(Mxfp4Experts::Built(ex)));
        }
        Ok(self.src.experts_stored(l, self.cfg)?.map(Mxfp4Experts::Stored))
    }
}
