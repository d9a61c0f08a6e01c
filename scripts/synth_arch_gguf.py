#!/usr/bin/env python3
"""Write a synthetic GGUF at the real shape of a model people run (random weights), that
llama.cpp and tandem both load, for side-by-side speed runs on the GPU machine.

    PYTHONPATH=/work/shared/peers/llama.cpp/gguf-py python3 scripts/synth_arch_gguf.py \\
        qwen3-8b q8_0 /tmp/qwen3-8b-q8_0.gguf
    llama-bench -m /tmp/qwen3-8b-q8_0.gguf -p 512 -n 128
    tandem bench --model /tmp/qwen3-8b-q8_0.gguf --device cuda

SHAPE is one of SHAPES below (hyper-parameters from each model's HF config.json); TYPE is f16,
q8_0, q4_0, q4_k_m (random k-quant blocks in llama-quantize's Q4_K_M mix), or q3_k, q2_k,
iq4_xs (random blocks of that one type) for the linear weights (the token embedding stays f16, norms / biases / routers
f32, as the converter writes them). Qwen3-30B-A3B in f16 is 61 GB: use q8_0 or q4_0.

The metadata is the converter's own: every non-tokenizer key of the tiny checkpoint of the same
architecture (`reference/tests/fixtures/tiny/<arch>/model.gguf`, written by llama.cpp's
convert_hf_to_gguf.py) is copied, and the keys that carry a shape are set to the real model's.
Llama-3.1's llama3 RoPE scaling is the `rope_freqs` tensor the converter computes. The
vocabulary is SmolLM2's 49,152-token BPE (../shared/peers/smollm2_tokenizer.json, as
synth_gguf.py uses), padded with unused tokens to the real vocabulary size, so the embedding
and the lm_head have their real cost. Linear weights are N(0, 1/fan_in) and reused across
layers (one draw per shape: minutes, not hours); the output is noise, the timing is what counts.
"""

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # the copy next to llama.cpp
    sys.path.insert(0, "/work/shared/peers/llama.cpp/gguf-py")
    import gguf

from gguf import GGMLQuantizationType as Q

REPO = Path(__file__).resolve().parent.parent

# arch (tiny fixture, GGUF architecture), C, F, L, H, Hkv, D, V, extra
SHAPES = {
    "llama3.1-8b": ("llama3", "llama", 4096, 14336, 32, 32, 8, 128, 128256,
                    {"theta": 500000.0, "llama3": (8.0, 1.0, 4.0, 8192), "ctx": 131072, "eps": 1e-5}),
    "llama3.1-70b": ("llama3", "llama", 8192, 28672, 80, 64, 8, 128, 128256,
                     {"theta": 500000.0, "llama3": (8.0, 1.0, 4.0, 8192), "ctx": 131072, "eps": 1e-5}),
    "qwen2.5-7b": ("qwen2", "qwen2", 3584, 18944, 28, 28, 4, 128, 152064,
                   {"theta": 1000000.0, "ctx": 32768, "bias": True}),
    "qwen3-8b": ("qwen3", "qwen3", 4096, 12288, 36, 32, 8, 128, 151936,
                 {"theta": 1000000.0, "ctx": 40960, "qk_norm": True}),
    "qwen3-30b-a3b": ("qwen3_moe", "qwen3moe", 2048, 6144, 48, 32, 4, 128, 151936,
                      {"theta": 1000000.0, "ctx": 40960, "qk_norm": True, "experts": (128, 8, 768)}),
    # Qwen3-30B-A3B's structure (128 experts, top 8, q/k norms, GQA 8:1, untied head) at a
    # width a CPU runs: the load and MoE paths of the real shape, checked on wgpu over lavapipe.
    "qwen3-moe-narrow": ("qwen3_moe", "qwen3moe", 256, 768, 4, 8, 1, 32, 49152,
                         {"theta": 1000000.0, "ctx": 4096, "qk_norm": True, "experts": (128, 8, 128)}),
    "gemma3-12b": ("gemma3", "gemma3", 3840, 15360, 48, 16, 8, 256, 262208,
                   {"theta": 1000000.0, "ctx": 131072, "qk_norm": True, "post_norms": True,
                    "window": 1024, "tied": True}),
}

TYPES = {"f16": (Q.F16, 1), "q8_0": (Q.Q8_0, 7), "q4_0": (Q.Q4_0, 2), "q4_k_m": (Q.Q4_K, 15),
         "q3_k": (Q.Q3_K, 12), "q2_k": (Q.Q2_K, 10), "iq4_xs": (Q.IQ4_XS, 30)}
# Types whose blocks are drawn at random (gguf-py has no quantizer for them).
RANDOM_BLOCKS = (Q.Q4_K, Q.Q6_K, Q.Q3_K, Q.Q2_K, Q.IQ4_XS)


