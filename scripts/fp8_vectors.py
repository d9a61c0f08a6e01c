#!/usr/bin/env python3
"""Test vectors for the reference's FP8 E4M3 (OCP "fn": no infinities, ±448 max, S.1111.111 NaN).

The oracle is ml_dtypes' float8_e4m3fn (the type JAX and, bit for bit, torch.float8_e4m3fn use):
round to nearest, ties to even. The reference saturates out-of-range values to ±448 as CUDA's
__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does; ml_dtypes turns them into NaN, so the
inputs are clipped to [-448, 448] before the oracle casts them (what vLLM does before its cast).

Writes reference/tests/fixtures/fp8_e4m3_vectors.json:
  decode: the f32 value of each of the 256 codes (NaN as null),
  encode: [[f32 bits, code], ...] for ties, neighbours of ties, subnormals, random values and
          out-of-range values.
Run: pip install ml_dtypes numpy; python3 scripts/fp8_vectors.py
"""
import json
import os

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
codes = np.arange(256, dtype=np.uint8)
vals = codes.view(E4M3).astype(np.float32)
decode = [None if np.isnan(v) else float(v) for v in vals]

finite = np.unique(vals[~np.isnan(vals)].astype(np.float64))
mids = (finite[:-1] + finite[1:]) / 2  # exact in f64; every tie is an f32 too
xs = [finite, mids]
m32 = mids.astype(np.float32)
xs += [np.nextafter(m32, np.float32(np.inf)), np.nextafter(m32, np.float32(-np.inf))]
rng = np.random.default_rng(7)
xs += [rng.normal(0, 1, 4000), rng.normal(0, 100, 2000), rng.uniform(-2**-6, 2**-6, 2000), rng.normal(0, 2**-9, 1000)]
xs += [np.array([0.0, -0.0, 448.0, -448.0, 449.0, 463.9, 464.0, 500.0, -1e6, 3.4e38, 1e-30, -1e-30, 2**-10, 2**-10 * 1.0000001])]
x = np.concatenate([np.asarray(a, dtype=np.float64) for a in xs]).astype(np.float32)
enc = np.clip(x, -448, 448).astype(E4M3).view(np.uint8)
encode = [[int(b), int(c)] for b, c in zip(x.view(np.uint32), enc)]

out = os.path.join(os.path.dirname(__file__), "..", "reference", "tests", "fixtures", "fp8_e4m3_vectors.json")
with open(out, "w") as f:
    json.dump({"oracle": f"ml_dtypes {ml_dtypes.__version__} float8_e4m3fn, inputs clipped to [-448, 448]", "decode": decode, "encode": encode}, f)
print(f"{len(decode)} codes, {len(encode)} encodings -> {out}")
