//! The weights of a [`ModelSpec`], loaded by name from an HF directory or a GGUF, each tensor's
//! shape checked (errors name the file and tensor). Fused Phi-3 projections are split here.

use std::path::Path;

use ndarray::{Array1, Array2, Axis};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::loader::SafetensorsDir;

use super::spec::{FfnSpec, LayerSpec, ModelSpec};

/// A gated MLP (or one expert): `[F, C]`, `[F, C]`, `[C, F]`.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub gate: Array2<f32>,
    pub up: Array2<f32>,
    pub down: Array2<f32>,
}

/// The FFN of one layer.
#[derive(Debug, Clone)]
pub enum Ffn {
    Dense(Mlp),
    /// Router `[E, C]` and E experts.
    Moe {
        router: Array2<f32>,
        experts: Vec<Mlp>,
    },
}

/// One block. Optional parts are present exactly when the layer's spec asks for them.
#[derive(Debug, Clone)]
pub struct Layer {
    pub attn_norm: Array1<f32>,
    /// `[H·D, C]`, `[Hkv·D, C]` ×2, `[C, H·D]`
    pub wq: Array2<f32>,
    pub wk: Array2<f32>,
    pub wv: Array2<f32>,
    pub wo: Array2<f32>,
    /// `[H·D]`, `[Hkv·D]` ×2 (`qkv_bias`); `[C]` (`o_bias`).
    pub bq: Option<Array1<f32>>,
    pub bk: Option<Array1<f32>>,
    pub bv: Option<Array1<f32>>,
    pub bo: Option<Array1<f32>>,
    /// `[D]` each (`qk_norm`).
    pub q_norm: Option<Array1<f32>>,
    pub k_norm: Option<Array1<f32>>,
    /// `[H]` (`sinks`).
    pub sinks: Option<Vec<f32>>,
    /// `[C]` (`post_norms`).
    pub post_attn_norm: Option<Array1<f32>>,
    pub ffn_norm: Array1<f32>,
    pub ffn: Ffn,
    pub post_ffn_norm: Option<Array1<f32>>,
}

#[derive(Debug, Clone)]
pub struct ArchWeights {
    /// `[V, C]`
    pub tok_embd: Array2<f32>,
    pub layers: Vec<Layer>,
    /// `[C]`
    pub out_norm: Array1<f32>,
    /// `[V, C]`; `None` when tied.
    pub lm_head: Option<Array2<f32>>,
}

impl ArchWeights {
    /// The head `[V, C]` (the embedding when tied).
    pub fn head(&self) -> &Array2<f32> {
        self.lm_head.as_ref().unwrap_or(&self.tok_embd)
    }
}

/// Tensors by name: `Ok(None)` when absent, else `(row-major shape, f32 values)`.
pub trait Named {
    fn path(&self) -> &Path;
    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>>;
    /// The tensor's name in this format for a role spelled `(hf, gguf)` in layer `l` (or
    /// outside the layers when `l` is `None`).
    fn name(&self, l: Option<usize>, hf: &str, gguf: &str) -> String;
}

impl Named for GgufFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        if self.tensor_info(name).is_none() {
            return Ok(None);
        }
        self.tensor_f32(name, None).map(Some)
    }
    fn name(&self, l: Option<usize>, _hf: &str, gguf: &str) -> String {
        l.map_or_else(|| format!("{gguf}.weight"), |l| format!("blk.{l}.{gguf}"))
    }
}

impl Named for SafetensorsDir {
    fn path(&self) -> &Path {
        &self.dir
    }
    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        if !self.contains(name) {
            return Ok(None);
        }
        self.get(name).map(Some)
    }
    fn name(&self, l: Option<usize>, hf: &str, _gguf: &str) -> String {
        l.map_or_else(|| hf.to_string(), |l| format!("model.layers.{l}.{hf}"))
    }
}

/// Reads tensors of one file with shape checks.
struct Reader<'a> {
    src: &'a dyn Named,
}

impl Reader<'_> {
    fn need(&self, name: &str, want: &[usize]) -> Result<Vec<f32>> {
        self.opt(name, want)?.ok_or_else(|| Error::tensor(self.src.path(), name, "missing"))
    }
    fn opt(&self, name: &str, want: &[usize]) -> Result<Option<Vec<f32>>> {
        let Some((shape, data)) = self.src.tensor(name)? else { return Ok(None) };
        // A [C] vector may be stored [1, C] by some writers; the element count decides.
        let same = shape == want || (want.len() == 1 && shape.iter().product::<usize>() == want[0] && shape.len() == 2 && shape[0] == 1);
        if !same {
            return Err(Error::tensor(self.src.path(), name, format!("shape {shape:?}, expected {want:?}")));
        }
        Ok(Some(data))
    }
    fn mat(&self, name: &str, r: usize, c: usize) -> Result<Array2<f32>> {
        Array2::from_shape_vec((r, c), self.need(name, &[r, c])?).map_err(|e| Error::tensor(self.src.path(), name, e.to_string()))
    }
    fn vec(&self, name: &str, n: usize) -> Result<Array1<f32>> {
        Ok(Array1::from_vec(self.need(name, &[n])?))
    }
    /// Per-layer tensor `(hf, gguf)` names with `.weight` / `.bias` appended.
    fn lname(&self, l: usize, hf: &str, gguf: &str, suffix: &str) -> String {
        self.src.name(Some(l), &format!("{hf}.{suffix}"), &format!("{gguf}.{suffix}"))
    }
}

