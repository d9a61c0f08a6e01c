//! Model weights in f32, loaded from GGUF or HF safetensors, or generated (`synthetic`).

use ndarray::{Array1, Array2};

use crate::arch::spec::{FfnSpec, ModelSpec};
use crate::config::Config;
use crate::error::{Error, Result};

/// One transformer block. Linear weights are `[out, in]` (y = x Wᵀ).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// `[C]` RMSNorm gain before attention.
    pub attn_norm: Array1<f32>,
    /// `[H·D, C]`
    pub wq: Array2<f32>,
    /// `[Hkv·D, C]`
    pub wk: Array2<f32>,
    /// `[Hkv·D, C]`
    pub wv: Array2<f32>,
    /// `[C, H·D]`
    pub wo: Array2<f32>,
    /// `[C]` RMSNorm gain before the MLP.
    pub ffn_norm: Array1<f32>,
    /// `[F, C]`
    pub w_gate: Array2<f32>,
    /// `[F, C]`
    pub w_up: Array2<f32>,
    /// `[C, F]`
    pub w_down: Array2<f32>,
}

/// All weights of a llama-family model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// `[V, C]` token embeddings.
    pub tok_embd: Array2<f32>,
    /// L blocks.
    pub layers: Vec<LayerWeights>,
    /// `[C]` final RMSNorm gain.
    pub out_norm: Array1<f32>,
    /// `[V, C]`; `None` when tied to `tok_embd`.
    pub lm_head: Option<Array2<f32>>,
}

/// Every tensor of the model, independent of file format: the llama set, and the parts other
/// architectures add (which a model has follows from its [`ModelSpec`]: [`Tensor::of_layer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tensor {
    TokEmbd,
    OutNorm,
    LmHead,
    AttnNorm(usize),
    Wq(usize),
    Wk(usize),
    Wv(usize),
    Wo(usize),
    FfnNorm(usize),
    WGate(usize),
    WUp(usize),
    WDown(usize),
    /// `[H·D]`, `[Hkv·D]` ×2: q, k, v biases (Qwen2, GPT-OSS).
    Bq(usize),
    Bk(usize),
    Bv(usize),
    /// `[C]`: the output projection's bias (GPT-OSS).
    Bo(usize),
    /// `[D]`: per-head RMSNorm gains of q and k (Qwen3, Gemma-3).
    QNorm(usize),
    KNorm(usize),
    /// `[C]`: Gemma's sandwich norms after the attention and after the FFN.
    PostAttnNorm(usize),
    PostFfnNorm(usize),
    /// `[C]`: the FFN's norm where the model also has post-norms (Gemma: HF names it
    /// `pre_feedforward_layernorm`, since its `post_attention_layernorm` is [`Tensor::PostAttnNorm`]).
    PreFfnNorm(usize),
    /// `[(H + 2Hkv)·D, C]`: q|k|v in one matrix (Phi-3).
    Wqkv(usize),
    /// `[2F, C]`: gate|up in one matrix, gate rows first (Phi-3).
    WGateUp(usize),
    /// `[H]`: one sink logit per head (GPT-OSS).
    Sinks(usize),
    /// `[E, C]`, `[E]`: an MoE layer's router and its bias (GPT-OSS; the experts themselves
    /// come from [`TensorSource::mxfp4_experts`]).
    Router(usize),
    RouterBias(usize),
    /// `[E, C]`: the router of a softmax-routed MoE layer without bias (Qwen3-MoE: HF
    /// `mlp.gate`; llama.cpp names every router `ffn_gate_inp`).
    MoeGate(usize),
    /// `[E, F, C]`, `[E, F, C]`, `[E, C, F]`: an MoE layer's experts stacked (llama.cpp's
    /// `ffn_{gate,up,down}_exps`; HF `mlp.experts.{gate,up,down}_proj`).
    ExpsGate(usize),
    ExpsUp(usize),
    ExpsDown(usize),
    /// `[E, 2F, C]`: each expert's gate|up stacked, gate rows first (transformers 5's
    /// `mlp.experts.gate_up_proj`, with [`Tensor::ExpsDown`]).
    ExpsGateUp(usize),
    /// `[F, C]`, `[F, C]`, `[C, F]`: expert `e` (second index) of layer `l` on its own (HF
    /// `mlp.experts.{e}.{gate,up,down}_proj.weight`; llama.cpp's older Mixtral files
    /// `ffn_{gate,up,down}.{e}.weight`).
    ExpertGate(usize, usize),
    ExpertUp(usize, usize),
    ExpertDown(usize, usize),
}

