"""The batched Mosaic GPU backward (pallas:gpu_sm90, `batch = true` training): each backward GEMM as one launch over
every batch entry (the role's kernel walking batch x tiles, session 34) against the session-33 form, one launch of the
unbatched kernel per entry in a lax.map (XLA slicing each entry's operands and stacking the results), on one module.

Timed per role (forward_pre, dgrad, wgrad) and for the backward of a [bias, gelu_tanh] preact layer (the columns pass,
then dgrad and wgrad: `_train_bwd`'s steps, written out here in both forms so the columns pass is the same kernel),
each a jax.jit of the module's `_gemm`, with the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle: every
call once a round in a rotating order, L2 flushed before each; a call's time is the sum of the kernels it launched,
XLA's slice and stack copies included) and the median host wall time of the same calls (the launches' gaps too). An
A/A pair (the new form twice) gives the noise. Each role's outputs in both forms are compared bit for bit first.

    python3 gpu/bench_mgpu_batch_backward.py [--shape 8x1024x1024x1024 ...] [--rounds 20] [--json out.json]

A shape is batch x M x N x K: A (batch, M, K), B (batch, N, K) bf16, the bias (N,).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SPEC = {"name": "bench_mgpu_batch_bwd", "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": "k"},
        "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"},
        "epilogue": [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
        "training": {"save": "preact"}, "tile": {"m": 128, "n": 128, "k": 64},
        "schedule": {"persistent": True, "group_m": 8}, "targets": ["pallas:gpu_sm90"]}


def module():
    sys.path.insert(0, str(ROOT / "tests"))
    from backends.pallas.test_mgpu_module import render

    return render(SPEC, Path(tempfile.mkdtemp(prefix="specgen-bench-")))[0]


def wall(calls: dict, rounds: int) -> dict[str, float]:
    """Median host wall time (us) of each call, one call of each a round in a rotating order."""
    from specgen.bench.stats import rotation

    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(rounds):
        for name in rotation(list(calls), i):
            start = time.perf_counter()
            calls[name]()
            samples[name].append((time.perf_counter() - start) * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def measure(mod, batch: int, M: int, N: int, K: int, rounds: int, lower_only: bool = False) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    from specgen.bench.timing import kernel_cycle

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((batch, M, K)) / np.sqrt(K), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((batch, N, K)) / np.sqrt(K), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal(N), jnp.bfloat16)
    dout = jnp.asarray(rng.standard_normal((batch, M, N)), jnp.bfloat16)

    def per_entry(role, p, q, r, *xs):  # session 33's `_per_batch`: the unbatched kernel once an entry, in a lax.map
        lead = [i for i, x in enumerate(xs) if x.ndim >= 3]

        def one(parts):
            args = list(xs)
            for i, part in zip(lead, parts, strict=True):
                args[i] = part
            return mod._gemm(role, p, q, r, *args)

        return lax.map(one, tuple(xs[i] for i in lead))

    def roles(gemm):
        def fwd(a, b, bias):
            return gemm("forward_pre", M, N, K, a, b, bias)

        def dgrad(g, b):
            return gemm("dgrad", M, K, N, g, b)

        def wgrad(a, g):
            return gemm("wgrad", K, N, M, a, g)

        def backward(a, b, pre, dout):  # _train_bwd (preact, bias): the columns pass over (batch M, N), dgrad, wgrad
            g, dbias = mod._grad_cols(dout.reshape(batch * M, N), pre.reshape(batch * M, N))
            g = g.reshape(batch, M, N)
            return dgrad(g, b), wgrad(a, g), dbias

        return {"forward_pre": fwd, "dgrad": dgrad, "wgrad": wgrad, "backward": backward}

    new, old = roles(mod._gemm), roles(per_entry)
    g = jnp.asarray(rng.standard_normal((batch, M, N)), jnp.bfloat16)
    if lower_only:  # no GPU: every call of both forms traced and lowered for CUDA (each role's kernel in it)
        pre = jax.ShapeDtypeStruct((batch, M, N), jnp.bfloat16)
        inputs = {"forward_pre": (a, b, bias), "dgrad": (g, b), "wgrad": (a, g), "backward": (a, b, pre, dout)}
        found = {}
        for role, xs in inputs.items():
            for form, fns in (("new", new), ("old", old)):
                text = jax.jit(fns[role]).trace(*xs).lower(lowering_platforms=("cuda",)).as_text()
                found[f"{role}/{form}"] = sorted(r for r in mod.TRAIN_GEMMS if f"{mod.NAME}_{r}" in text)
        return {"shape": [batch, M, N, K], "lowered": found}
    _, pre = jax.jit(new["forward_pre"])(a, b, bias)
    inputs = {"forward_pre": (a, b, bias), "dgrad": (g, b), "wgrad": (a, g), "backward": (a, b, pre, dout)}
    same, calls, failed = {}, {}, {}
    for role, xs in inputs.items():
        fn_new, fn_old = jax.jit(new[role]), jax.jit(old[role])
        try:  # a form that fails to compile or launch is reported, not timed (the other roles still are)
            got = jax.tree_util.tree_leaves(jax.block_until_ready(fn_new(*xs)))
            want = jax.tree_util.tree_leaves(jax.block_until_ready(fn_old(*xs)))
        except Exception as e:  # noqa: BLE001 - the message is the result
            failed[role] = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        same[role] = all(bool(jnp.array_equal(x, y)) for x, y in zip(got, want, strict=True))
        calls[f"{role}/new"] = lambda f=fn_new, xs=xs: jax.block_until_ready(f(*xs))
        calls[f"{role}/old"] = lambda f=fn_old, xs=xs: jax.block_until_ready(f(*xs))
    if "backward" in same:
        aa = jax.jit(new["backward"])  # a second jit of the same function: the A/A pair's other side
        calls["backward/new_aa"] = lambda: jax.block_until_ready(aa(*inputs["backward"]))
    if not calls:
        return {"shape": [batch, M, N, K], "failed": failed}
    res = kernel_cycle(calls, rounds=rounds)
    cupti = {name: statistics.median(r["samples"]) for name, r in res.items()}
    host = wall(calls, rounds)
    return {"shape": [batch, M, N, K], "same_bits": same, "failed": failed, "cupti_us": cupti, "wall_us": host,
            "kernels": {name: r["kernels"] for name, r in res.items()}, "jax": jax.__version__,
            "device": jax.devices()[0].device_kind}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="+", default=["32x256x512x512", "8x1024x1024x1024", "4x2048x4096x2048"],
                    help="batch x M x N x K")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--lower-only", action="store_true", help="no timing: lower every call for CUDA (a CPU check)")
    args = ap.parse_args()
    mod = module()
    reports = [measure(mod, *map(int, s.split("x")), args.rounds, args.lower_only) for s in args.shape]
    for r in reports:
        if args.lower_only:
            print(f"{'x'.join(map(str, r['shape']))}: lowered for CUDA, the kernels each call holds: {r['lowered']}")
            continue
        for role, why in r["failed"].items():
            print(f"{'x'.join(map(str, r['shape']))} {role}: not run: {why}")
        if "cupti_us" not in r:
            continue
        print(f"batch x M x N x K = {'x'.join(map(str, r['shape']))} on {r['device']} (jax {r['jax']}); "
              f"outputs equal bit for bit: {r['same_bits']}")
        print(f"  {'role':12s} {'old us':>9s} {'new us':>9s} {'old/new':>8s}   {'wall old':>9s} {'wall new':>9s} {'old/new':>8s}")
        for role in r["same_bits"]:
            c_old, c_new = r["cupti_us"][f"{role}/old"], r["cupti_us"][f"{role}/new"]
            w_old, w_new = r["wall_us"][f"{role}/old"], r["wall_us"][f"{role}/new"]
            print(f"  {role:12s} {c_old:9.1f} {c_new:9.1f} {c_old / c_new:8.3f}   {w_old:9.1f} {w_new:9.1f} {w_old / w_new:8.3f}")
        if "backward/new_aa" in r["cupti_us"]:
            print(f"  A/A (backward new twice): {r['cupti_us']['backward/new_aa'] / r['cupti_us']['backward/new']:.3f} "
                  f"CUPTI, {r['wall_us']['backward/new_aa'] / r['wall_us']['backward/new']:.3f} wall")
        for name in (n for n in ("dgrad/old", "dgrad/new") if n in r["kernels"]):
            top = sorted(r["kernels"][name].items(), key=lambda kv: -kv[1])[:4]
            print(f"  {name} kernels: " + ", ".join(f"{k[:50]} {v:.0f}" for k, v in top))
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
