"""Diagnose Mosaic GPU outputs for small problem N (issue: all zeros for N = 8..40).

For each rendered pallas:gpu_sm90 catalogue module, run a grid of (M, N, K) and print, per case, the
max error against a float64 reference and the fraction of exact zeros; then the same kernels with B and
the output padded by the caller to N' (the tile's N, the warpgroup's N, the epilogue's N) to see which
padding makes the answer right. Run on a CUDA machine: python bench/diag_mgpu_small_n.py
"""

from __future__ import annotations

import importlib
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_relu_f16", "gemm_residual_bf16", "bmm_bf16",
         "gemm_bias_gelu_bf16", "gemm_fp8_rowwise"]
SHAPES = [(m, n, k) for m in (1, 64, 200) for n in (8, 16, 24, 40, 64, 72, 128, 136, 257) for k in (64, 129)]


def data(mod, m, n, k, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    spec = mod.SPEC
    lead = (batch,) if spec["batch"] else ()
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16, "fp8_e4m3": jnp.float8_e4m3fn, "f32": jnp.float32}
    a_np = rng.standard_normal((*lead, m, k)) / np.sqrt(k)
    b_np = rng.standard_normal((*lead, k, n))
    a = jnp.asarray(a_np if spec["a"]["major"] == "k" else np.swapaxes(a_np, -1, -2), dt[spec["a"]["dtype"]])
    b = jnp.asarray(np.swapaxes(b_np, -1, -2) if spec["b"]["major"] == "k" else b_np, dt[spec["b"]["dtype"]])
    args = []
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(jnp.asarray(rng.standard_normal(m if op["along"] == "m" else n), dt[op["dtype"]]))
        elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
            args.append(0.75)
        elif op["op"] == "scale" and op["by"] == "rowcol":
            args.append(jnp.asarray(rng.random(m) + 0.5, jnp.float32))
            args.append(jnp.asarray(rng.random(n) + 0.5, jnp.float32))
        elif op["op"] == "residual":
            args.append(jnp.asarray(rng.standard_normal((*lead, m, n)), dt[op["dtype"]]))
    return a, b, args


def reference(mod, a, b, args):
    spec = mod.SPEC
    a64 = np.asarray(a.astype(jnp.float32), np.float64)
    b64 = np.asarray(b.astype(jnp.float32), np.float64)
    if spec["a"]["major"] != "k":
        a64 = np.swapaxes(a64, -1, -2)
    if spec["b"]["major"] == "k":
        b64 = np.swapaxes(b64, -1, -2)
    acc = a64 @ b64
    it = iter(args)
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            v = np.asarray(next(it).astype(jnp.float32), np.float64)
            acc = acc + (v[:, None] if op["along"] == "m" else v)
        elif op["op"] == "scale" and op["by"] == "scalar":
            acc = acc * (op["value"] if op["value"] is not None else next(it))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            sa, sb = np.asarray(next(it), np.float64), np.asarray(next(it), np.float64)
            acc = acc * sa[:, None] * sb
        elif op["op"] == "activation" and op["fn"] == "gelu_tanh":
            acc = 0.5 * acc * (1 + np.tanh(0.7978845608028654 * (acc + 0.044715 * acc**3)))
        elif op["op"] == "activation" and op["fn"] == "relu":
            acc = np.maximum(acc, 0)
        elif op["op"] == "residual":
            acc = acc + op["beta"] * np.asarray(next(it).astype(jnp.float32), np.float64)
    return acc


def pad_n(mod, b, args, n, n_to):
    """B and the N-extent arguments zero-padded to n_to columns (the caller's workaround)."""
    spec = mod.SPEC
    ax = -2 if spec["b"]["major"] == "k" else -1
    widths = [(0, 0)] * b.ndim
    widths[ax] = (0, n_to - n)
    b = jnp.pad(b, widths)
    out = []
    it = iter(args)
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            v = next(it)
            out.append(jnp.pad(v, (0, n_to - n)) if op["along"] == "n" else v)
        elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
            out.append(next(it))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            out.append(next(it))
            out.append(jnp.pad(next(it), (0, n_to - n)))
        elif op["op"] == "residual":
            c = next(it)
            out.append(jnp.pad(c, [(0, 0)] * (c.ndim - 1) + [(0, n_to - n)]))
    return b, out


def main() -> int:
    print(json.dumps({"jax": jax.__version__, "devices": [str(d) for d in jax.devices()]}), flush=True)
    bad = 0
    for name in NAMES:
        mod = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
        fn = getattr(mod, name)
        for m, n, k in SHAPES:
            a, b, args = data(mod, m, n, k)
            want = reference(mod, a, b, args)
            row = {"kernel": name, "m": m, "n": n, "k": k}
            for label, n_to in (("plain", n), ("pad_epi", max(n, mod.EPI_N)), ("pad_wg", max(n, mod.WG_N)),
                                ("pad_tile", max(n, mod.TILE_N))):
                if label != "plain" and n_to == n:
                    continue
                try:
                    bb, aa = pad_n(mod, b, args, n, n_to) if n_to != n else (b, args)
                    got = np.asarray(fn(a, bb, *aa).astype(jnp.float32), np.float64)[..., :n]
                    err = float(np.max(np.abs(got - want))) if got.size else 0.0
                    row[label] = {"err": round(err, 4), "zeros": round(float(np.mean(got == 0)), 3),
                                  "nan": int(np.isnan(got).sum())}
                except Exception as e:  # noqa: BLE001 - a diagnostic: print and go on
                    row[label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            scale = float(np.max(np.abs(want))) + 1 if want.size else 1
            if "err" not in row["plain"] or row["plain"]["err"] > 0.02 * scale:
                bad += 1
                row["BAD"] = True
            print(json.dumps(row), flush=True)
    print(f"bad cases: {bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