/// Naming scheme of a checkpoint format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    Hf,
}

/// The widths shapes are made of, from a [`Config`] or one layer of a [`ModelSpec`].
#[derive(Debug, Clone, Copy)]
struct Dims {
    c: usize,
    f: usize,
    v: usize,
    h: usize,
    hkv: usize,
    d: usize,
    /// E: experts of an MoE layer (0 where dense, and under a [`Config`], which has none).
    e: usize,
}

impl Dims {
    fn of_config(cfg: &Config) -> Self {
        Dims { c: cfg.hidden, f: cfg.ffn, v: cfg.vocab, h: cfg.n_heads, hkv: cfg.n_kv_heads, d: cfg.head_dim, e: 0 }
    }

    /// Layer `l`'s widths (the first layer's for the tensors outside the layers; F is the
    /// expert width in an MoE layer).
    fn of_spec(spec: &ModelSpec, l: Option<usize>) -> Self {
        let ls = l.and_then(|l| spec.layers.get(l)).or(spec.layers.first());
        let (h, hkv, d, f, e) = ls.map_or((0, 0, 0, 0, 0), |ls| {
            let (f, e) = match ls.ffn {
                FfnSpec::Dense { ffn, .. } => (ffn, 0),
                FfnSpec::Moe { expert_ffn, n_experts, .. } => (expert_ffn, n_experts),
            };
            (ls.attn.n_heads, ls.attn.n_kv_heads, ls.attn.head_dim, f, e)
        });
        Dims { c: spec.hidden, f, v: spec.vocab, h, hkv, d, e }
    }
}

impl Tensor {
    /// The per-layer tensors of block `l` of a llama model, in file order.
    pub fn layer(l: usize) -> [Tensor; 9] {
        use Tensor::*;
        [AttnNorm(l), Wq(l), Wk(l), Wv(l), Wo(l), FfnNorm(l), WGate(l), WUp(l), WDown(l)]
    }

    /// Block `l`'s tensors under `spec` (dense FFN parts only: an MoE layer's router and
    /// experts are not listed), in file order: fused q|k|v and gate|up where the checkpoint stores them so,
    /// the optional parts where the layer's spec has them.
    pub fn of_layer(spec: &ModelSpec, l: usize) -> Vec<Tensor> {
        use Tensor::*;
        let Some(ls) = spec.layers.get(l) else { return Vec::new() };
        let a = &ls.attn;
        let mut v = vec![AttnNorm(l)];
        if spec.fused.qkv {
            v.push(Wqkv(l));
        } else {
            v.extend([Wq(l), Wk(l), Wv(l)]);
        }
        if a.qkv_bias {
            v.extend([Bq(l), Bk(l), Bv(l)]);
        }
        if a.qk_norm {
            v.extend([QNorm(l), KNorm(l)]);
        }
        if a.sinks {
            v.push(Sinks(l));
        }
        v.push(Wo(l));
        if a.o_bias {
            v.push(Bo(l));
        }
        if ls.post_norms {
            v.push(PostAttnNorm(l));
        }
        v.push(Tensor::ffn_norm(spec, l));
        if matches!(ls.ffn, FfnSpec::Dense { .. }) {
            if spec.fused.gate_up {
                v.push(WGateUp(l));
            } else {
                v.extend([WGate(l), WUp(l)]);
            }
            v.push(WDown(l));
        }
        if ls.post_norms {
            v.push(PostFfnNorm(l));
        }
        v
    }

    /// The FFN's norm of block `l`: [`Tensor::PreFfnNorm`] where the layer has post-norms.
    pub fn ffn_norm(spec: &ModelSpec, l: usize) -> Tensor {
        match spec.layers.get(l).is_some_and(|ls| ls.post_norms) {
            true => Tensor::PreFfnNorm(l),
            false => Tensor::FfnNorm(l),
        }
    }