def use_more_bits(i: int, n: int) -> bool:
    """llama-quantize's choice of the layers whose attn_v / ffn_down a Q4_K_M keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def kquant_blocks(rng, qt, rows: int, cols: int) -> np.ndarray:
    """Random blocks of `qt` (`RANDOM_BLOCKS`; `rows` × `cols` values; random codes and sub-block
    scales, a fixed f16 d sized so that weights are about N(0, 1/cols)): gguf-py has no k-quant
    quantizer, and a Q4_K_M's speed depends on its types and shapes, not on its values."""
    nb = rows * (cols // 256)
    if qt == Q.Q4_K:
        b = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
        d = np.float16(0.9 / np.sqrt(cols) / (31 * 7.5))
        hdr = np.array([d, d * np.float16(4)], dtype=np.float16).view(np.uint8)
        b[:, 0:4] = hdr
    elif qt == Q.Q6_K:  # ql, qh, int8 scales in [-16, 16), d
        b = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
        b[:, 192:208] = rng.integers(-16, 16, size=(nb, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = np.array([np.float16(1.7 / np.sqrt(cols) / (8 * 18))], dtype=np.float16).view(np.uint8)
    elif qt == Q.Q3_K:  # hmask, qs, 12 scale bytes, d: x = d·(s − 32)·(q − 4..3)
        b = rng.integers(0, 256, size=(nb, 110), dtype=np.uint8)
        b[:, 108:110] = np.array([np.float16(1.0 / np.sqrt(cols) / (18 * 2.3))], dtype=np.float16).view(np.uint8)
    elif qt == Q.Q2_K:  # 16 scale / min bytes, qs, d, dmin: x = d·sc·q − dmin·m
        b = rng.integers(0, 256, size=(nb, 84), dtype=np.uint8)
        d = np.float16(1.0 / np.sqrt(cols) / (7.5 * 1.5))
        b[:, 80:84] = np.array([d, d * np.float16(0.2)], dtype=np.float16).view(np.uint8)
    else:  # IQ4_XS: d, scales_h, scales_l, nibbles: x = d·(ls − 32)·K[q]
        b = rng.integers(0, 256, size=(nb, 136), dtype=np.uint8)
        b[:, 0:2] = np.array([np.float16(1.0 / np.sqrt(cols) / (18 * 62))], dtype=np.float16).view(np.uint8)
    return b.reshape(rows, -1)


def copy_template_keys(w, arch_dir: str, overrides: dict) -> None:
    """Every non-tokenizer key of the converter's tiny GGUF, with `overrides` applied."""
    r = gguf.GGUFReader(REPO / "reference/tests/fixtures/tiny" / arch_dir / "model.gguf")
    done = set()
    for key, field in r.fields.items():
        if key.startswith(("tokenizer.", "GGUF.", "general.")):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            continue
        value = overrides.get(key, field.contents())
        w.add_key_value(key, value, vtype)
        done.add(key)
    for key, value in overrides.items():
        if key not in done:
            vtype = gguf.GGUFValueType.FLOAT32 if isinstance(value, float) else gguf.GGUFValueType.UINT32
            w.add_key_value(key, value, vtype)


def add_vocab(w, v: int) -> None:
    """SmolLM2's BPE vocabulary padded with unused tokens to `v` entries."""
    path = os.environ.get("TOK_JSON", "/work/shared/peers/smollm2_tokenizer.json")
    tok = json.load(open(path))
    T = gguf.GGUFValueType
    for key, (t, sub, val) in tok.items():
        if key == "tokenizer.chat_template":
            continue
        if key == "tokenizer.ggml.tokens":
            val = val + [f"<|synthetic_pad_{i}|>" for i in range(v - len(val))]
        if key == "tokenizer.ggml.token_type":
            val = val + [5] * (v - len(val))  # UNUSED
        if t == T.ARRAY:
            w.add_array(key, val)
        elif t == T.STRING:
            w.add_string(key, val)
        elif t == T.BOOL:
            w.add_bool(key, val)
        else:
            w.add_uint32(key, val)


def llama3_rope_freqs(d: int, theta: float, factor: float, low: float, high: float, orig: int):
    """The `rope_freqs` divisors convert_hf_to_gguf.py writes for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
    low_wavelen, high_wavelen = orig / low, orig / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def main() -> None:
    shape, typ, out = sys.argv[1], sys.argv[2], sys.argv[3]
    arch_dir, arch, C, F, L, H, Hkv, D, V, x = SHAPES[shape]
    L = int(os.environ.get("SYNTH_LAYERS", L))  # fewer blocks: a quick check of the tool chain
    qt, ftype = TYPES[typ]
    rng = np.random.default_rng(0)
    cache = {}

    def mat(*dims):
        """A weight `dims` (out last-but-one, in last) of N(0, 1/in), quantized to TYPE;
        one draw per shape."""
        return typed(qt, *dims)

    def typed(t, *dims):
        """`mat` in type `t` (a Q4_K_M mixes Q4_K and Q6_K)."""
        if (t, dims) not in cache:
            if t in RANDOM_BLOCKS:
                rows = int(np.prod(dims[:-1]))
                cache[(t, dims)] = (kquant_blocks(rng, t, rows, dims[-1]).reshape(*dims[:-1], -1), t)
            else:
                a = rng.standard_normal(dims, dtype=np.float32) / np.sqrt(dims[-1])
                cache[(t, dims)] = (a.astype(np.float16), None) if t == Q.F16 else (gguf.quants.quantize(a, t), t)
        return cache[(t, dims)]

    def mixed(i, *dims):
        """attn_v / ffn_down of layer `i`: Q6_K in a Q4_K_M's `use_more_bits` layers."""
        return typed(Q.Q6_K if typ == "q4_k_m" and use_more_bits(i, L) else qt, *dims)

    w = gguf.GGUFWriter(out, arch)
    p = f"{arch}."
    overrides = {
        p + "context_length": x["ctx"], p + "embedding_length": C, p + "feed_forward_length": F,
        p + "block_count": L, p + "attention.head_count": H, p + "attention.head_count_kv": Hkv,
        p + "attention.key_length": D, p + "attention.value_length": D, p + "rope.freq_base": x["theta"],
        p + "attention.layer_norm_rms_epsilon": x.get("eps", 1e-6),
    }
    if arch == "llama":
        overrides[p + "rope.dimension_count"] = D
        overrides[p + "vocab_size"] = V
    if "experts" in x:
        e, k, fm = x["experts"]
        overrides.update({p + "expert_count": e, p + "expert_used_count": k, p + "expert_feed_forward_length": fm})
    if "window" in x:
        overrides[p + "attention.sliding_window"] = x["window"]
    copy_template_keys(w, arch_dir, overrides)
    w.add_file_type(ftype)
    add_vocab(w, V)

    def add(name, data):
        arr, raw = data
        w.add_tensor(name, arr, raw_dtype=raw)

    f32 = lambda *dims, value=None: ((np.full(dims, value, np.float32) if value is not None
                                       else (0.1 * rng.standard_normal(dims)).astype(np.float32)), None)
    if "llama3" in x:
        add("rope_freqs.weight", (llama3_rope_freqs(D, x["theta"], *x["llama3"]), None))
    add("token_embd.weight", typed(Q.Q4_K, V, C) if typ == "q4_k_m" else
        ((rng.standard_normal((V, C), dtype=np.float32) * 0.02).astype(np.float16), None))
    for i in range(L):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", f32(C, value=1.0))
        add(b + "attn_q.weight", mat(H * D, C))
        add(b + "attn_k.weight", mat(Hkv * D, C))
        add(b + "attn_v.weight", mixed(i, Hkv * D, C))
        if x.get("bias"):
            for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                add(b + f"attn_{n}.bias", f32(rows))
        if x.get("qk_norm"):
            add(b + "attn_q_norm.weight", f32(D, value=1.0))
            add(b + "attn_k_norm.weight", f32(D, value=1.0))
        add(b + "attn_output.weight", mat(C, H * D))
        if x.get("post_norms"):
            add(b + "post_attention_norm.weight", f32(C, value=1.0))
            add(b + "post_ffw_norm.weight", f32(C, value=1.0))
        add(b + "ffn_norm.weight", f32(C, value=1.0))
        if "experts" in x:
            e, _, fm = x["experts"]
            # f32 as the converter writes routers (NumPy 2 would promote `/ np.sqrt` to f64).
            add(b + "ffn_gate_inp.weight", ((rng.standard_normal((e, C), dtype=np.float32) / np.sqrt(C)).astype(np.float32), None))
            add(b + "ffn_gate_exps.weight", mat(e, fm, C))
            add(b + "ffn_up_exps.weight", mat(e, fm, C))
            add(b + "ffn_down_exps.weight", mat(e, C, fm))
        else:
            add(b + "ffn_gate.weight", mat(F, C))
            add(b + "ffn_up.weight", mat(F, C))
            add(b + "ffn_down.weight", mixed(i, C, F))
    add("output_norm.weight", f32(C, value=1.0))
    if not x.get("tied"):
        add("output.weight", typed(Q.Q6_K, V, C) if typ == "q4_k_m" else mat(V, C))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print("wrote", out, round(os.path.getsize(out) / 1e9, 2), "GB")


if __name__ == "__main__":
    main()
