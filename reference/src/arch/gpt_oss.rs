//! GPT-OSS (gpt-oss-20b / -120b) on the shared layer: q/k/v/o biases, one sink logit per head,
//! YaRN RoPE (not truncated), sliding and full layers by `layer_types`, and on every layer a
//! MoE of E experts (router with bias, top-k-then-softmax, clamped SwiGLU with biases, MXFP4
//! weights dequantized when used). Its config is read by [`crate::gpt_oss::config`] (HF
//! `gpt_oss`, GGUF `gpt-oss`); this file turns it into a [`ModelSpec`] and lends the weights
//! to the one forward pass.

use ndarray::{s, Array1, Array2, ArrayView2};

use crate::config::RopeLayout;
use crate::error::{Error, Result};
use crate::gpt_oss::config::GptOssConfig;
use crate::gpt_oss::weights::{DenseExpert, ExpertWeights, GptOssWeights};
use crate::ops::act_quant::ActQuant;
use crate::ops::matmul::linear_bias;
use crate::ops::mlp::{gated, Activation};
use crate::ops::moe::Routing;
use crate::ops::rope::{yarn_attention_factor, RopeScaling};
use crate::parallel::ExpertCut;

use super::model::{Experts, FfnRef, LayerRef, WeightsRef};
use super::spec::{AttnSpec, FfnSpec, Fused, LayerSpec, ModelSpec, Norm, RopeSpec};

/// The spec of a GPT-OSS config.
pub fn from_config(c: &GptOssConfig) -> ModelSpec {
    let scaling = match &c.yarn {
        None => RopeScaling::None,
        Some(y) => RopeScaling::Yarn {
            factor: y.factor,
            beta_fast: y.beta_fast,
            beta_slow: y.beta_slow,
            original_max_pos: y.original_max_pos as f64,
            truncate: y.truncate,
            attention_factor: yarn_attention_factor(y.factor, None, None),
        },
    };
    let rope = RopeSpec { theta: c.rope_theta, rot: c.head_dim, scaling, layout: RopeLayout::HalfSplit, freq_factors: None };
    let ffn = FfnSpec::Moe {
        n_experts: c.n_experts,
        k: c.n_experts_used,
        expert_ffn: c.expert_ffn,
        act: Activation::ClampedSwiglu { limit: c.swiglu_limit, alpha: c.swiglu_alpha },
        routing: Routing::TopKSoftmax,
    };
    let layers = (0..c.n_layers)
        .map(|l| LayerSpec {
            attn: AttnSpec {
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                window: c.layer_window(l),
                rope: rope.clone(),
                scale: 1.0 / (c.head_dim as f32).sqrt(),
                softcap: None,
                qkv_bias: true,
                o_bias: true,
                qk_norm: false,
                sinks: true,
            },
            ffn: ffn.clone(),
            post_norms: false,
        })
        .collect();
    ModelSpec {
        arch: "gpt_oss".into(),
        vocab: c.vocab,
        hidden: c.hidden,
        rms_eps: c.rms_eps,
        norm: Norm::Rms,
        embed_scale: None,
        tied: c.tied_embeddings,
        final_softcap: None,
        max_ctx: c.max_ctx,
        bos_id: c.bos_id,
        eos_ids: c.eos_ids.clone(),
        fused: Fused::default(),
        act_quant: None,
        layers,
    }
}

/// `act(h Wgᵀ + bg, h Wuᵀ + bu) Wdᵀ + bd` of one dense expert.
fn run_dense(x: &DenseExpert, h: ArrayView2<f32>, act: Activation) -> Result<Array2<f32>> {
    let g = linear_bias(h, x.gate.view(), x.gate_bias.view())?;
    let u = linear_bias(h, x.up.view(), x.up_bias.view())?;
    linear_bias(gated(g.view(), u.view(), act).view(), x.down.view(), x.down_bias.view())
}

fn get<T>(v: &[T], e: usize) -> Result<&T> {
    v.get(e).ok_or_else(|| Error::Input(format!("expert {e} of {}", v.len())))
}

/// GPT-OSS's experts (MXFP4, or their dequantized values) read unquantized inputs.
fn no_act_quant(q: Option<ActQuant>) -> Result<()> {
    match q {
        Some(q) => Err(Error::Input(format!("GPT-OSS experts with activations quantized {}: not a scheme GPT-OSS checkpoints use", q.describe()))),
        None => Ok(()),
    }
}

