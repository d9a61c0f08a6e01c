//! The one forward pass of every [`ModelSpec`]:
//!
//! ```text
//! x = Emb[ids] (· s_emb)                                             [T, C]
//! for each block l:
//!     h = Norm(x)
//!     q, k, v = h Wqᵀ (+bq), h Wkᵀ (+bk), h Wvᵀ (+bv)                [T, H, D], [T, Hkv, D] ×2
//!     q, k = Norm_head(q), Norm_head(k)                (qk_norm)
//!     q, k = RoPE_R(q), RoPE_R(k)   ; cache ← cache ∪ (k, v)          (first R features, scaled ω)
//!     a = Attention(q, K, V; window_l, sinks, scale, soft-cap) Woᵀ (+bo)
//!     x = x + Norm(a)  (post_norms)   or   x + a
//!     h = Norm(x)
//!     m = MLP_act(h)   or   Σ_k w_k · Expert_{e_k}(h)                  (MoE)
//!     x = x + Norm(m)  (post_norms)   or   x + m
//! logits = cap(Norm(x) · Headᵀ)                                       [T, V]
//! ```
//! Norm is `x̂·w` or Gemma's `x̂·(1 + w)` ([`Norm`]).
//!
//! One rank of a tensor-parallel group ([`crate::parallel`]) runs the same pass on its slices
//! with its local spec, and [`Par`] adds the collectives: the embedding's rows all-reduced, one
//! all-reduce after o and one after down (or the MoE combine), the logits all-gathered.

use std::ops::Range;

use ndarray::{s, Array1, Array2, ArrayView1, ArrayView2, Axis};

use super::spec::{AttnSpec, FfnSpec, LayerSpec, ModelSpec, Norm};
use super::weights::{ArchWeights, Ffn, Layer, Mlp};
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::model::Trace;
use crate::ops::act_quant::{fake_quant, fake_quant_opt, ActQuant};
use crate::ops::attention::{attention_with, Scores};
use crate::ops::embedding::embedding;
use crate::ops::matmul::{linear, linear_opt};
use crate::ops::mlp::{gated, gated_mlp, Activation};
use crate::ops::moe::{route_margin, weighted_sum, Routing};
use crate::ops::residual::residual_add;
use crate::ops::rmsnorm::{rmsnorm, rmsnorm_1p, rmsnorm_heads};
use crate::ops::rope::rope_partial;
use crate::ops::softcap::softcap;
use crate::parallel::{Communicator, ExpertCut};

/// A model of any supported architecture, ready to run.
pub struct ArchModel {
    pub spec: ModelSpec,
    pub weights: ArchWeights,
}

impl ArchModel {
    pub fn new(spec: ModelSpec, weights: ArchWeights) -> Self {
        ArchModel { spec, weights }
    }

    /// An empty KV cache (every layer keeps every position; windows mask, they do not evict).
    pub fn new_cache(&self) -> KvCache {
        new_cache(&self.spec)
    }

    /// [`forward`] of this model.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        forward(&self.spec, &self.weights, ids, cache, trace, None)
    }
}

/// An empty KV cache for `spec`.
pub fn new_cache(spec: &ModelSpec) -> KvCache {
    let (hkv, d) = spec.layers.first().map_or((1, 1), |l| (l.attn.n_kv_heads, l.attn.head_dim));
    KvCache::new(spec.n_layers(), hkv, d)
}

/// One gated MLP's matrices, borrowed.
#[derive(Clone, Copy)]
pub struct MlpRef<'a> {
    pub gate: ArrayView2<'a, f32>,
    pub up: ArrayView2<'a, f32>,
    pub down: ArrayView2<'a, f32>,
}

/// A layer's FFN weights, borrowed.
pub enum FfnRef<'a> {
    Dense(MlpRef<'a>),
    /// Router `[E, C]` (+ bias `[E]`) and the E experts.
    Moe {
        router: ArrayView2<'a, f32>,
        router_bias: Option<ArrayView1<'a, f32>>,
        experts: &'a dyn Experts,
    },
}

/// A layer's E experts, however they are stored (f32, or MXFP4 dequantized when used).
pub trait Experts: Sync {
    /// E
    fn count(&self) -> usize;
    /// Expert `e` on the rows of `h [T, C]` → `[T, C]`, its linears reading their inputs
    /// through `q` where given (`ops::act_quant`; only 16-bit-value experts take one).
    fn run(&self, e: usize, h: ArrayView2<f32>, act: Activation, q: Option<ActQuant>) -> Result<Array2<f32>>;
    /// What one tensor-parallel rank keeps of these experts ([`ExpertCut`]).
    fn cut(&self, cut: &ExpertCut) -> Result<Box<dyn Experts + Send>>;
}

