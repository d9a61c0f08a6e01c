//! What of a [`ModelSpec`] the GPU model runs: the one place that refuses, by name, the
//! features whose kernels are not wired in yet ([`gpu_unsupported`]), what the load folds into
//! the weights instead of running a kernel ([`fold_of`]), and the RoPE tables of the layers
//! ([`RopeTables`]: one per distinct table).

use reference::arch::spec::{FfnSpec, ModelSpec, Norm, RopeSpec};
use reference::ops::mlp::Activation;
use reference::ops::moe::Routing;
use reference::weights::Tensor;

use crate::kernels::rope::RopeTable;
use crate::kernels::GluAct;
use crate::{Client, Error};

/// Why the GPU model cannot run `spec` yet (`None`: it can): every feature it lacks, each
/// with the first layer that has it. Checked at load, before any upload. Each feature is
/// one check here and, once its kernel is wired in, one site in `GpuModel::blocks`.
pub fn gpu_unsupported(spec: &ModelSpec) -> Option<String> {
    // (feature, the first layer that has it); model-wide features have no layer.
    let mut missing: Vec<(String, Option<usize>)> = Vec::new();
    let mut add = |what: String, l: Option<usize>| {
        if !missing.iter().any(|(m, _)| *m == what) {
            missing.push((what, l));
        }
    };
    for (l, ls) in spec.layers.iter().enumerate() {
        let a = &ls.attn;
        let checks = [
            // The fold scales q's rows only; a fused q|k|v is uploaded as one tensor.
            (spec.fused.qkv && fold_of(spec, Tensor::Wq(l)).is_some(), "a query scale other than 1/√D with a fused q|k|v".into()),
            (a.softcap.is_some(), "the attention logit soft-cap".into()),
            (
                matches!(ls.ffn, FfnSpec::Moe { k, .. } if k > crate::kernels::moe::MAX_K),
                format!("more than {} experts a token", crate::kernels::moe::MAX_K),
            ),
            // The MoE adds into the residual stream itself: no norm after it.
            (matches!(ls.ffn, FfnSpec::Moe { .. }) && ls.post_norms, "a post-FFN norm after a mixture of experts".into()),
        ];
        for (on, what) in checks {
            if on {
                add(what, Some(l));
            }
        }
        match ls.ffn {
            FfnSpec::Dense { act, .. } if GluAct::of(act).is_err() => add(format!("the {act:?} activation"), Some(l)),
            FfnSpec::Moe { act, routing, .. } if !moe_runs(act, routing) => {
                add(format!("a mixture of experts gated by {act:?} with {routing:?} routing"), Some(l))
            }
            _ => {}
        }
    }
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|(m, l)| l.map_or_else(|| m.clone(), |l| format!("{m} (layer {l})"))).collect();
        return Some(format!("{}: not on the GPU yet: {}", spec.arch, list.join(", ")));
    }
    // Layers of different widths (one Config shape for every layer's tensors).
    spec.dims().err().map(|e| e.to_string())
}

/// Whether the MoE kernels (`kernels::moe`) run experts gated by `act` under `routing`:
/// GPT-OSS's clamped SwiGLU with its top-k-then-softmax (over MXFP4 experts, with router and
/// expert biases), and SiLU or GELU-tanh gating under any routing (over 16-bit experts:
/// Qwen3-MoE's softmax-then-top-k, renormalised or not). Which experts a source holds is the
/// load's check (`Uploader::moe`).
fn moe_runs(act: Activation, routing: Routing) -> bool {
    match act {
        Activation::ClampedSwiglu { .. } => routing == Routing::TopKSoftmax,
        act => GluAct::of(act).is_ok(),
    }
}

/// `v ← add + mul · v`, applied to a tensor's values as it uploads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fold {
    pub mul: f32,
    pub add: f32,
}

/// What the load folds into tensor `t` of `spec`: Gemma's `(1 + w)` norm gains (HF
/// [`Norm::Rms1p`]) uploaded as `w + 1`; a query scale s other than 1/√D (the attention
/// kernels scale by 1/√D) as a factor s·√D on what makes q — Wq's rows and bq, or the q-norm
/// gains where the layer normalizes q (the norm comes after the projection). `None`: uploaded
/// as stored.
pub(crate) fn fold_of(spec: &ModelSpec, t: Tensor) -> Option<Fold> {
    use Tensor::*;
    let mut f = Fold { mul: 1.0, add: 0.0 };
    if spec.norm == Norm::Rms1p
        && matches!(t, OutNorm | AttnNorm(_) | FfnNorm(_) | PreFfnNorm(_) | PostAttnNorm(_) | PostFfnNorm(_) | QNorm(_) | KNorm(_))
    {
        f.add = 1.0;
    }
    let a = t.layer_index().and_then(|l| spec.layers.get(l)).map(|ls| &ls.attn);
    if let Some(a) = a {
        let scales_q = match t {
            Wq(_) | Bq(_) => !a.qk_norm,
            QNorm(_) => a.qk_norm,
            _ => false,
        };
        let m = a.scale * (a.head_dim as f32).sqrt();
        // Within rounding of 1: the checkpoint's scale is 1/√D.
        if scales_q && (m - 1.0).abs() > 1e-6 {
            f = Fold { mul: f.mul * m, add: f.add * m };
        }
    }
    (f != Fold { mul: 1.0, add: 0.0 }).then_some(f)
}

/// The cos / sin tables of every layer, one per distinct (RoPE spec, D): layers that share a
/// RoPE share its table.
pub(crate) struct RopeTables {
    tables: Vec<RopeTable>,
    /// Per layer, its table's index.
    of_layer: Vec<usize>,
}

impl RopeTables {
    /// Tables of `max_pos` positions for the layers of `spec` (any scaling, frequency factors,
    /// partial rotary: `RopeTable::from_spec`).
    pub fn new(client: &Client, spec: &ModelSpec, max_pos: usize) -> Result<Self, Error> {
        let mut keys: Vec<(&RopeSpec, usize)> = Vec::new();
        let mut tables = Vec::new();
        let mut of_layer = Vec::with_capacity(spec.layers.len());
        for ls in &spec.layers {
            let key = (&ls.attn.rope, ls.attn.head_dim);
            let i = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    tables.push(RopeTable::from_spec(client, max_pos, ls.attn.head_dim, &ls.attn.rope)?);
                    keys.push(key);
                    keys.len() - 1
                }
            };
            of_layer.push(i);
        }
        Ok(RopeTables { tables, of_layer })
    }

    /// Layer `l`'s table.
    pub fn of(&self, l: usize) -> Result<&RopeTable, Error> {
        self.of_layer.get(l).and_then(|&i| self.tables.get(i)).ok_or_else(|| Error::Shape(format!("no RoPE table for layer {l}")))
    }

    /// Positions every table covers.
    pub fn max_pos(&self) -> usize {
        self.tables.iter().map(|t| t.max_pos).min().unwrap_or(0)
    }
}
