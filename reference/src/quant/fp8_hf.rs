//! FP8 checkpoints as the hub ships them, read into [`Fp8Weight`]s and from there to the f32
//! weights they stand for.
//!
//! Two `quantization_config`s write them:
//! ```text
//! {"quant_method": "fp8", "weight_block_size": [128, 128], ...}      transformers' fine-grained
//!     X.weight            F8_E4M3 [out, in]                          FP8 (DeepSeek-V3, Qwen3-FP8)
//!     X.weight_scale_inv  F32     [⌈out/128⌉, ⌈in/128⌉]  (or [1] / [] without a block size)
//! {"quant_method": "compressed-tensors", "format": "float-quantized",  llm-compressor's FP8 /
//!  "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float",   FP8_DYNAMIC / FP8_BLOCK
//!                                      "strategy": "tensor" | "channel" | "block",
//!                                      "block_structure": [128, 128]}}}}
//!     X.weight            F8_E4M3 [out, in]
//!     X.weight_scale      F32 / BF16 / F16: [1] (tensor), [out, 1] (channel), [⌈out/b⌉, ⌈in/b⌉]
//!     X.input_scale       (static activation scales: not needed for the weights, not read)
//! ```
//! The activation scheme (`activation_scheme`; `input_activations`) is read into
//! [`Fp8Activations`]: dynamic per-token and per-group schemes become the model's
//! `ModelSpec::act_quant`; per-tensor and static ones run weight-only (said at load).
//!
//! In both, `w = decode(q) · s` (DeepSeek's "scale_inv" is the multiplier, like
//! compressed-tensors' "scale"). Which scale a weight has is read from the scale tensor's shape
//! and checked against the config's block size; any mismatch is an error naming the tensor.

use std::path::Path;

use serde_json::Value as Json;

use super::fp8::{Fp8Scales, Fp8Weight};
use crate::error::{Error, Result};

/// What config.json says about an FP8 checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fp8Config {
    /// The `[rows, cols]` of a scale block, when the config names one.
    pub block: Option<(usize, usize)>,
    /// How the checkpoint's authors quantized the activations entering its FP8 linears.
    pub activations: Fp8Activations,
}

/// The activation scheme an FP8 checkpoint was made for (`fp8`'s `activation_scheme`,
/// compressed-tensors' `input_activations`). The dynamic per-token and per-group schemes run
/// as the checkpoint asks ([`Fp8Activations::act_quant`]: `ops::act_quant`); the others with
/// f32 activations (W8A16: `w = decode(q) · s` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fp8Activations {
    /// No activation quantization (compressed-tensors without `input_activations`).
    #[default]
    WeightOnly,
    /// Quantized at run time: one scale per token, per tensor, or per group of `n` inputs.
    DynamicToken,
    DynamicTensor,
    DynamicGroup(usize),
    /// Quantized by scales stored with the weights (`input_scale`).
    Static,
}

impl Fp8Activations {
    /// Whether the checkpoint quantizes its activations too (W8A8).
    pub fn w8a8(self) -> bool {
        self != Fp8Activations::WeightOnly
    }
    /// The dynamic schemes the reference (and the device) run: per token, per group. Per
    /// tensor (a scale over the whole batch: results would depend on what runs beside a
    /// sequence) and static scales run weight-only.
    pub fn act_quant(self) -> Option<crate::ops::act_quant::ActQuant> {
        use crate::ops::act_quant::ActQuant;
        match self {
            Fp8Activations::DynamicToken => Some(ActQuant::Token),
            Fp8Activations::DynamicGroup(n) => Some(ActQuant::Group(n)),
            _ => None,
        }
    }
    pub fn describe(self) -> String {
        match self {
            Fp8Activations::WeightOnly => "weight-only (activations unquantized)".into(),
            Fp8Activations::DynamicToken => "W8A8, activations quantized per token at run time".into(),
            Fp8Activations::DynamicTensor => "W8A8, activations quantized per tensor at run time".into(),
            Fp8Activations::DynamicGroup(n) => format!("W8A8, activations quantized per {n} inputs at run time"),
            Fp8Activations::Static => "W8A8, activations quantized by stored scales (input_scale)".into(),
        }
    }
}

/// A compressed-tensors quantization-args object (`weights`, `input_activations`: `what`) of
/// 8-bit floats, or an error at `key` saying what it holds instead.
fn require_fp8(path: &Path, key: &str, what: &str, args: &Json) -> Result<()> {
    let (bits, ty) = (args.get("num_bits").and_then(Json::as_u64), args.get("type").and_then(Json::as_str));
    if bits != Some(8) || ty != Some("float") {
        return Err(Error::key(
            path,
            key,
            format!("{what} of {} bits, type {}: only 8-bit float (FP8) is supported", bits.map_or("?".into(), |b| b.to_string()), ty.unwrap_or("?")),
        ));
    }
    Ok(())
}

