//! [`ShardWeights`]: the slices of a model's weights one rank owns ([`RankShard`]), cut from
//! any [`WeightsRef`] (every architecture's weights, GPT-OSS's MXFP4 experts included), and
//! lent to the one forward pass as weights of the rank's local spec.

use std::ops::Range;

use ndarray::{s, Array1, Array2, ArrayView1, ArrayView2};

use super::plan::RankShard;
use crate::arch::model::{opt, Experts, FfnRef, LayerRef, MlpRef, WeightsRef};
use crate::arch::weights::Mlp;
use crate::error::{Error, Result};

/// A layer's FFN, sliced.
enum ShardFfn {
    Dense(Mlp),
    Moe { router: Array2<f32>, router_bias: Option<Array1<f32>>, experts: Box<dyn Experts + Send> },
}

/// One block, sliced: q / k / v rows and o columns of the rank's heads; norms whole.
struct ShardLayer {
    attn_norm: Array1<f32>,
    wq: Array2<f32>,
    wk: Array2<f32>,
    wv: Array2<f32>,
    wo: Array2<f32>,
    bq: Option<Array1<f32>>,
    bk: Option<Array1<f32>>,
    bv: Option<Array1<f32>>,
    bo: Option<Array1<f32>>,
    q_norm: Option<Array1<f32>>,
    k_norm: Option<Array1<f32>>,
    sinks: Option<Vec<f32>>,
    post_attn_norm: Option<Array1<f32>>,
    ffn_norm: Array1<f32>,
    ffn: ShardFfn,
    post_ffn_norm: Option<Array1<f32>>,
}

/// One rank's weights.
pub struct ShardWeights {
    /// Token rows `vocab` of the embedding `[|vocab|, C]`.
    tok_embd: Array2<f32>,
    /// The same rows of the head; `None` when tied.
    lm_head: Option<Array2<f32>>,
    out_norm: Array1<f32>,
    layers: Vec<ShardLayer>,
}

fn rows(a: ArrayView2<f32>, r: Range<usize>) -> Array2<f32> {
    a.slice(s![r, ..]).to_owned()
}

fn cols(a: ArrayView2<f32>, r: Range<usize>) -> Array2<f32> {
    a.slice(s![.., r]).to_owned()
}

fn part(v: Option<ArrayView1<f32>>, r: Range<usize>) -> Option<Array1<f32>> {
    v.map(|v| v.slice(s![r]).to_owned())
}

fn whole(v: Option<ArrayView1<f32>>) -> Option<Array1<f32>> {
    v.map(|v| v.to_owned())
}

/// Features `h·D ..` of heads `h`.
fn features(h: &Range<usize>, d: usize) -> Range<usize> {
    h.start * d..h.end * d
}

impl ShardWeights {
    /// Rank `rs.rank`'s slices of `w`, whose heads are `head_dim` wide. Errors name the tensor
    /// whose shape does not hold the slice.
    pub fn new(w: &dyn WeightsRef, rs: &RankShard, head_dim: usize) -> Result<Self> {
        let check = |what: &str, have: usize, want: &Range<usize>| {
            if want.end > have {
                return Err(Error::Input(format!("rank {}: {what} has {have} rows or columns, the slice needs {want:?}", rs.rank)));
            }
            Ok(())
        };
        check("token_embd", w.tok_embd().nrows(), &rs.vocab)?;
        let tied = std::ptr::eq(w.head().as_ptr(), w.tok_embd().as_ptr());
        let tok_embd = rows(w.tok_embd(), rs.vocab.clone());
        let lm_head = if tied {
            None
        } else {
            check("lm_head", w.head().nrows(), &rs.vocab)?;
            Some(rows(w.head(), rs.vocab.clone()))
        };
        let (q, kv) = (features(&rs.q_heads, head_dim), features(&rs.kv_heads, head_dim));
        let layers = (0..w.n_layers())
            .map(|l| {
                let lw = w.layer(l)?;
                check(&format!("layer {l} wq"), lw.wq.nrows(), &q)?;
                check(&format!("layer {l} wk"), lw.wk.nrows(), &kv)?;
                check(&format!("layer {l} wo"), lw.wo.ncols(), &q)?;
                let ffn = match &lw.ffn {
                    FfnRef::Dense(m) => {
                        check(&format!("layer {l} ffn"), m.gate.nrows(), &rs.ffn)?;
                        ShardFfn::Dense(cut_mlp(m, rs.ffn.clone()))
                    }
                    FfnRef::Moe { router, router_bias, experts } => {
                        let cut = rs.experts.as_ref().ok_or_else(|| Error::Input(format!("layer {l}: a MoE layer in a dense model's plan")))?;
                        ShardFfn::Moe { router: router.to_owned(), router_bias: whole(*router_bias), experts: experts.cut(cut)? }
                    }
                };
                Ok(ShardLayer {
                    attn_norm: lw.attn_norm.to_owned(),
                    wq: rows(lw.wq, q.clone()),
                    wk: rows(lw.wk, kv.clone()),
                    wv: rows(lw.wv, kv.clone()),
                    wo: cols(lw.wo, q.clone()),
                    bq: part(lw.bq, q.clone()),
                    bk: part(lw.bk, kv.clone()),
                    bv: part(lw.bv, kv.clone()),
                    // Added once, by rank 0, to the sum of the ranks' partial outputs.
                    bo: whole(lw.bo).filter(|_| rs.rank == 0),
                    q_norm: whole(lw.q_norm),
                    k_norm: whole(lw.k_norm),
                    sinks: lw.sinks.and_then(|s| s.get(rs.q_heads.clone())).map(|s| s.to_vec()),
                    post_attn_norm: whole(lw.post_attn_norm),
                    ffn_norm: lw.ffn_norm.to_owned(),
                    ffn,
                    post_ffn_norm: whole(lw.post_ffn_norm),
                })
            })
            .collect::<Result<_>>()?;
        Ok(ShardWeights { tok_embd, lm_head, out_norm: w.out_norm().to_owned(), layers })
    }
}

/// Gate / up rows `r`, down columns `r`.
fn cut_mlp(m: &MlpRef, r: Range<usize>) -> Mlp {
    Mlp { gate: rows(m.gate, r.clone()), up: rows(m.up, r.clone()), down: cols(m.down, r) }
}

impl WeightsRef for ShardWeights {
    fn tok_embd(&self) -> ArrayView2<'_, f32> {
        self.tok_embd.view()
    }
    fn out_norm(&self) -> ArrayView1<'_, f32> {
        self.out_norm.view()
    }
    fn head(&self) -> ArrayView2<'_, f32> {
        self.lm_head.as_ref().unwrap_or(&self.tok_embd).view()
    }
    fn n_layers(&self) -> usize {
        self.layers.len()
    }
    fn layer(&self, l: usize) -> Result<LayerRef<'_>> {
        let w = self.layers.get(l).ok_or_else(|| Error::Input(format!("layer {l} does not exist")))?;
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
                ShardFfn::Dense(m) => FfnRef::Dense(m.view()),
                ShardFfn::Moe { router, router_bias, experts } => {
                    FfnRef::Moe { router: router.view(), router_bias: opt(router_bias), experts: experts.as_ref() }
                }
            },
            post_ffn_norm: opt(&w.post_ffn_norm),
        })
    }
}