    /// Row-major shape under `cfg`.
    pub fn shape(self, cfg: &Config) -> Vec<usize> {
        self.shape_of(Dims::of_config(cfg))
    }

    /// Row-major shape under `spec` (its layer's widths).
    pub fn spec_shape(self, spec: &ModelSpec) -> Vec<usize> {
        self.shape_of(Dims::of_spec(spec, self.layer_index()))
    }

    /// The block the tensor belongs to (`None`: embedding, final norm, head).
    pub fn layer_index(self) -> Option<usize> {
        use Tensor::*;
        match self {
            TokEmbd | OutNorm | LmHead => None,
            AttnNorm(l)
            | Wq(l)
            | Wk(l)
            | Wv(l)
            | Wo(l)
            | FfnNorm(l)
            | WGate(l)
            | WUp(l)
            | WDown(l)
            | Bq(l)
            | Bk(l)
            | Bv(l)
            | Bo(l)
            | QNorm(l)
            | KNorm(l)
            | PostAttnNorm(l)
            | PostFfnNorm(l)
            | PreFfnNorm(l)
            | Wqkv(l)
            | WGateUp(l)
            | Sinks(l)
            | Router(l)
            | RouterBias(l)
            | MoeGate(l)
            | ExpsGate(l)
            | ExpsUp(l)
            | ExpsDown(l)
            | ExpsGateUp(l)
            | ExpertGate(l, _)
            | ExpertUp(l, _)
            | ExpertDown(l, _) => Some(l),
        }
    }

    fn shape_of(self, d: Dims) -> Vec<usize> {
        let Dims { c, f, v, h, hkv, d, e } = d;
        let (qd, kvd) = (h * d, hkv * d);
        use Tensor::*;
        match self {
            TokEmbd | LmHead => vec![v, c],
            OutNorm | AttnNorm(_) | FfnNorm(_) | PreFfnNorm(_) | PostAttnNorm(_) | PostFfnNorm(_) | Bo(_) => vec![c],
            Wq(_) => vec![qd, c],
            Wk(_) | Wv(_) => vec![kvd, c],
            Wo(_) => vec![c, qd],
            WGate(_) | WUp(_) | ExpertGate(..) | ExpertUp(..) => vec![f, c],
            WDown(_) | ExpertDown(..) => vec![c, f],
            Bq(_) => vec![qd],
            Bk(_) | Bv(_) => vec![kvd],
            QNorm(_) | KNorm(_) => vec![d],
            Wqkv(_) => vec![qd + 2 * kvd, c],
            WGateUp(_) => vec![2 * f, c],
            Sinks(_) => vec![h],
            Router(_) | MoeGate(_) => vec![e, c],
            RouterBias(_) => vec![e],
            ExpsGate(_) | ExpsUp(_) => vec![e, f, c],
            ExpsDown(_) => vec![e, c, f],
            ExpsGateUp(_) => vec![e, 2 * f, c],
        }
    }

