//! Phi-3 / 3.5 / 4 (HF `phi3`, GGUF `phi3`): Llama with fused `qkv_proj` and `gate_up_proj`
//! (split at load) and partial rotary (`partial_rotary_factor`: RoPE on the first R features
//! of each head). `longrope` scaling is refused.

use crate::config::RopeLayout;
use crate::error::{Error, Result};

use super::common::{gguf_window, hf_window, require_act, Base};
use super::read::{GgufMeta, HfConfig};
use super::spec::{Fused, ModelSpec};

const FUSED: Fused = Fused { qkv: true, gate_up: true };

pub fn from_hf(c: &HfConfig) -> Result<ModelSpec> {
    require_act(c, "hidden_act", "silu")?;
    let b = Base::from_hf(c, false)?;
    let window = hf_window(c)?;
    let mut spec = b.spec("phi3", b.layers(|_| window));
    spec.fused = FUSED;
    Ok(spec)
}

pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    if m.g.tensor_info("rope_factors_long.weight").is_some() {
        return Err(Error::tensor(&m.g.path, "rope_factors_long.weight", "longrope RoPE scaling is not supported"));
    }
    let b = Base::from_gguf(m, RopeLayout::HalfSplit)?;
    let window = gguf_window(m)?;
    let mut spec = b.spec(m.arch, b.layers(|_| window));
    spec.fused = FUSED;
    Ok(spec)
}