impl Experts for Vec<Mlp> {
    fn count(&self) -> usize {
        self.len()
    }
    fn run(&self, e: usize, h: ArrayView2<f32>, act: Activation, q: Option<ActQuant>) -> Result<Array2<f32>> {
        let m = self.get(e).ok_or_else(|| Error::Input(format!("expert {e} of {}", self.len())))?;
        mlp(h, m.view(), act, q)
    }
    fn cut(&self, cut: &ExpertCut) -> Result<Box<dyn Experts + Send>> {
        let cut: Vec<Mlp> = match cut {
            ExpertCut::Whole(r) => self.get(r.clone()).ok_or_else(|| Error::Input(format!("experts {r:?} of {}", self.len())))?.to_vec(),
            ExpertCut::Rows { rows, .. } => self
                .iter()
                .map(|m| Mlp {
                    gate: m.gate.slice(s![rows.clone(), ..]).to_owned(),
                    up: m.up.slice(s![rows.clone(), ..]).to_owned(),
                    down: m.down.slice(s![.., rows.clone()]).to_owned(),
                })
                .collect(),
        };
        Ok(Box::new(cut))
    }
}

/// One block's weights, borrowed (see [`Layer`] for shapes).
pub struct LayerRef<'a> {
    pub attn_norm: ArrayView1<'a, f32>,
    pub wq: ArrayView2<'a, f32>,
    pub wk: ArrayView2<'a, f32>,
    pub wv: ArrayView2<'a, f32>,
    pub wo: ArrayView2<'a, f32>,
    pub bq: Option<ArrayView1<'a, f32>>,
    pub bk: Option<ArrayView1<'a, f32>>,
    pub bv: Option<ArrayView1<'a, f32>>,
    pub bo: Option<ArrayView1<'a, f32>>,
    pub q_norm: Option<ArrayView1<'a, f32>>,
    pub k_norm: Option<ArrayView1<'a, f32>>,
    pub sinks: Option<&'a [f32]>,
    pub post_attn_norm: Option<ArrayView1<'a, f32>>,
    pub ffn_norm: ArrayView1<'a, f32>,
    pub ffn: FfnRef<'a>,
    pub post_ffn_norm: Option<ArrayView1<'a, f32>>,
}

/// Weights the forward pass can borrow: [`ArchWeights`], or the llama [`crate::weights::Weights`].
pub trait WeightsRef {
    /// `[V, C]`
    fn tok_embd(&self) -> ArrayView2<'_, f32>;
    /// `[C]`
    fn out_norm(&self) -> ArrayView1<'_, f32>;
    /// `[V, C]`
    fn head(&self) -> ArrayView2<'_, f32>;
    fn n_layers(&self) -> usize;
    /// Block `l` (`l < n_layers`).
    fn layer(&self, l: usize) -> Result<LayerRef<'_>>;
}

pub(crate) fn opt(a: &Option<Array1<f32>>) -> Option<ArrayView1<'_, f32>> {
    a.as_ref().map(|a| a.view())
}

impl Mlp {
    pub fn view(&self) -> MlpRef<'_> {
        MlpRef { gate: self.gate.view(), up: self.up.view(), down: self.down.view() }
    }
}

impl WeightsRef for ArchWeights {
    fn tok_embd(&self) -> ArrayView2<'_, f32> {
        self.tok_embd.view()
    }
    fn out_norm(&self) -> ArrayView1<'_, f32> {
        self.out_norm.view()
    }
    fn head(&self) -> ArrayView2<'_, f32> {
        ArchWeights::head(self).view()
    }
    fn n_layers(&self) -> usize {
        self.layers.len()
    }
    fn layer(&self, l: usize) -> Result<LayerRef<'_>> {
        let w: &Layer = self.layers.get(l).ok_or_else(|| Error::Input(format!("layer {l} does not exist")))?;
        Ok(LayerRef {
            attn_norm: w.attn_norm.view(),
            wq: w.wq.view(),
            wk: w.wk.view(),
            wv: w.wv.view(),
            wo: w.wo.view(),
            bq: opt(&w.bq),
            bk: opt(&w.bk),
            bv: opt(&w.bv),
            bo: opt(&w.bo),
            q_norm: opt(&w.q_norm),
            k_norm: opt(&w.k_norm),
            sinks: w.sinks.as_deref(),
            post_attn_norm: opt(&w.post_attn_norm),
            ffn_norm: w.ffn_norm.view(),
            ffn: match &w.ffn {
                Ffn::Dense(m) => FfnRef::Dense(m.view()),
                Ffn::Moe { router, experts } => FfnRef::Moe { router: router.view(), router_bias: None, experts },
            },
            post_ffn_norm: opt(&w.post_ffn_norm),
        })
    }
}