    /// The tensor's name in a checkpoint: the one table of names every loader uses.
    pub fn name(self, naming: Naming) -> String {
        use Tensor::*;
        let (l, gguf, hf) = match self {
            TokEmbd => return if naming == Naming::Gguf { "token_embd.weight" } else { "model.embed_tokens.weight" }.into(),
            OutNorm => return if naming == Naming::Gguf { "output_norm.weight" } else { "model.norm.weight" }.into(),
            LmHead => return if naming == Naming::Gguf { "output.weight" } else { "lm_head.weight" }.into(),
            AttnNorm(l) => (l, "attn_norm.weight", "input_layernorm.weight"),
            Wq(l) => (l, "attn_q.weight", "self_attn.q_proj.weight"),
            Wk(l) => (l, "attn_k.weight", "self_attn.k_proj.weight"),
            Wv(l) => (l, "attn_v.weight", "self_attn.v_proj.weight"),
            Wo(l) => (l, "attn_output.weight", "self_attn.o_proj.weight"),
            FfnNorm(l) => (l, "ffn_norm.weight", "post_attention_layernorm.weight"),
            WGate(l) => (l, "ffn_gate.weight", "mlp.gate_proj.weight"),
            WUp(l) => (l, "ffn_up.weight", "mlp.up_proj.weight"),
            WDown(l) => (l, "ffn_down.weight", "mlp.down_proj.weight"),
            Bq(l) => (l, "attn_q.bias", "self_attn.q_proj.bias"),
            Bk(l) => (l, "attn_k.bias", "self_attn.k_proj.bias"),
            Bv(l) => (l, "attn_v.bias", "self_attn.v_proj.bias"),
            Bo(l) => (l, "attn_output.bias", "self_attn.o_proj.bias"),
            QNorm(l) => (l, "attn_q_norm.weight", "self_attn.q_norm.weight"),
            KNorm(l) => (l, "attn_k_norm.weight", "self_attn.k_norm.weight"),
            PostAttnNorm(l) => (l, "post_attention_norm.weight", "post_attention_layernorm.weight"),
            PostFfnNorm(l) => (l, "post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
            PreFfnNorm(l) => (l, "ffn_norm.weight", "pre_feedforward_layernorm.weight"),
            Wqkv(l) => (l, "attn_qkv.weight", "self_attn.qkv_proj.weight"),
            // llama.cpp's converter stores Phi-3's gate|up as `ffn_up` of twice the rows.
            WGateUp(l) => (l, "ffn_up.weight", "mlp.gate_up_proj.weight"),
            Sinks(l) => (l, "attn_sinks.weight", "self_attn.sinks"),
            // GPT-OSS's spelling (Qwen3-MoE's HF router is `mlp.gate.weight`: MoeGate).
            Router(l) => (l, "ffn_gate_inp.weight", "mlp.router.weight"),
            RouterBias(l) => (l, "ffn_gate_inp.bias", "mlp.router.bias"),
            MoeGate(l) => (l, "ffn_gate_inp.weight", "mlp.gate.weight"),
            ExpsGate(l) => (l, "ffn_gate_exps.weight", "mlp.experts.gate_proj"),
            ExpsUp(l) => (l, "ffn_up_exps.weight", "mlp.experts.up_proj"),
            ExpsDown(l) => (l, "ffn_down_exps.weight", "mlp.experts.down_proj"),
            ExpsGateUp(l) => (l, "ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj"),
            ExpertGate(l, e) | ExpertUp(l, e) | ExpertDown(l, e) => {
                let p = match self {
                    ExpertGate(..) => ("gate", "gate_proj"),
                    ExpertUp(..) => ("up", "up_proj"),
                    _ => ("down", "down_proj"),
                };
                return match naming {
                    Naming::Gguf => format!("blk.{l}.ffn_{}.{e}.weight", p.0),
                    Naming::Hf => format!("model.layers.{l}.mlp.experts.{e}.{}.weight", p.1),
                };
            }
        };
        match naming {
            Naming::Gguf => format!("blk.{l}.{gguf}"),
            Naming::Hf => format!("model.layers.{l}.{hf}"),
        }
    }
}

/// How a tensor's values are stored (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawDtype {
    F32,
    F16,
    BF16,
    /// ggml blocks (any block type of [`crate::ggml`]), decoded by
    /// [`crate::dequant::dequantize_into`] — exactly what a GGUF's `load` returns.
    Block(crate::dequant::GgmlType),
}

impl RawDtype {
    /// How a GGUF stores ggml type `t`: the plain types as themselves, the rest as blocks.
    pub fn of(t: crate::dequant::GgmlType) -> Self {
        use crate::dequant::GgmlType;
        match t {
            GgmlType::F32 => RawDtype::F32,
            GgmlType::F16 => RawDtype::F16,
            GgmlType::BF16 => RawDtype::BF16,
            t => RawDtype::Block(t),
        }
    }

    /// The ggml type of this storage (the inverse of [`RawDtype::of`]).
    pub fn ggml(self) -> crate::dequant::GgmlType {
        use crate::dequant::GgmlType;
        match self {
            RawDtype::F32 => GgmlType::F32,
            RawDtype::F16 => GgmlType::F16,
            RawDtype::BF16 => GgmlType::BF16,
            RawDtype::Block(t) => t,
        }
    }