/// compressed-tensors' `input_activations` of group `g` (`v`, absent or null: weight-only).
fn ct_activations(path: &Path, g: &str, v: Option<&Json>) -> Result<Fp8Activations> {
    let Some(a) = v.filter(|a| !a.is_null()) else { return Ok(Fp8Activations::WeightOnly) };
    let k = |s: &str| format!("quantization_config.config_groups.{g}.input_activations.{s}");
    require_fp8(path, &k("type"), "activations", a)?;
    if a.get("dynamic").and_then(Json::as_bool) != Some(true) {
        return Ok(Fp8Activations::Static);
    }
    Ok(match a.get("strategy").and_then(Json::as_str) {
        Some("token") => Fp8Activations::DynamicToken,
        Some("tensor") => Fp8Activations::DynamicTensor,
        Some("group") => match a.get("group_size").and_then(Json::as_u64) {
            Some(n) if n > 0 => Fp8Activations::DynamicGroup(n as usize),
            _ => return Err(Error::key(path, k("group_size"), "missing or not a positive integer for strategy `group`")),
        },
        s => return Err(Error::key(path, k("strategy"), format!("{s:?}: dynamic FP8 activations per token, tensor or group are supported"))),
    })
}

/// Whether `quant_method` is one this module reads (the caller's own schemes do not apply).
pub fn is_fp8_method(method: &str) -> bool {
    matches!(method, "fp8" | "compressed-tensors")
}

fn pair(path: &Path, key: &str, v: &Json) -> Result<(usize, usize)> {
    match v.as_array().map(|a| a.iter().map(Json::as_u64).collect::<Vec<_>>()).as_deref() {
        Some([Some(r), Some(c)]) if *r > 0 && *c > 0 => Ok((*r as usize, *c as usize)),
        _ => Err(Error::key(path, key, format!("{v} is not a pair of positive integers"))),
    }
}

/// The FP8 settings of `quantization_config` `q` (from `path`), or an error naming the key
/// for a compressed-tensors scheme that is not 8-bit float weights.
pub fn parse(path: &Path, q: &Json) -> Result<Option<Fp8Config>> {
    let key = |k: &str| format!("quantization_config.{k}");
    match q.get("quant_method").and_then(Json::as_str) {
        Some("fp8") => {
            if let Some(f) = q.get("fmt").and_then(Json::as_str).filter(|f| *f != "e4m3") {
                return Err(Error::key(path, key("fmt"), format!("FP8 format `{f}` is not supported (e4m3 is)")));
            }
            let block = match q.get("weight_block_size").filter(|v| !v.is_null()) {
                Some(v) => Some(pair(path, &key("weight_block_size"), v)?),
                None => None,
            };
            // transformers' default is dynamic; with blocks, per group of a block's columns
            // (DeepSeek-V3's 1 × 128), else per tensor (vLLM's `Fp8LinearMethod`).
            let activations = match q.get("activation_scheme").and_then(Json::as_str) {
                None | Some("dynamic") => block.map_or(Fp8Activations::DynamicTensor, |(_, c)| Fp8Activations::DynamicGroup(c)),
                Some("static") => Fp8Activations::Static,
                Some(s) => return Err(Error::key(path, key("activation_scheme"), format!("`{s}`: dynamic or static"))),
            };
            Ok(Some(Fp8Config { block, activations }))
        }
        Some("compressed-tensors") => {
            let groups =
                q.get("config_groups").and_then(Json::as_object).ok_or_else(|| Error::key(path, key("config_groups"), "missing or not an object"))?;
            let mut block = None;
            let mut activations = None;
            for (g, v) in groups {
                let a = ct_activations(path, g, v.get("input_activations"))?;
                if activations.is_some_and(|b| b != a) {
                    return Err(Error::key(
                        path,
                        key(&format!("config_groups.{g}.input_activations")),
                        "differs from another group's: one activation scheme a checkpoint",
                    ));
                }
                activations = Some(a);
                let k = |s: &str| key(&format!("config_groups.{g}.weights.{s}"));
                let w = v.get("weights").ok_or_else(|| Error::key(path, key(&format!("config_groups.{g}.weights")), "missing"))?;
                require_fp8(path, &k("type"), "compressed-tensors weights", w)?;
                match w.get("strategy").and_then(Json::as_str) {
                    Some("tensor" | "channel") => {}
                    Some("block") => block = Some(pair(path, &k("block_structure"), w.get("block_structure").unwrap_or(&Json::Null))?),
                    s => {
                        return Err(Error::key(path, k("strategy"), format!("{s:?}: FP8 weights with tensor, channel or block scales are supported")))
                    }
                }
            }
            Ok(Some(Fp8Config { block, activations: activations.unwrap_or_default() }))
        }
        _ => Ok(None),
    }
}

/// `X.weight_scale_inv`: where an `fp8` checkpoint (and `tandem quantize --format fp8`) stores the
/// scales of FP8 weight `name`.
pub fn scale_inv_key(name: &str) -> String {
    format!("{name}_scale_inv")
}

/// The scale key of FP8 weight `name` in a checkpoint holding `has`: `X.weight_scale_inv` or
/// `X.weight_scale`.
pub fn scale_key(name: &str, has: impl Fn(&str) -> bool) -> Option<String> {
    [scale_inv_key(name), format!("{name}_scale")].into_iter().find(|k| has(k))
}

