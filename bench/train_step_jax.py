"""Forward + backward of a Linear + bias + GELU (tanh) layer on the Mosaic GPU (pallas:gpu_sm90) module's JAX entry
(its jax.custom_vjp: both save modes) against the same step in plain jnp (XLA's bf16 GEMMs and fusions, jax's autodiff),
timed with the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle: every call once a round, rotating
order, L2 flushed before each; all kernels of one call summed), with an A/A pair of the jnp step for the noise.

    python3 bench/train_step_jax.py [--layer gelu|gated] [--shape 4096x14336x4096 ...] [--rounds 15] [--json out.json]

A step is out, (dx, dw, dbias) = jax.vjp(layer, x, w, bias) then its pullback of dOut, under one jax.jit: x (M, K),
w (N, K) an nn.Linear weight, bf16; three GEMMs of 2 M N K flops each. The modules are rendered here from the spec
below (the forward's 128x256x64 tile for every GEMM, untuned), with both save modes. --layer gated: the gated
up-projection (SwiGLU, gate and up as the halves of one (2N, K) weight, no bias; N the output's columns), as
bench/train_step.py's gated row, on the module's 128x128x64 gated tile (two accumulators: 128 x 256 outputs' worth).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spec(save: str, layer: str = "gelu") -> dict:
    gated = layer == "gated"
    epilogue = ([{"op": "gated", "fn": "silu", "layout": "halves"}] if gated else
                [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}])
    return {"name": f"bench_mgpu_train_{layer}_{save}", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"},
            "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}, "epilogue": epilogue,
            "training": {"save": save}, "tile": {"m": 128, "n": 128 if gated else 256, "k": 64},
            "schedule": {"persistent": True, "group_m": 8}, "targets": ["pallas:gpu_sm90"]}


def render(s: dict, folder: Path):
    sys.path.insert(0, str(ROOT / "tests"))
    from backends.pallas.test_mgpu_module import render as render_mgpu

    return getattr(render_mgpu(s, folder)[0], s["name"])


def measure(M: int, N: int, K: int, rounds: int, layer: str = "gelu") -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from specgen.bench.timing import kernel_cycle

    folder = Path(tempfile.mkdtemp(prefix="specgen-bench-"))
    gated = layer == "gated"
    layers = {f"mgpu_{save}": render(spec(save, layer), folder) for save in ("preact", "recompute")}

    def plain(x, w, *b):  # a bf16 product (f32 accumulation inside the GEMM): its cotangent GEMMs are bf16 too
        pre = jnp.matmul(x, w.T).astype(jnp.float32)
        if gated:  # pre rounded to bf16 as eager keeps F.linear's output
            gate, up = jnp.split(pre.astype(x.dtype).astype(jnp.float32), 2, axis=1)
            return (jax.nn.silu(gate) * up).astype(x.dtype)
        return jax.nn.gelu(pre + b[0].astype(jnp.float32), approximate=True).astype(x.dtype)

    layers["jnp"] = layers["jnp_aa"] = plain
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((M, K)) / np.sqrt(K), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal(((2 if gated else 1) * N, K)) / np.sqrt(K), jnp.bfloat16)
    operands = (x, w) if gated else (x, w, jnp.asarray(rng.standard_normal(N), jnp.bfloat16))
    dout = jnp.asarray(rng.standard_normal((M, N)), jnp.bfloat16)
    steps = {}
    for name, fn in layers.items():
        def step(dout, *xs, fn=fn):
            out, pullback = jax.vjp(fn, *xs)
            return out, pullback(dout)

        steps[name] = jax.jit(step)
    ref = [np.asarray(g, np.float32) for g in steps["jnp"](dout, *operands)[1]]
    dist = {}
    for name in ("mgpu_preact", "mgpu_recompute"):
        got = steps[name](dout, *operands)[1]
        dist[name] = [float(np.abs(np.asarray(g, np.float32) - r).max() / max(np.abs(r).max(), 1.0))
                      for g, r in zip(got, ref, strict=True)]
    calls = {name: (lambda f=f: jax.block_until_ready(f(dout, *operands))) for name, f in steps.items()}
    res = kernel_cycle(calls, rounds=rounds)
    med = {name: statistics.median(r["samples"]) for name, r in res.items()}
    return {"layer": layer, "shape": [M, N, K], "us": med, "jnp_over": {name: med["jnp"] / us for name, us in med.items()},
            "kernels": {name: r["kernels"] for name, r in res.items()}, "grad_rel_vs_jnp": dist,
            "jax": jax.__version__, "device": jax.devices()[0].device_kind}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096"], help="M x N x K (x: (M, K), w: (N, K))")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", default="")
    ap.add_argument("--layer", choices=("gelu", "gated"), default="gelu")
    args = ap.parse_args()
    reports = [measure(*map(int, s.split("x")), args.rounds, args.layer) for s in args.shape]
    for r in reports:
        print(f"{r['layer']} {'x'.join(map(str, r['shape']))} on {r['device']} (jax {r['jax']}):")
        for name, us in r["us"].items():
            print(f"  {name:16s} {us:9.1f} us   jnp / it {r['jnp_over'][name]:.3f}")
        for name, kernels in r["kernels"].items():
            print(f"  {name} kernels: " + ", ".join(f"{k[:60]} {v:.0f}" for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:6]))
        print(f"  max |grad - jnp's| / max |jnp's| (dx, dw[, dbias]): {r['grad_rel_vs_jnp']}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