/// Run `ids` (positions `cache.len() ..`) through the model `spec` with weights `w`, appending
/// to `cache`. Returns logits `[T, V]` for every input position. `margins` (`[T]`, filled with
/// ∞ by the caller), if given, is lowered per token to its smallest [`route_margin`] over the
/// MoE layers: how close its routing came to a tie (not part of the forward pass).
pub fn forward(
    spec: &ModelSpec,
    w: &dyn WeightsRef,
    ids: &[u32],
    cache: &mut KvCache,
    trace: Option<&mut Trace>,
    margins: Option<&mut [f32]>,
) -> Result<Array2<f32>> {
    forward_with(spec, w, ids, cache, trace, margins, None)
}

/// One rank of a tensor-parallel group: its communicator and what it owns beyond its local
/// spec's heads and widths.
pub struct Par<'a> {
    pub comm: &'a dyn Communicator,
    /// Token rows of the embedding and head this rank holds.
    pub vocab: Range<usize>,
    /// ⌈V/N⌉: each rank's part of the all-gathered logits (the last ones padded).
    pub vocab_part: usize,
    /// The experts this rank holds whole (expert parallelism); `None`: every expert (sliced
    /// or not).
    pub experts: Option<Range<usize>>,
}

impl Par<'_> {
    /// `y ← Σ_ranks y`.
    fn reduce(&self, y: &mut Array2<f32>) -> Result<()> {
        let buf = y.as_slice_mut().ok_or_else(|| Error::Input("all-reduce of a non-contiguous array".into()))?;
        self.comm.all_reduce_sum(buf)
    }

    /// The rows of `ids` this rank holds (zero rows for the others' tokens), summed over the
    /// ranks: every row comes from exactly one rank.
    fn embed(&self, table: ArrayView2<f32>, ids: &[u32], vocab: usize) -> Result<Array2<f32>> {
        let mut x = Array2::zeros((ids.len(), table.ncols()));
        for (t, &id) in ids.iter().enumerate() {
            let id = id as usize;
            if id >= vocab {
                return Err(Error::Input(format!("token id {id} at position {t} is outside the vocabulary (V = {vocab})")));
            }
            if self.vocab.contains(&id) {
                x.row_mut(t).assign(&table.row(id - self.vocab.start));
            }
        }
        self.reduce(&mut x)?;
        Ok(x)
    }

    /// The whole `[T, V]` from every rank's `[T, |vocab|]` logits.
    fn gather_logits(&self, part: Array2<f32>, vocab: usize) -> Result<Array2<f32>> {
        let (t, p) = (part.nrows(), self.vocab_part);
        let mut padded = Array2::zeros((t, p));
        padded.slice_mut(s![.., ..part.ncols()]).assign(&part);
        let all = self.comm.all_gather(padded.as_slice().ok_or_else(|| Error::Input("logits are not contiguous".into()))?)?;
        let n = self.comm.world();
        let all = Array2::from_shape_vec((n * t, p), all).map_err(|e| Error::Input(format!("gathered logits: {e}")))?;
        let mut out = Array2::zeros((t, n * p));
        for r in 0..n {
            out.slice_mut(s![.., r * p..(r + 1) * p]).assign(&all.slice(s![r * t..(r + 1) * t, ..]));
        }
        Ok(out.slice(s![.., ..vocab]).to_owned())
    }
}

