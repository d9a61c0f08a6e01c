//! Model weights in f32, loaded from GGUF or HF safetensors, or generated (`synthetic`).

use ndarray::{Array1, Array2};

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

/// Every tensor of the model, independent of file format.
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
}

/// Naming scheme of a checkpoint format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    Hf,
}

impl Tensor {
    /// The per-layer tensors of block `l`, in file order.
    pub fn layer(l: usize) -> [Tensor; 9] {
        use Tensor::*;
        [AttnNorm(l), Wq(l), Wk(l), Wv(l), Wo(l), FfnNorm(l), WGate(l), WUp(l), WDown(l)]
    }

    /// Row-major shape under `cfg`.
    pub fn shape(self, cfg: &Config) -> Vec<usize> {
        let (c, f, v) = (cfg.hidden, cfg.ffn, cfg.vocab);
        let (qd, kvd) = (cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim);
        use Tensor::*;
        match self {
            TokEmbd | LmHead => vec![v, c],
            OutNorm | AttnNorm(_) | FfnNorm(_) => vec![c],
            Wq(_) => vec![qd, c],
            Wk(_) | Wv(_) => vec![kvd, c],
            Wo(_) => vec![c, qd],
            WGate(_) | WUp(_) => vec![f, c],
            WDown(_) => vec![c, f],
        }
    }

    /// The tensor's name in a checkpoint.
    pub fn name(self, naming: Naming) -> String {
        use Tensor::*;
        let (l, gguf, hf) = match self {
            TokEmbd => return if naming == Naming::Gguf { "token_embd.weight" } else { "model.embed_tokens.weight" }.into(),
            OutNorm => return if naming == Naming::Gguf { "output_norm.weight" } else { "model.norm.weight" }.into(),
            LmHead => return if naming == Naming::Gguf { "output.weight" } else { "lm_head.weight" }.into(),
            AttnNorm(l) => (l, "attn_norm", "input_layernorm"),
            Wq(l) => (l, "attn_q", "self_attn.q_proj"),
            Wk(l) => (l, "attn_k", "self_attn.k_proj"),
            Wv(l) => (l, "attn_v", "self_attn.v_proj"),
            Wo(l) => (l, "attn_output", "self_attn.o_proj"),
            FfnNorm(l) => (l, "ffn_norm", "post_attention_layernorm"),
            WGate(l) => (l, "ffn_gate", "mlp.gate_proj"),
            WUp(l) => (l, "ffn_up", "mlp.up_proj"),
            WDown(l) => (l, "ffn_down", "mlp.down_proj"),
        };
        match naming {
            Naming::Gguf => format!("blk.{l}.{gguf}.weight"),
            Naming::Hf => format!("model.layers.{l}.{hf}.weight"),
        }
    }
}

/// How a tensor's values are stored (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawDtype {
    F32,
    F16,
    BF16,
    /// ggml blocks (Q8_0, Q4_0, Q4_1: 32 values each), decoded by
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
}

impl<T: TensorSource + ?Sized> TensorSource for &mut T {
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        (**self).load(t, cfg)
    }
    fn load_quantized(&mut self, t: Tensor, cfg: &Config) -> Result<Option<crate::quant::QuantTensor>> {
        (**self).load_quantized(t, cfg)
    }
    fn load_raw(&mut self, t: Tensor, cfg: &Config) -> Result<Option<RawDense<'_>>> {
        (**self).load_raw(t, cfg)
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