/// Split the rows of `m` into consecutive blocks of `rows` rows each.
fn split_rows(m: Array2<f32>, rows: &[usize]) -> Vec<Array2<f32>> {
    let mut out = Vec::with_capacity(rows.len());
    let mut at = 0;
    for &r in rows {
        out.push(m.slice(ndarray::s![at..at + r, ..]).to_owned());
        at += r;
    }
    out
}

/// Load every tensor `spec` needs from `src`.
pub fn load(spec: &ModelSpec, src: &dyn Named) -> Result<ArchWeights> {
    let rd = Reader { src };
    let (v, c) = (spec.vocab, spec.hidden);
    let top = |hf: &str, gguf: &str| src.name(None, hf, gguf);
    let tok_embd = rd.mat(&top("model.embed_tokens.weight", "token_embd"), v, c)?;
    let lm_head = if spec.tied { None } else { Some(rd.mat(&top("lm_head.weight", "output"), v, c)?) };
    let out_norm = rd.vec(&top("model.norm.weight", "output_norm"), c)?;
    let layers = spec.layers.iter().enumerate().map(|(l, ls)| load_layer(&rd, spec, l, ls)).collect::<Result<_>>()?;
    Ok(ArchWeights { tok_embd, layers, out_norm, lm_head })
}

fn load_layer(rd: &Reader, spec: &ModelSpec, l: usize, ls: &LayerSpec) -> Result<Layer> {
    let a = &ls.attn;
    let c = spec.hidden;
    let (qd, kvd) = (a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim);
    let w = |hf: &str, gguf: &str| rd.lname(l, hf, gguf, "weight");
    let b = |hf: &str, gguf: &str| rd.lname(l, hf, gguf, "bias");
    let vec_if = |on: bool, name: String, n: usize| on.then(|| rd.vec(&name, n)).transpose();
    let (wq, wk, wv) = if spec.fused.qkv {
        let m = rd.mat(&w("self_attn.qkv_proj", "attn_qkv"), qd + 2 * kvd, c)?;
        let mut p = split_rows(m, &[qd, kvd, kvd]).into_iter();
        (p.next(), p.next(), p.next())
    } else {
        (
            Some(rd.mat(&w("self_attn.q_proj", "attn_q"), qd, c)?),
            Some(rd.mat(&w("self_attn.k_proj", "attn_k"), kvd, c)?),
            Some(rd.mat(&w("self_attn.v_proj", "attn_v"), kvd, c)?),
        )
    };
    let missing = || Error::Input(format!("layer {l}: q/k/v split failed"));
    // Gemma's sandwich names its pre-FFN norm `pre_feedforward_layernorm`; llama-style models
    // call it `post_attention_layernorm`.
    let ffn_norm = if ls.post_norms { w("pre_feedforward_layernorm", "ffn_norm") } else { w("post_attention_layernorm", "ffn_norm") };
    Ok(Layer {
        attn_norm: rd.vec(&w("input_layernorm", "attn_norm"), c)?,
        wq: wq.ok_or_else(missing)?,
        wk: wk.ok_or_else(missing)?,
        wv: wv.ok_or_else(missing)?,
        wo: rd.mat(&w("self_attn.o_proj", "attn_output"), c, qd)?,
        bq: vec_if(a.qkv_bias, b("self_attn.q_proj", "attn_q"), qd)?,
        bk: vec_if(a.qkv_bias, b("self_attn.k_proj", "attn_k"), kvd)?,
        bv: vec_if(a.qkv_bias, b("self_attn.v_proj", "attn_v"), kvd)?,
        bo: vec_if(a.o_bias, b("self_attn.o_proj", "attn_output"), c)?,
        q_norm: vec_if(a.qk_norm, w("self_attn.q_norm", "attn_q_norm"), a.head_dim)?,
        k_norm: vec_if(a.qk_norm, w("self_attn.k_norm", "attn_k_norm"), a.head_dim)?,
        sinks: vec_if(a.sinks, rd.src.name(Some(l), "self_attn.sinks", "attn_sinks.weight"), a.n_heads)?.map(|s| s.to_vec()),
        post_attn_norm: vec_if(ls.post_norms, w("post_attention_layernorm", "post_attention_norm"), c)?,
        ffn_norm: rd.vec(&ffn_norm, c)?,
        ffn: load_ffn(rd, spec, l, &ls.ffn)?,
        post_ffn_norm: vec_if(ls.post_norms, w("post_feedforward_layernorm", "post_ffw_norm"), c)?,
    })
}

