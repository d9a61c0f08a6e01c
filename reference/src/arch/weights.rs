//! The weights of a [`ModelSpec`], loaded by name from an HF directory or a GGUF, each tensor's
//! shape checked (errors name the file and tensor). Names and shapes come from
//! [`Tensor::name`] / [`Tensor::spec_shape`], the MoE router and experts included. Fused Phi-3
//! projections (and transformers 5's stacked gate|up experts) are split here.

use std::path::Path;

use ndarray::{Array1, Array2, Axis};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::loader::SafetensorsDir;
use crate::weights::{Naming, Tensor};

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
    /// Whether the source holds tensor `name` (without reading it).
    fn has(&self, name: &str) -> bool;
    /// The naming scheme of the format.
    fn naming(&self) -> Naming;
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
    fn has(&self, name: &str) -> bool {
        self.tensor_info(name).is_some()
    }
    fn naming(&self) -> Naming {
        Naming::Gguf
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
    fn has(&self, name: &str) -> bool {
        self.contains(name)
    }
    fn naming(&self) -> Naming {
        Naming::Hf
    }
}

/// Reads tensors of one file with shape checks.
struct Reader<'a> {
    src: &'a dyn Named,
    spec: &'a ModelSpec,
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
    fn mat_named(&self, name: &str, r: usize, c: usize) -> Result<Array2<f32>> {
        Array2::from_shape_vec((r, c), self.need(name, &[r, c])?).map_err(|e| Error::tensor(self.src.path(), name, e.to_string()))
    }
    /// Matrix `t` of the table, its shape from the spec.
    fn mat(&self, t: Tensor) -> Result<Array2<f32>> {
        match t.spec_shape(self.spec)[..] {
            [r, c] => self.mat_named(&t.name(self.src.naming()), r, c),
            ref s => Err(Error::Input(format!("{t:?}: shape {s:?} is not a matrix"))),
        }
    }
    /// Stacked experts `t` (`[E, rows, cols]` under the spec) as E matrices; `None` where absent.
    fn stack_opt(&self, t: Tensor) -> Result<Option<Vec<Array2<f32>>>> {
        let name = t.name(self.src.naming());
        let shape = t.spec_shape(self.spec);
        let Some(d) = self.opt(&name, &shape)? else { return Ok(None) };
        let [e, r, k] = shape[..] else { return Err(Error::tensor(self.src.path(), &name, format!("shape {shape:?} is not [E, rows, cols]"))) };
        let a = ndarray::Array3::from_shape_vec((e, r, k), d).map_err(|x| Error::tensor(self.src.path(), &name, x.to_string()))?;
        Ok(Some(a.axis_iter(Axis(0)).map(|m| m.to_owned()).collect()))
    }
    /// [`Reader::stack_opt`] of a tensor that must be there.
    fn stack(&self, t: Tensor) -> Result<Vec<Array2<f32>>> {
        self.stack_opt(t)?.ok_or_else(|| Error::tensor(self.src.path(), t.name(self.src.naming()), "missing"))
    }
    /// Vector `t` of the table.
    fn vec(&self, t: Tensor) -> Result<Array1<f32>> {
        Ok(Array1::from_vec(self.need(&t.name(self.src.naming()), &t.spec_shape(self.spec))?))
    }
    /// Vector `t` where `on`.
    fn vec_if(&self, on: bool, t: Tensor) -> Result<Option<Array1<f32>>> {
        on.then(|| self.vec(t)).transpose()
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
    let rd = Reader { src, spec };
    let tok_embd = rd.mat(Tensor::TokEmbd)?;
    let lm_head = if spec.tied { None } else { Some(rd.mat(Tensor::LmHead)?) };
    let out_norm = rd.vec(Tensor::OutNorm)?;
    let layers = spec.layers.iter().enumerate().map(|(l, ls)| load_layer(&rd, spec, l, ls)).collect::<Result<_>>()?;
    Ok(ArchWeights { tok_embd, layers, out_norm, lm_head })
}