/// The granularity of scales of shape `scale_shape` for a `[out, in_dim]` weight.
pub fn granularity(cfg: Fp8Config, out: usize, in_dim: usize, scale_shape: &[usize]) -> std::result::Result<Fp8Scales, String> {
    let n: usize = scale_shape.iter().product();
    match (scale_shape, cfg.block) {
        (_, None) if n == 1 => Ok(Fp8Scales::Tensor),
        ([o] | [o, 1], None) if *o == out => Ok(Fp8Scales::Channel),
        ([a, b], Some((r, c))) if *a == out.div_ceil(r) && *b == in_dim.div_ceil(c) => Ok(Fp8Scales::Block { rows: r, cols: c }),
        (_, Some((r, c))) if n == 1 && out <= r && in_dim <= c => Ok(Fp8Scales::Block { rows: r, cols: c }),
        (s, b) => Err(match b {
            Some((r, c)) => format!(
                "scales of shape {s:?} do not fit a [{out}, {in_dim}] weight in {r} × {c} blocks (want [{}, {}])",
                out.div_ceil(r),
                in_dim.div_ceil(c)
            ),
            None => {
                format!("scales of shape {s:?} are neither per tensor ([1]) nor per channel ([{out}] / [{out}, 1]) for a [{out}, {in_dim}] weight")
            }
        }),
    }
}

/// The [`Fp8Weight`] of stored codes `codes` (`[out, in_dim]`) with scales `scales` of shape
/// `scale_shape`; `name` names the tensor in every error.
pub fn weight(cfg: Fp8Config, name: &str, shape: &[usize], codes: &[u8], scale_shape: &[usize], scales: Vec<f32>) -> Result<Fp8Weight> {
    let [out, in_dim] = shape else {
        return Err(Error::Input(format!("{name}: FP8 tensor of shape {shape:?} is not a matrix")));
    };
    let g = granularity(cfg, *out, *in_dim, scale_shape).map_err(|m| Error::Input(format!("{name}: {m}")))?;
    Fp8Weight::from_parts(name, *out, *in_dim, codes.to_vec(), scales, g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(q: Json) -> Result<Option<Fp8Config>> {
        parse(Path::new("config.json"), &q)
    }

    fn ct(acts: Json) -> Json {
        serde_json::json!({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}, "input_activations": acts}}})
    }

    #[test]
    fn activation_schemes_are_read() {
        let fp8 = |extra: Json| {
            let mut q = serde_json::json!({"quant_method": "fp8"});
            if let (Some(o), Some(e)) = (q.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            parsed(q).expect("parses").expect("fp8").activations
        };
        assert_eq!(fp8(serde_json::json!({})), Fp8Activations::DynamicTensor);
        assert_eq!(fp8(serde_json::json!({"weight_block_size": [128, 128]})), Fp8Activations::DynamicGroup(128));
        assert_eq!(fp8(serde_json::json!({"activation_scheme": "static"})), Fp8Activations::Static);
        let act = |a: Json| parsed(ct(a)).expect("parses").expect("fp8").activations;
        assert_eq!(act(Json::Null), Fp8Activations::WeightOnly);
        let dynamic = |s: &str| serde_json::json!({"num_bits": 8, "type": "float", "dynamic": true, "strategy": s, "group_size": 64});
        assert_eq!(act(dynamic("token")), Fp8Activations::DynamicToken);
        assert_eq!(act(dynamic("tensor")), Fp8Activations::DynamicTensor);
        assert_eq!(act(dynamic("group")), Fp8Activations::DynamicGroup(64));
        assert_eq!(act(serde_json::json!({"num_bits": 8, "type": "float", "dynamic": false, "strategy": "tensor"})), Fp8Activations::Static);
        assert!(act(dynamic("token")).w8a8() && !act(Json::Null).w8a8());
        // What runs: per token and per group; per tensor and static scales run weight-only.
        use crate::ops::act_quant::ActQuant;
        assert_eq!(act(dynamic("token")).act_quant(), Some(ActQuant::Token));
        assert_eq!(act(dynamic("group")).act_quant(), Some(ActQuant::Group(64)));
        assert_eq!(act(dynamic("tensor")).act_quant(), None);
        assert_eq!(Fp8Activations::Static.act_quant(), None);
    }

    #[test]
    fn bad_activation_schemes_name_the_key() {
        let err = |q: Json| parsed(q).expect_err("refused").to_string();
        let e = err(serde_json::json!({"quant_method": "fp8", "activation_scheme": "sometimes"}));
        assert!(e.contains("quantization_config.activation_scheme"), "{e}");
        let e = err(ct(serde_json::json!({"num_bits": 8, "type": "int", "dynamic": true, "strategy": "token"})));
        assert!(e.contains("config_groups.group_0.input_activations.type"), "{e}");
        let e = err(ct(serde_json::json!({"num_bits": 8, "type": "float", "dynamic": true, "strategy": "group"})));
        assert!(e.contains("input_activations.group_size"), "{e}");
        let e = err(ct(serde_json::json!({"num_bits": 8, "type": "float", "dynamic": true, "strategy": "channel"})));
        assert!(e.contains("input_activations.strategy"), "{e}");
    }
}