fn load_ffn(rd: &Reader, spec: &ModelSpec, l: usize, f: &FfnSpec) -> Result<Ffn> {
    let c = spec.hidden;
    let w = |hf: &str, gguf: &str| rd.lname(l, hf, gguf, "weight");
    match *f {
        FfnSpec::Dense { ffn, .. } if spec.fused.gate_up => {
            let m = rd.mat(&w("mlp.gate_up_proj", "ffn_up"), 2 * ffn, c)?;
            let mut p = split_rows(m, &[ffn, ffn]).into_iter();
            let (gate, up) = p.next().zip(p.next()).ok_or_else(|| Error::Input(format!("layer {l}: gate/up split failed")))?;
            Ok(Ffn::Dense(Mlp { gate, up, down: rd.mat(&w("mlp.down_proj", "ffn_down"), c, ffn)? }))
        }
        FfnSpec::Dense { ffn, .. } => Ok(Ffn::Dense(Mlp {
            gate: rd.mat(&w("mlp.gate_proj", "ffn_gate"), ffn, c)?,
            up: rd.mat(&w("mlp.up_proj", "ffn_up"), ffn, c)?,
            down: rd.mat(&w("mlp.down_proj", "ffn_down"), c, ffn)?,
        })),
        FfnSpec::Moe { n_experts, expert_ffn, .. } => {
            let router = rd.mat(&w("mlp.gate", "ffn_gate_inp"), n_experts, c)?;
            Ok(Ffn::Moe { router, experts: load_experts(rd, l, n_experts, expert_ffn, c)? })
        }
    }
}

/// E experts: stacked `[E, F, C]` / `[E, C, F]` (GGUF `ffn_{gate,up,down}_exps`), or HF's
/// `mlp.experts.{e}.{gate,up,down}_proj.weight`, or transformers 5's fused
/// `mlp.experts.gate_up_proj [E, 2F, C]` + `mlp.experts.down_proj [E, C, F]`.
fn load_experts(rd: &Reader, l: usize, e: usize, f: usize, c: usize) -> Result<Vec<Mlp>> {
    let name = |hf: &str, gguf: &str| rd.src.name(Some(l), hf, gguf);
    let stack = |n: String, r: usize, k: usize| -> Result<Option<Vec<Array2<f32>>>> {
        let Some(d) = rd.opt(&n, &[e, r, k])? else { return Ok(None) };
        let a = ndarray::Array3::from_shape_vec((e, r, k), d).map_err(|x| Error::tensor(rd.src.path(), &n, x.to_string()))?;
        Ok(Some(a.axis_iter(Axis(0)).map(|m| m.to_owned()).collect()))
    };
    let per_expert = rd.src.name(Some(l), "mlp.experts.0.gate_proj.weight", "");
    if rd.src.tensor(&per_expert)?.is_some() {
        return (0..e)
            .map(|x| {
                let w = |p: &str| name(&format!("mlp.experts.{x}.{p}.weight"), "");
                Ok(Mlp { gate: rd.mat(&w("gate_proj"), f, c)?, up: rd.mat(&w("up_proj"), f, c)?, down: rd.mat(&w("down_proj"), c, f)? })
            })
            .collect();
    }
    if let Some(gu) = stack(name("mlp.experts.gate_up_proj", "ffn_gate_up_exps.weight"), 2 * f, c)? {
        let down = stack(name("mlp.experts.down_proj", "ffn_down_exps.weight"), c, f)?
            .ok_or_else(|| Error::tensor(rd.src.path(), name("mlp.experts.down_proj", "ffn_down_exps.weight"), "missing"))?;
        return Ok(gu
            .into_iter()
            .zip(down)
            .map(|(m, down)| {
                let mut p = split_rows(m, &[f, f]).into_iter();
                let (gate, up) = (p.next().unwrap_or_default(), p.next().unwrap_or_default());
                Mlp { gate, up, down }
            })
            .collect());
    }
    let need = |hf: &str, gguf: &str, r: usize, k: usize| -> Result<Vec<Array2<f32>>> {
        let n = name(hf, gguf);
        stack(n.clone(), r, k)?.ok_or_else(|| Error::tensor(rd.src.path(), n, "missing"))
    };
    let gate = need("mlp.experts.gate_proj", "ffn_gate_exps.weight", f, c)?;
    let up = need("mlp.experts.up_proj", "ffn_up_exps.weight", f, c)?;
    let down = need("mlp.experts.down_proj", "ffn_down_exps.weight", c, f)?;
    Ok(gate.into_iter().zip(up).zip(down).map(|((gate, up), down)| Mlp { gate, up, down }).collect())
}