/// [`forward`], as one rank of a tensor-parallel group when `par` is given (`spec` is then the
/// rank's local spec, `w` its slices).
pub fn forward_with(
    spec: &ModelSpec,
    w: &dyn WeightsRef,
    ids: &[u32],
    cache: &mut KvCache,
    mut trace: Option<&mut Trace>,
    mut margins: Option<&mut [f32]>,
    par: Option<&Par>,
) -> Result<Array2<f32>> {
    let pos0 = cache.len();
    if ids.is_empty() {
        return Err(Error::Input("no tokens to run".into()));
    }
    if pos0 + ids.len() > spec.max_ctx {
        return Err(Error::Input(format!("{} tokens at position {pos0} exceed the context length {}", ids.len(), spec.max_ctx)));
    }
    if w.n_layers() != spec.n_layers() {
        return Err(Error::Input(format!("{} layers of weights for {} layers", w.n_layers(), spec.n_layers())));
    }
    let mut x = match par {
        Some(p) => p.embed(w.tok_embd(), ids, spec.vocab)?,
        None => embedding(w.tok_embd(), ids)?,
    };
    if let Some(scale) = spec.embed_scale {
        x *= scale;
    }
    for (l, ls) in spec.layers.iter().enumerate() {
        let lw = w.layer(l)?;
        let mut a = attention_block(spec, l, ls, &lw, x.view(), pos0, cache)?;
        if let Some(p) = par {
            p.reduce(&mut a)?;
        }
        add_residual(spec, &mut x, a, lw.post_attn_norm);
        let mut m = ffn_block(spec, ls, &lw, x.view(), margins.as_deref_mut(), par.and_then(|p| p.experts.clone()))?;
        if let Some(p) = par {
            p.reduce(&mut m)?;
        }
        add_residual(spec, &mut x, m, lw.post_ffn_norm);
        if let Some(tr) = trace.as_deref_mut() {
            tr.hidden.push(x.clone());
        }
    }
    let h = norm(spec, x.view(), w.out_norm());
    let mut logits = linear(h.view(), w.head())?;
    if let Some(c) = spec.final_softcap {
        logits.mapv_inplace(|z| softcap(z, c));
    }
    match par {
        Some(p) => p.gather_logits(logits, spec.vocab),
        None => Ok(logits),
    }
}

/// RMSNorm of the model's kind over rows of `x [T, C]`.
fn norm(spec: &ModelSpec, x: ArrayView2<f32>, w: ArrayView1<f32>) -> Array2<f32> {
    match spec.norm {
        Norm::Rms => rmsnorm(x, w, spec.rms_eps),
        Norm::Rms1p => rmsnorm_1p(x, w, spec.rms_eps),
    }
}

/// `x ← x + Norm(y)` with a post-norm, else `x ← x + y`.
fn add_residual(spec: &ModelSpec, x: &mut Array2<f32>, y: Array2<f32>, post: Option<ArrayView1<f32>>) {
    let y = match post {
        Some(g) => norm(spec, y.view(), g),
        None => y,
    };
    residual_add(x.view_mut(), y.view());
}

/// `Attention(Norm(x)) Woᵀ (+ bo)` for block `l`; appends this step's k, v to the cache.
fn attention_block(
    spec: &ModelSpec,
    l: usize,
    ls: &LayerSpec,
    w: &LayerRef,
    x: ArrayView2<f32>,
    pos0: usize,
    cache: &mut KvCache,
) -> Result<Array2<f32>> {
    let a: &AttnSpec = &ls.attn;
    let (t, d) = (x.nrows(), a.head_dim);
    // The linears read their inputs quantized where the checkpoint asks (W8A8 FP8).
    let h = fake_quant_opt(norm(spec, x, w.attn_norm).view(), spec.act_quant);
    let heads = |y: Array2<f32>, n: usize| y.into_shape_with_order((t, n, d)).map_err(|e| Error::Input(format!("block {l}: {e}")));
    let mut q = heads(linear_opt(h.view(), w.wq, w.bq)?, a.n_heads)?;
    let mut k = heads(linear_opt(h.view(), w.wk, w.bk)?, a.n_kv_heads)?;
    let v = heads(linear_opt(h.view(), w.wv, w.bv)?, a.n_kv_heads)?;
    let offset = if spec.norm == Norm::Rms1p { 1.0 } else { 0.0 };
    if let (Some(qn), Some(kn)) = (w.q_norm, w.k_norm) {
        rmsnorm_heads(q.view_mut(), qn, spec.rms_eps, offset);
        rmsnorm_heads(k.view_mut(), kn, spec.rms_eps, offset);
    }
    let (omega, m) = (a.rope.inv_freq(), a.rope.scaling.attention_factor());
    rope_partial(q.view_mut(), pos0, &omega, m, a.rope.layout);
    rope_partial(k.view_mut(), pos0, &omega, m, a.rope.layout);
    cache.append(l, k.view(), v.view())?;
    let scores = Scores { window: a.window, sinks: w.sinks, scale: a.scale, softcap: a.softcap };
    let o = attention_with(q.view(), cache.keys(l), cache.values(l), pos0, &scores);
    let o = o.into_shape_with_order((t, a.n_heads * d)).map_err(|e| Error::Input(format!("block {l}: {e}")))?;
    linear_opt(fake_quant_opt(o.view(), spec.act_quant).view(), w.wo, w.bo)
}