/// MXFP4 experts: dequantized when used, then [`run_dense`]. A tensor-parallel rank keeps its
/// experts MXFP4 (expert parallelism) or its rows of every expert dequantized (an MXFP4 block
/// of 32 runs along a row, so down's columns would cut blocks).
impl Experts for Vec<ExpertWeights> {
    fn count(&self) -> usize {
        self.len()
    }
    fn run(&self, e: usize, h: ArrayView2<f32>, act: Activation, q: Option<ActQuant>) -> Result<Array2<f32>> {
        no_act_quant(q)?;
        run_dense(&get(self, e)?.dequant()?, h, act)
    }
    fn cut(&self, cut: &ExpertCut) -> Result<Box<dyn Experts + Send>> {
        match cut {
            ExpertCut::Whole(r) => {
                Ok(Box::new(self.get(r.clone()).ok_or_else(|| Error::Input(format!("experts {r:?} of {}", self.len())))?.to_vec()))
            }
            ExpertCut::Rows { .. } => self.iter().map(|x| x.dequant()).collect::<Result<Vec<_>>>()?.cut(cut),
        }
    }
}

/// Dense experts with biases (GPT-OSS's dequantized, as a tensor-parallel rank keeps them).
impl Experts for Vec<DenseExpert> {
    fn count(&self) -> usize {
        self.len()
    }
    fn run(&self, e: usize, h: ArrayView2<f32>, act: Activation, q: Option<ActQuant>) -> Result<Array2<f32>> {
        no_act_quant(q)?;
        run_dense(get(self, e)?, h, act)
    }
    fn cut(&self, cut: &ExpertCut) -> Result<Box<dyn Experts + Send>> {
        let cut: Vec<DenseExpert> = match cut {
            ExpertCut::Whole(r) => self.get(r.clone()).ok_or_else(|| Error::Input(format!("experts {r:?} of {}", self.len())))?.to_vec(),
            ExpertCut::Rows { rows, bias } => self
                .iter()
                .map(|x| DenseExpert {
                    gate: x.gate.slice(s![rows.clone(), ..]).to_owned(),
                    gate_bias: x.gate_bias.slice(s![rows.clone()]).to_owned(),
                    up: x.up.slice(s![rows.clone(), ..]).to_owned(),
                    up_bias: x.up_bias.slice(s![rows.clone()]).to_owned(),
                    down: x.down.slice(s![.., rows.clone()]).to_owned(),
                    // Added once, by the rank that keeps it.
                    down_bias: if *bias { x.down_bias.clone() } else { Array1::zeros(x.down_bias.len()) },
                })
                .collect(),
        };
        Ok(Box::new(cut))
    }
}

impl WeightsRef for GptOssWeights {
    fn tok_embd(&self) -> ArrayView2<'_, f32> {
        self.tok_embd.view()
    }
    fn out_norm(&self) -> ndarray::ArrayView1<'_, f32> {
        self.out_norm.view()
    }
    fn head(&self) -> ArrayView2<'_, f32> {
        GptOssWeights::head(self).view()
    }
    fn n_layers(&self) -> usize {
        self.layers.len()
    }
    fn layer(&self, l: usize) -> Result<LayerRef<'_>> {
        let w = self.layers.get(l).ok_or_else(|| Error::Input(format!("layer {l} does not exist")))?;
        let sinks = w.sinks.as_slice().ok_or_else(|| Error::Input(format!("block {l}: sinks are not contiguous")))?;
        Ok(LayerRef {
            attn_norm: w.attn_norm.view(),
            wq: w.wq.view(),
            wk: w.wk.view(),
            wv: w.wv.view(),
            wo: w.wo.view(),
            bq: Some(w.bq.view()),
            bk: Some(w.bk.view()),
            bv: Some(w.bv.view()),
            bo: Some(w.bo.view()),
            q_norm: None,
            k_norm: None,
            sinks: Some(sinks),
            post_attn_norm: None,
            ffn_norm: w.ffn_norm.view(),
            ffn: FfnRef::Moe { router: w.router.view(), router_bias: Some(w.router_bias.view()), experts: &w.experts },
            post_ffn_norm: None,
        })
    }
}