fn load_layer(rd: &Reader, spec: &ModelSpec, l: usize, ls: &LayerSpec) -> Result<Layer> {
    let a = &ls.attn;
    let (qd, kvd) = (a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim);
    let (wq, wk, wv) = if spec.fused.qkv {
        let mut p = split_rows(rd.mat(Tensor::Wqkv(l))?, &[qd, kvd, kvd]).into_iter();
        (p.next(), p.next(), p.next())
    } else {
        (Some(rd.mat(Tensor::Wq(l))?), Some(rd.mat(Tensor::Wk(l))?), Some(rd.mat(Tensor::Wv(l))?))
    };
    let missing = || Error::Input(format!("layer {l}: q/k/v split failed"));
    Ok(Layer {
        attn_norm: rd.vec(Tensor::AttnNorm(l))?,
        wq: wq.ok_or_else(missing)?,
        wk: wk.ok_or_else(missing)?,
        wv: wv.ok_or_else(missing)?,
        wo: rd.mat(Tensor::Wo(l))?,
        bq: rd.vec_if(a.qkv_bias, Tensor::Bq(l))?,
        bk: rd.vec_if(a.qkv_bias, Tensor::Bk(l))?,
        bv: rd.vec_if(a.qkv_bias, Tensor::Bv(l))?,
        bo: rd.vec_if(a.o_bias, Tensor::Bo(l))?,
        q_norm: rd.vec_if(a.qk_norm, Tensor::QNorm(l))?,
        k_norm: rd.vec_if(a.qk_norm, Tensor::KNorm(l))?,
        sinks: rd.vec_if(a.sinks, Tensor::Sinks(l))?.map(|s| s.to_vec()),
        post_attn_norm: rd.vec_if(ls.post_norms, Tensor::PostAttnNorm(l))?,
        ffn_norm: rd.vec(Tensor::ffn_norm(spec, l))?,
        ffn: load_ffn(rd, spec, l, &ls.ffn)?,
        post_ffn_norm: rd.vec_if(ls.post_norms, Tensor::PostFfnNorm(l))?,
    })
}

fn load_ffn(rd: &Reader, spec: &ModelSpec, l: usize, f: &FfnSpec) -> Result<Ffn> {
    match *f {
        FfnSpec::Dense { ffn, .. } if spec.fused.gate_up => {
            let mut p = split_rows(rd.mat(Tensor::WGateUp(l))?, &[ffn, ffn]).into_iter();
            let (gate, up) = p.next().zip(p.next()).ok_or_else(|| Error::Input(format!("layer {l}: gate/up split failed")))?;
            Ok(Ffn::Dense(Mlp { gate, up, down: rd.mat(Tensor::WDown(l))? }))
        }
        FfnSpec::Dense { .. } => {
            Ok(Ffn::Dense(Mlp { gate: rd.mat(Tensor::WGate(l))?, up: rd.mat(Tensor::WUp(l))?, down: rd.mat(Tensor::WDown(l))? }))
        }
        FfnSpec::Moe { n_experts, expert_ffn, .. } => {
            Ok(Ffn::Moe { router: rd.mat(Tensor::MoeGate(l))?, experts: load_experts(rd, l, n_experts, expert_ffn)? })
        }
    }
}

/// E experts of layer `l` (F wide), in the first layout the source holds: one expert at a time
/// ([`Tensor::ExpertGate`] …), stacked gate|up ([`Tensor::ExpsGateUp`], transformers 5), or
/// stacked gate, up and down ([`Tensor::ExpsGate`] …, llama.cpp's `ffn_*_exps`).
fn load_experts(rd: &Reader, l: usize, e: usize, f: usize) -> Result<Vec<Mlp>> {
    use Tensor::*;
    if rd.src.has(&ExpertGate(l, 0).name(rd.src.naming())) {
        return (0..e).map(|x| Ok(Mlp { gate: rd.mat(ExpertGate(l, x))?, up: rd.mat(ExpertUp(l, x))?, down: rd.mat(ExpertDown(l, x))? })).collect();
    }
    if let Some(gu) = rd.stack_opt(ExpsGateUp(l))? {
        let down = rd.stack(ExpsDown(l))?;
        return gu
            .into_iter()
            .zip(down)
            .map(|(m, down)| {
                let mut p = split_rows(m, &[f, f]).into_iter();
                let (gate, up) = p.next().zip(p.next()).ok_or_else(|| Error::Input(format!("layer {l}: expert gate/up split failed")))?;
                Ok(Mlp { gate, up, down })
            })
            .collect();
    }
    let (gate, up, down) = (rd.stack(ExpsGate(l))?, rd.stack(ExpsUp(l))?, rd.stack(ExpsDown(l))?);
    Ok(gate.into_iter().zip(up).zip(down).map(|((gate, up), down)| Mlp { gate, up, down }).collect())
}