    /// The unit of storage: `(values, bytes)` — one value for the plain types, a block for
    /// ggml's block types. Ranges of values start and end on whole units.
    pub fn unit(self) -> (usize, usize) {
        let t = self.ggml();
        (t.block_elems(), t.block_bytes())
    }

    /// Bytes of `n` values (`None` where `n` is not a whole number of units).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let (ue, ub) = self.unit();
        n.is_multiple_of(ue).then_some(n / ue * ub)
    }
}

/// A dense tensor's stored bytes, borrowed from the source (a memory-mapped file): what
/// [`TensorSource::load`] decodes to f32, element for element, undecoded — so a backend can
/// convert straight to its own storage type without an f32 copy.
#[derive(Debug, Clone, Copy)]
pub struct RawDense<'a> {
    pub dtype: RawDtype,
    pub bytes: &'a [u8],
}

/// Anything that can hand out a tensor as f32 with a checked shape.
pub trait TensorSource {
    /// The f32 data of `t`, after checking its shape is `t.shape(cfg)` (quantized tensors
    /// come dequantized).
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>>;

    /// The quantized form of `t` when the source holds one (a quantized HF directory,
    /// `--weights`), for backends that keep weights quantized; `None` otherwise.
    fn load_quantized(&mut self, _t: Tensor, _cfg: &Config) -> Result<Option<crate::quant::QuantTensor>> {
        Ok(None)
    }

    /// `t`'s stored bytes when the source holds it as [`RawDtype`] values (F32 / F16 / BF16, or
    /// ggml blocks that [`TensorSource::load_quantized`] does not offer) with the shape
    /// `t.shape(cfg)` and [`TensorSource::load`] would return exactly their decoded values;
    /// `None` otherwise (generated, or transformed on load), and then `load` is the way.
    fn load_raw(&mut self, _t: Tensor, _cfg: &Config) -> Result<Option<RawDense<'_>>> {
        Ok(None)
    }

    /// [`TensorSource::load_raw`] with the shape checked against `want` (what a
    /// [`ModelSpec`] gives: [`Tensor::spec_shape`]) instead of `t.shape(cfg)` — the way to the
    /// tensors whose shape a [`Config`] cannot give (an MoE layer's router and experts: E is
    /// the spec's). Sources that do not override it check `cfg`'s shape.
    fn load_raw_as(&mut self, t: Tensor, cfg: &Config, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        let _ = want;
        self.load_raw(t, cfg)
    }

    /// [`TensorSource::load`]'s values cut to the row runs `rows` (in order) of the row-major
    /// `[rows, cols]` tensor (a vector: `[n, 1]`) and, within each row, to the columns `cols`
    /// — a tensor-parallel rank's slice — where the source makes them without the whole tensor
    /// (a synthetic model: each value from its index); `None`: the caller cuts `load`'s values.
    fn load_cut(&mut self, _t: Tensor, _cfg: &Config, _rows: &[std::ops::Range<usize>], _cols: std::ops::Range<usize>) -> Result<Option<Vec<f32>>> {
        Ok(None)
    }

    /// Whether the file stores `t` under its own name (whatever its dtype); `None` where the
    /// source cannot tell (generated or wrapped sources). Lets a loader choose between layouts
    /// (one tensor per expert or stacked) without depending on [`TensorSource::load_raw`],
    /// which is `None` for stored types it does not lend (FP8).
    fn holds(&self, _t: Tensor) -> Option<bool> {
        None
    }

    /// Block `l`'s MoE experts in MXFP4 (GPT-OSS's: gate|up interleaved and down, with their
    /// biases), as the file stores them where it can lend them (all E), else built (only the
    /// experts `held`: an expert-parallel rank's share, or all); `None` where the source holds
    /// no MXFP4 experts for the block.
    fn mxfp4_experts(&mut self, _l: usize, _held: std::ops::Range<usize>) -> Result<Option<crate::gpt_oss::weights::Mxfp4Experts<'_>>> {
        Ok(None)
    }
}

