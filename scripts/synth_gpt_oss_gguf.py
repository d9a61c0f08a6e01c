#!/usr/bin/env python3
"""Write a synthetic GPT-OSS GGUF (random weights in gpt-oss-20b's / -120b's shape) that
llama.cpp and tandem both load, for side-by-side speed runs on the GPU machine.

    PYTHONPATH=/work/shared/peers/llama.cpp/gguf-py python3 scripts/synth_gpt_oss_gguf.py \\
        --shape 20b --out /tmp/gpt-oss-20b-synth.gguf
    llama-bench -m /tmp/gpt-oss-20b-synth.gguf -p 512 -n 128
    tandem bench --model /tmp/gpt-oss-20b-synth.gguf --device cuda

Needs numpy and gguf-py (the one shipped with llama.cpp). The layout is llama.cpp's
(`src/models/openai-moe.cpp`) and tandem's reader (`reference/src/gpt_oss/{config,loader}.rs`):
`general.architecture = gpt-oss`, keys `gpt-oss.*`, tensors `token_embd`, `output_norm`,
`output`, `blk.N.{attn_norm, post_attention_norm, attn_{q,k,v,output}(+bias), attn_sinks,
ffn_gate_inp(+bias), ffn_{gate,up,down}_exps(+bias)}`; experts in ggml MXFP4 (type 39: 17-byte
blocks {e8m0 scale; 16 bytes of nibbles} of 32 values), dense matrices BF16 (or --dense f16 /
f32), norms, biases and sinks F32.

Weights are random but sized like trained ones: dense matrices N(0, 1/fan_in); MXFP4 experts
with uniformly random nibbles and one power-of-two scale chosen so each row's RMS is about
1/sqrt(fan_in) (random codes, not a quantized Gaussian: 19 billion values are written in
minutes, and the MXFP4 arithmetic is the same). The output is therefore noise; the timing is
what counts. Without --tokenizer the GGUF has no vocabulary (`tokenizer.ggml.model = none`,
`gpt-oss.vocab_size` = 201088: llama.cpp runs it on token ids, e.g. llama-bench); with
--tokenizer PATH/o200k_base.tiktoken (tiktoken-rs bundles one: `~/.cargo/registry/src/*/
tiktoken-rs-*/assets/`) it gets o200k_harmony as a GPT-2 BPE vocabulary (`pre = gpt-4o`)
so llama-cli can take text. tandem always tokenizes with its built-in o200k_harmony.

`--shape tiny` writes a 2-layer model of width 64 with the full o200k vocabulary (~100 MB),
for trying the tool chain on a small machine.
"""

import argparse
import base64
import hashlib
import sys
import time

import numpy as np

try:
    import gguf
except ImportError:  # the copy next to llama.cpp
    sys.path.insert(0, "/work/shared/peers/llama.cpp/gguf-py")
    import gguf

from gguf import GGMLQuantizationType as Q