/// The FFN of block `l` on `Norm(x)`: a gated MLP, or the MoE (of the experts `owned` where
/// given: an expert-parallel rank's, the others' terms left to the other ranks).
fn ffn_block(
    spec: &ModelSpec,
    ls: &LayerSpec,
    w: &LayerRef,
    x: ArrayView2<f32>,
    margins: Option<&mut [f32]>,
    owned: Option<Range<usize>>,
) -> Result<Array2<f32>> {
    let h = norm(spec, x, w.ffn_norm);
    match (&ls.ffn, &w.ffn) {
        (FfnSpec::Dense { act, .. }, FfnRef::Dense(m)) => mlp(h.view(), *m, *act, spec.act_quant),
        (FfnSpec::Moe { k, act, routing, .. }, FfnRef::Moe { router, router_bias, experts }) => {
            let z = linear_opt(h.view(), *router, *router_bias)?;
            if let Some(m) = margins {
                for (m, row) in m.iter_mut().zip(z.rows()) {
                    *m = m.min(route_margin(&row.to_vec(), *k));
                }
            }
            let owned = owned.unwrap_or(0..experts.count());
            moe(h.view(), z.view(), *experts, owned, *k, *routing, *act, spec.act_quant)
        }
        _ => Err(Error::Input("layer weights do not match the layer's FFN kind".into())),
    }
}

/// `down(act(h·gateᵀ) ⊙ h·upᵀ)`, each of the three reading its input through `q` (a W8A8
/// checkpoint's activation quantization, `ops::act_quant`) where given.
fn mlp(h: ArrayView2<f32>, m: MlpRef, act: Activation, q: Option<ActQuant>) -> Result<Array2<f32>> {
    let Some(q) = q else { return gated_mlp(h, m.gate, m.up, m.down, act) };
    let h = fake_quant(h, q);
    let a = gated(linear(h.view(), m.gate)?.view(), linear(h.view(), m.up)?.view(), act);
    linear(fake_quant(a.view(), q).view(), m.down)
}

/// `MoE(h)` from router logits `z [T, E]`: route every token, run each chosen expert on the
/// tokens that chose it, then `Σ_k w_k · y_{e_k}` per token in rank order. Only the experts
/// `owned` (global ids; `experts` holds them from index 0) run and add their terms.
#[allow(clippy::too_many_arguments)]
fn moe(
    h: ArrayView2<f32>,
    z: ArrayView2<f32>,
    experts: &dyn Experts,
    owned: Range<usize>,
    k: usize,
    routing: Routing,
    act: Activation,
    q: Option<ActQuant>,
) -> Result<Array2<f32>> {
    let routes: Vec<Vec<(usize, f32)>> = z.rows().into_iter().map(|row| routing.route(&row.to_vec(), k)).collect();
    let c = h.ncols();
    // y[t][k] = Expert_{e_k}(h_t), filled expert by expert.
    let mut y: Vec<Vec<Option<Array1<f32>>>> = routes.iter().map(|r| vec![None; r.len()]).collect();
    for e in owned.clone() {
        let users: Vec<(usize, usize)> =
            routes.iter().enumerate().flat_map(|(t, r)| r.iter().position(|&(ek, _)| ek == e).map(|kk| (t, kk))).collect();
        if users.is_empty() {
            continue;
        }
        let rows: Vec<usize> = users.iter().map(|&(t, _)| t).collect();
        let out = experts.run(e - owned.start, h.select(Axis(0), &rows).view(), act, q)?;
        for (&(t, kk), row) in users.iter().zip(out.rows()) {
            y[t][kk] = Some(row.to_owned());
        }
    }
    let mut out = Array2::zeros((h.nrows(), c));
    for (t, (r, ys)) in routes.iter().zip(&y).enumerate() {
        let terms = r
            .iter()
            .zip(ys)
            .filter(|(&(e, _), _)| owned.contains(&e))
            .map(|(&(e, wk), yk)| {
                yk.as_ref().map(|v| (wk, v.view())).ok_or_else(|| Error::Input(format!("token {t}: expert {e} was routed to but not run")))
            })
            .collect::<Result<Vec<_>>>()?;
        out.row_mut(t).assign(&weighted_sum(&terms, c));
    }
    Ok(out)
}