impl<T: TensorSource + ?Sized> TensorSource for &mut T {
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        (**self).load(t, cfg)
    }
    fn holds(&self, t: Tensor) -> Option<bool> {
        (**self).holds(t)
    }
    fn load_quantized(&mut self, t: Tensor, cfg: &Config) -> Result<Option<crate::quant::QuantTensor>> {
        (**self).load_quantized(t, cfg)
    }
    fn load_raw(&mut self, t: Tensor, cfg: &Config) -> Result<Option<RawDense<'_>>> {
        (**self).load_raw(t, cfg)
    }
    fn load_raw_as(&mut self, t: Tensor, cfg: &Config, want: &[usize]) -> Result<Option<RawDense<'_>>> {
        (**self).load_raw_as(t, cfg, want)
    }
    fn load_cut(&mut self, t: Tensor, cfg: &Config, rows: &[std::ops::Range<usize>], cols: std::ops::Range<usize>) -> Result<Option<Vec<f32>>> {
        (**self).load_cut(t, cfg, rows, cols)
    }
    fn mxfp4_experts(&mut self, l: usize, held: std::ops::Range<usize>) -> Result<Option<crate::gpt_oss::weights::Mxfp4Experts<'_>>> {
        (**self).mxfp4_experts(l, held)
    }
}

fn mat(t: Tensor, cfg: &Config, data: Vec<f32>) -> Result<Array2<f32>> {
    let s = t.shape(cfg);
    Array2::from_shape_vec((s[0], s[1]), data).map_err(|e| Error::Input(format!("{t:?}: {e}")))
}

fn vec1(data: Vec<f32>) -> Array1<f32> {
    Array1::from_vec(data)
}

impl Weights {
    /// Load every tensor of `cfg` from `src` (one loop over blocks, same for every format).
    pub fn load(src: &mut dyn TensorSource, cfg: &Config) -> Result<Self> {
        let mut m = |t: Tensor| -> Result<Array2<f32>> {
            let d = src.load(t, cfg)?;
            mat(t, cfg, d)
        };
        let tok_embd = m(Tensor::TokEmbd)?;
        let lm_head = if cfg.tied_embeddings { None } else { Some(m(Tensor::LmHead)?) };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let [an, q, k, v, o, fnm, g, u, d] = Tensor::layer(l);
            layers.push(LayerWeights {
                attn_norm: vec1(src.load(an, cfg)?),
                wq: mat(q, cfg, src.load(q, cfg)?)?,
                wk: mat(k, cfg, src.load(k, cfg)?)?,
                wv: mat(v, cfg, src.load(v, cfg)?)?,
                wo: mat(o, cfg, src.load(o, cfg)?)?,
                ffn_norm: vec1(src.load(fnm, cfg)?),
                w_gate: mat(g, cfg, src.load(g, cfg)?)?,
                w_up: mat(u, cfg, src.load(u, cfg)?)?,
                w_down: mat(d, cfg, src.load(d, cfg)?)?,
            });
        }
        let out_norm = vec1(src.load(Tensor::OutNorm, cfg)?);
        Ok(Weights { tok_embd, layers, out_norm, lm_head })
    }

    /// Visit every tensor with its identity (for writers and uploads). All arrays are built in
    /// standard layout, so each is one contiguous slice.
    pub fn for_each(&self, cfg: &Config, mut f: impl FnMut(Tensor, &[f32])) {
        f(Tensor::TokEmbd, self.tok_embd.as_slice().unwrap_or(&[]));
        for (l, w) in self.layers.iter().enumerate() {
            let [an, q, k, v, o, fnm, g, u, d] = Tensor::layer(l);
            for (t, s) in [
                (an, w.attn_norm.as_slice()),
                (q, w.wq.as_slice()),
                (k, w.wk.as_slice()),
                (v, w.wv.as_slice()),
                (o, w.wo.as_slice()),
                (fnm, w.ffn_norm.as_slice()),
                (g, w.w_gate.as_slice()),
                (u, w.w_up.as_slice()),
                (d, w.w_down.as_slice()),
            ] {
                f(t, s.unwrap_or(&[]));
            }
        }
        f(Tensor::OutNorm, self.out_norm.as_slice().unwrap_or(&[]));
        if let (Some(h), false) = (&self.lm_head, cfg.tied_embeddings) {
            f(Tensor::LmHead, h.as_slice().unwrap_or(&[]));
        }
    }

    /// The lm_head matrix `[V, C]` (the embedding when tied).
    pub fn head(&self) -> &Array2<f32> {
        self.lm_head.as_ref().unwrap_or(&self.tok_embd)
    }
}