VOCAB = 201_088
SHAPES = {
    # layers, experts; the rest is shared (HF config.json of openai/gpt-oss-20b / -120b).
    "20b": dict(layers=24, experts=32, k=4, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880),
    "120b": dict(layers=36, experts=128, k=4, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880),
    "tiny": dict(layers=2, experts=4, k=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=64),
}
# Specials of o200k_harmony (ids ≥ 199998; the rest are <|reserved_N|>).
SPECIALS = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
    200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>",
    200012: "<|call|>", 200018: "<|endofprompt|>",
}
BLOCK, BLOCK_BYTES = 32, 17


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A generator per tensor: the same file for the same seed, whatever the write order."""
    h = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def dense(seed, name, shape, fan_in, dtype):
    """N(0, 1/fan_in) as `dtype` ('bf16' as uint16 bit patterns, rounded to nearest even)."""
    x = rng_for(seed, name).standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))
    if dtype == "f32":
        return x, None
    if dtype == "f16":
        return x.astype(np.float16), None
    b = x.view(np.uint32)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return b, Q.BF16


def vector(seed, name, n, scale, offset=0.0):
    return (offset + scale * rng_for(seed, name).uniform(-1.0, 1.0, n)).astype(np.float32)


def mxfp4_experts(seed, name, experts, out, inp):
    """[experts, out, inp] in ggml MXFP4 bytes, shape [experts, out, inp/32·17] (uint8).

    Uniform nibbles have mean square (Σ e2m1²)/16 = 8.5625 (e2m1 = 0, .5, 1, 1.5, 2, 3, 4, 6 and
    negatives), so a scale 2^s gives RMS 2^s·2.93; s = round(log2(1/(2.93·sqrt(inp)))) makes it
    ~1/sqrt(inp). ggml's byte e means 2^(e − 128) on the doubled table: the OCP scale byte."""
    r = rng_for(seed, name)
    s = int(round(np.log2(1.0 / (np.sqrt(8.5625) * np.sqrt(inp)))))
    blocks = np.empty((experts, out, inp // BLOCK, BLOCK_BYTES), dtype=np.uint8)
    blocks[..., 0] = 127 + s
    for e in range(experts):  # one expert at a time: bounded memory
        blocks[e, :, :, 1:] = r.integers(0, 256, (out, inp // BLOCK, BLOCK_BYTES - 1), dtype=np.uint8)
    return blocks.reshape(experts, out, inp // BLOCK * BLOCK_BYTES)


def bytes_to_unicode():
    """GPT-2's byte → printable character map (what BPE vocabularies in GGUF are written in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def o200k_vocab(path):
    """(tokens, token types, merges) of o200k_harmony from an o200k_base.tiktoken file: the
    199,998 ranks as GPT-2 byte strings, the specials as control tokens, and merges derived
    from the ranks as HF's TikTokenConverter does."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()
    text = lambda b: "".join(b2u[x] for x in b)
    tokens = [""] * VOCAB
    types = [1] * VOCAB
    for b, r in ranks.items():
        tokens[r] = text(b)
    for i in range(len(ranks), VOCAB):
        tokens[i] = SPECIALS.get(i, f"<|reserved_{i}|>")
        types[i] = 3
    merges = []
    for b, r in ranks.items():
        local = [(b[:i], b[i:]) for i in range(1, len(b)) if b[:i] in ranks and b[i:] in ranks]
        local.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
        merges.extend((r, f"{text(lp)} {text(rp)}") for lp, rp in local)
    merges.sort(key=lambda m: m[0])
    return tokens, types, [m for _, m in merges]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="20b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dense", choices=["bf16", "f16", "f32"], default="bf16", help="storage of the dense matrices")
    ap.add_argument("--ctx", type=int, default=131_072, help="context_length")
    ap.add_argument("--tokenizer", help="o200k_base.tiktoken: write o200k_harmony as the GGUF's vocabulary")
    a = ap.parse_args()
    sh = SHAPES[a.shape]
    L, E, C, H, HKV, D, F = (sh[k] for k in ("layers", "experts", "hidden", "heads", "kv_heads", "head_dim", "ffn"))
    qd, kvd = H * D, HKV * D

    w = gguf.GGUFWriter(a.out, "gpt-oss")
    w.add_name(f"gpt-oss-{a.shape} (synthetic, seed {a.seed})")
    w.add_file_type(38)  # MOSTLY_MXFP4_MOE
    w.add_quantization_version(2)
    k = lambda s: f"gpt-oss.{s}"
    for key, v in [("block_count", L), ("context_length", a.ctx), ("embedding_length", C), ("feed_forward_length", F),
                   ("expert_feed_forward_length", F), ("expert_count", E), ("expert_used_count", sh["k"]),
                   ("attention.head_count", H), ("attention.head_count_kv", HKV), ("attention.key_length", D),
                   ("attention.value_length", D), ("attention.sliding_window", 128), ("vocab_size", VOCAB),
                   ("rope.scaling.original_context_length", 4096)]:
        w.add_uint32(k(key), v)
    for key, v in [("attention.layer_norm_rms_epsilon", 1e-5), ("rope.freq_base", 150_000.0), ("rope.scaling.factor", 32.0),
                   ("rope.scaling.yarn_beta_fast", 32.0), ("rope.scaling.yarn_beta_slow", 1.0)]:
        w.add_float32(k(key), v)
    w.add_string(k("rope.scaling.type"), "yarn")
    if a.tokenizer:
        t0 = time.time()
        tokens, types, merges = o200k_vocab(a.tokenizer)
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", "gpt-4o")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_array("tokenizer.ggml.merges", merges)
        print(f"o200k_harmony: {len(tokens)} tokens, {len(merges)} merges ({time.time() - t0:.1f} s)", file=sys.stderr)
    else:
        w.add_string("tokenizer.ggml.model", "none")
    for key, v in [("eos_token_id", 200002), ("padding_token_id", 199999)]:
        w.add_uint32(f"tokenizer.ggml.{key}", v)

    # (name, producer of the array, raw dtype) in file order; arrays are made when written.
    plan = [("token_embd.weight", lambda: dense(a.seed, "token_embd", (VOCAB, C), 1, a.dense))]
    for l in range(L):
        b = f"blk.{l}"
        plan += [
            (f"{b}.attn_norm.weight", lambda b=b: (vector(a.seed, b + "an", C, 0.1, 1.0), None)),
            (f"{b}.attn_q.weight", lambda b=b: dense(a.seed, b + "q", (qd, C), C, a.dense)),
            (f"{b}.attn_q.bias", lambda b=b: (vector(a.seed, b + "bq", qd, 0.1), None)),
            (f"{b}.attn_k.weight", lambda b=b: dense(a.seed, b + "k", (kvd, C), C, a.dense)),
            (f"{b}.attn_k.bias", lambda b=b: (vector(a.seed, b + "bk", kvd, 0.1), None)),
            (f"{b}.attn_v.weight", lambda b=b: dense(a.seed, b + "v", (kvd, C), C, a.dense)),
            (f"{b}.attn_v.bias", lambda b=b: (vector(a.seed, b + "bv", kvd, 0.1), None)),
            (f"{b}.attn_output.weight", lambda b=b: dense(a.seed, b + "o", (C, qd), qd, a.dense)),
            (f"{b}.attn_output.bias", lambda b=b: (vector(a.seed, b + "bo", C, 0.1), None)),
            (f"{b}.attn_sinks.weight", lambda b=b: (vector(a.seed, b + "s", H, 1.0), None)),
            (f"{b}.post_attention_norm.weight", lambda b=b: (vector(a.seed, b + "fn", C, 0.1, 1.0), None)),
            (f"{b}.ffn_gate_inp.weight", lambda b=b: (dense(a.seed, b + "r", (E, C), C, "f32")[0], None)),
            (f"{b}.ffn_gate_inp.bias", lambda b=b: (vector(a.seed, b + "br", E, 0.1), None)),
        ]
        for part, (out, inp) in [("gate", (F, C)), ("up", (F, C)), ("down", (C, F))]:
            name = f"{b}.ffn_{part}_exps"
            plan.append((f"{name}.weight", lambda name=name, out=out, inp=inp: (mxfp4_experts(a.seed, name, E, out, inp), Q.MXFP4)))
            plan.append((f"{name}.bias", lambda name=name, out=out: (vector(a.seed, name + "b", E * out, 0.1).reshape(E, out), None)))
    plan += [
        ("output_norm.weight", lambda: (vector(a.seed, "output_norm", C, 0.1, 1.0), None)),
        ("output.weight", lambda: dense(a.seed, "output", (VOCAB, C), C, a.dense)),
    ]

    # Tensor infos first (shapes and byte counts without making the arrays), then the data,
    # one tensor at a time.
    def info(name):
        if name.endswith("_exps.weight"):
            part = name.split(".ffn_")[1].split("_")[0]
            out, inp = (C, F) if part == "down" else (F, C)
            return (E, out, inp // BLOCK * BLOCK_BYTES), np.uint8, E * out * inp // BLOCK * BLOCK_BYTES, Q.MXFP4
        shapes = {"token_embd.weight": (VOCAB, C), "output.weight": (VOCAB, C), "output_norm.weight": (C,)}
        s = name.rsplit(".", 2)
        kind = ".".join(s[1:]) if name.startswith("blk.") else name
        shape = shapes.get(name) or {
            "attn_norm.weight": (C,), "post_attention_norm.weight": (C,), "attn_q.weight": (qd, C), "attn_q.bias": (qd,),
            "attn_k.weight": (kvd, C), "attn_k.bias": (kvd,), "attn_v.weight": (kvd, C), "attn_v.bias": (kvd,),
            "attn_output.weight": (C, qd), "attn_output.bias": (C,), "attn_sinks.weight": (H,), "ffn_gate_inp.weight": (E, C),
            "ffn_gate_inp.bias": (E,), "ffn_gate_exps.bias": (E, F), "ffn_up_exps.bias": (E, F), "ffn_down_exps.bias": (E, C),
        }[kind]
        matrix = len(shape) == 2 and not kind.endswith(".bias") and kind != "ffn_gate_inp.weight"
        if matrix and a.dense == "bf16":
            return shape, np.uint16, int(np.prod(shape)) * 2, Q.BF16
        if matrix and a.dense == "f16":
            return shape, np.float16, int(np.prod(shape)) * 2, None
        return shape, np.float32, int(np.prod(shape)) * 4, None

    for name, _ in plan:
        shape, dt, nbytes, raw = info(name)
        w.add_tensor_info(name, shape, np.dtype(dt), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t0 = time.time()
    for i, (name, make) in enumerate(plan):
        arr, _ = make()
        w.write_tensor_data(np.ascontiguousarray(arr))
        if i % 16 == 0 or i + 1 == len(plan):
            print(f"\r{i + 1}/{len(plan)} tensors ({time.time() - t0:.0f} s)", end="", file=sys.stderr)
    print(file=sys.stderr)
    w.close()
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
