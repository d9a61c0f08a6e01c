#!/usr/bin/env python3
"""Write a synthetic FP8 checkpoint at the real shape of Llama-3.1-8B as llm-compressor's
FP8_DYNAMIC writes it (what vLLM users deploy): an HF directory with compressed-tensors'
`quantization_config` (weights E4M3 with a BF16 scale per output channel, activations
quantized per token at run time), q/k/v/o and gate/up/down F8_E4M3, the embedding, norms and
lm_head BF16. Random weights (one draw per shape, reused across layers: a minute, not an
hour); the output is noise, the timing is what counts. For speed runs on the GPU machine
(torch there):

    python3 scripts/synth_fp8_hf.py /tmp/llama3.1-8b-fp8
    tandem bench --model /tmp/llama3.1-8b-fp8 --device cuda --prompt-lens 512 --batches 1,64
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

# Llama-3.1-8B's config.json (the fields tandem and transformers read).
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True},
            }
        },
        "ignore": ["lm_head"],
    },
}


def fp8(out, inn, gen):
    """A random N(0, 1/in) weight quantized per channel: (codes, BF16 scales [out, 1])."""
    w = torch.randn(out, inn, generator=gen) / inn**0.5
    s = (w.abs().amax(dim=1, keepdim=True) / 448.0).clamp(min=2.0**-126).to(torch.bfloat16)
    return (w / s.float()).clamp(-448, 448).to(torch.float8_e4m3fn), s


def main(out_dir):
    c = CONFIG
    C, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    H, Hkv, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    gen = torch.Generator().manual_seed(0)
    shapes = {"q_proj": (H * D, C), "k_proj": (Hkv * D, C), "v_proj": (Hkv * D, C), "o_proj": (C, H * D), "gate_proj": (F, C), "up_proj": (F, C), "down_proj": (C, F)}
    drawn = {k: fp8(o, i, gen) for k, (o, i) in shapes.items()}
    t = {
        "model.embed_tokens.weight": (torch.randn(V, C, generator=gen) * 0.02).to(torch.bfloat16),
        "lm_head.weight": (torch.randn(V, C, generator=gen) / C**0.5).to(torch.bfloat16),
        "model.norm.weight": torch.ones(C, dtype=torch.bfloat16),
    }
    for layer in range(L):
        p = f"model.layers.{layer}"
        t[f"{p}.input_layernorm.weight"] = torch.ones(C, dtype=torch.bfloat16)
        t[f"{p}.post_attention_layernorm.weight"] = torch.ones(C, dtype=torch.bfloat16)
        for k, (q, s) in drawn.items():
            mod = "self_attn" if k in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            t[f"{p}.{mod}.{k}.weight"] = q.clone()
            t[f"{p}.{mod}.{k}.weight_scale"] = s.clone()
    os.makedirs(out_dir, exist_ok=True)
    save_file(t, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    print(f"{out_dir}: {len(t)} tensors, {sum(x.numel() * x.element_size() for x in t.values()) / 1e9:.2f} GB")


if __name__ == "__main__":
    main(sys.argv[1])