/// Weights already in memory as a [`TensorSource`] (e.g. to upload them to a GPU).
pub struct InMemory<'a>(pub &'a Weights);

impl TensorSource for InMemory<'_> {
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        let w = self.0;
        let owned = |a: &[f32]| a.to_vec();
        let l = |i: usize| -> Result<&LayerWeights> { w.layers.get(i).ok_or_else(|| Error::Input(format!("layer {i} does not exist"))) };
        let s = |a: Option<&[f32]>| a.map(owned).ok_or_else(|| Error::Input(format!("{t:?} is not contiguous")));
        let v = match t {
            Tensor::TokEmbd => s(w.tok_embd.as_slice())?,
            Tensor::OutNorm => s(w.out_norm.as_slice())?,
            Tensor::LmHead => s(w.head().as_slice())?,
            Tensor::AttnNorm(i) => s(l(i)?.attn_norm.as_slice())?,
            Tensor::Wq(i) => s(l(i)?.wq.as_slice())?,
            Tensor::Wk(i) => s(l(i)?.wk.as_slice())?,
            Tensor::Wv(i) => s(l(i)?.wv.as_slice())?,
            Tensor::Wo(i) => s(l(i)?.wo.as_slice())?,
            Tensor::FfnNorm(i) => s(l(i)?.ffn_norm.as_slice())?,
            Tensor::WGate(i) => s(l(i)?.w_gate.as_slice())?,
            Tensor::WUp(i) => s(l(i)?.w_up.as_slice())?,
            Tensor::WDown(i) => s(l(i)?.w_down.as_slice())?,
            other => return Err(Error::Input(format!("{other:?}: a llama model's weights have no such tensor"))),
        };
        let want: usize = t.shape(cfg).iter().product();
        if v.len() != want {
            return Err(Error::Input(format!("{t:?}: {} values, config wants {want}", v.len())));
        }
        Ok(v)
    }
}

impl Weights {
    /// A copy with every matrix (not the norm gains) rounded through `round`, e.g. to bf16:
    /// the reference run that a 16-bit GPU model is compared with.
    pub fn map_matrices(&self, round: impl Fn(f32) -> f32) -> Weights {
        self.map_matrices_but(round, false)
    }

    /// [`Weights::map_matrices`] of the embeddings and lm_head only: the reference run of a GPU
    /// model that keeps its linear weights quantized (exact: [`crate::quant::is_linear`]) and
    /// rounds the rest to its 16-bit type.
    pub fn map_unquantized(&self, round: impl Fn(f32) -> f32) -> Weights {
        self.map_matrices_but(round, true)
    }

    fn map_matrices_but(&self, round: impl Fn(f32) -> f32, keep_linear: bool) -> Weights {
        let m = |a: &Array2<f32>| a.mapv(&round);
        let lin = |a: &Array2<f32>| if keep_linear { a.clone() } else { m(a) };
        Weights {
            tok_embd: m(&self.tok_embd),
            layers: self
                .layers
                .iter()
                .map(|w| LayerWeights {
                    attn_norm: w.attn_norm.clone(),
                    wq: lin(&w.wq),
                    wk: lin(&w.wk),
                    wv: lin(&w.wv),
                    wo: lin(&w.wo),
                    ffn_norm: w.ffn_norm.clone(),
                    w_gate: lin(&w.w_gate),
                    w_up: lin(&w.w_up),
                    w_down: lin(&w.w_down),
                })
                .collect(),
            out_norm: self.out_norm.clone(),
            lm_head: self.lm_head.as_ref().map(m),
        }
    }
}
