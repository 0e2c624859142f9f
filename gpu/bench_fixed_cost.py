"""Where a decode GEMM's time goes (issue 20): kernel time against K at one M x N, for each backend and the
peers, and a straight line through it, t(K) = t0 + s K. The intercept t0 is what a call costs whatever it
streams (the launch's ramp, the prologue's barrier and descriptor set-up, the epilogue's store and the
last wave's tail); 1 / s is the rate the weight streams at, reported as GB/s of B (N x K elements).
A backend behind its peer by a constant at every K differs in t0; one behind by a share differs in s.

Each K is one paired cycle (`timing.kernel_cycle`: every call once per round, rotating, L2 flushed before
each), with the first peer timed twice for the A/A; the fit runs over each call's median per K.

    python gpu/bench_fixed_cost.py --out out/gpu --kernel gemm_bf16 --m 16 --n 8192 --ks 1024,2048,4096,8192
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax share the GPU here

from specgen.bench.record import environment  # noqa: E402
from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import kernel_cycle  # noqa: E402
from specgen.bench.workloads import (  # noqa: E402
    build_module,
    catalogue_kernel,
    inputs,
    max_error,
    ours_call,
    peer_call,
    peer_name,
)
from specgen.kinds.gemm.problem import Shape  # noqa: E402
from specgen.spec.models import parse_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BYTES = {"bf16": 2, "f16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "f32": 4}


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = t0 + s x: (t0, s)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - s * mx, s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--kernel", default="gemm_bf16")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--ks", default="1024,2048,4096,8192")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--targets", default="triton:sm90,cute:sm90,pallas:gpu_sm90")
    args = ap.parse_args()
    loaded = catalogue_kernel(args.kernel, ROOT / "specs")
    spec = loaded.spec
    targets = [parse_target(t) for t in args.targets.split(",")]
    modules = {}
    for t in targets:
        try:
            modules[str(t)] = build_module(loaded, t)
        except Exception as e:  # a backend this machine lacks: say so, time the rest
            print(f"{t}: not timed ({type(e).__name__}: {e})")
    # the peers: torch's (cuBLAS, `_scaled_mm`) once, XLA once if a Pallas target runs
    peers = {peer_name(spec, t): t for t in targets if str(t) in modules}
    ks = [int(k) for k in args.ks.split(",")]
    medians: dict[str, list[float]] = {}
    rows = []
    for k in ks:
        x = inputs(spec, Shape(args.m, args.n, k))
        fns = {f"{peer} (peer)": peer_call(spec, t, x) for peer, t in peers.items()}
        first_peer = next(iter(fns))
        fns[f"{first_peer} again"] = fns[first_peer]
        for t, mod in modules.items():
            fns[t] = ours_call(mod, spec, parse_target(t), x)
        errors = {t: max_error(fns[t](), fns[first_peer]()) for t in modules}
        cycle = kernel_cycle(fns, args.rounds)
        s = {name: v["samples"] for name, v in cycle.items()}
        row = {"k": k, "median_us": {name: statistics.median(v) for name, v in s.items()}, "max_error": errors,
               "aa": paired(s[f"{first_peer} again"], s[first_peer]).ratio,
               "peer_over_ours": {t: paired(s[t], s[f"{peer_name(spec, parse_target(t))} (peer)"]).ratio for t in modules},
               "kernels": {name: v["kernels"] for name, v in cycle.items()}}
        rows.append(row)
        for name, us in row["median_us"].items():
            medians.setdefault(name, []).append(us)
        print(f"K = {k}: " + ", ".join(f"{n} {us:.1f} us" for n, us in row["median_us"].items())
              + f"; A/A {row['aa']:.3f}; " + ", ".join(f"{t} {r:.3f}x its peer" for t, r in row["peer_over_ours"].items()),
              flush=True)
    elt = BYTES[spec.b.dtype.value]
    fits = {}
    print(f"\n| {args.kernel}, M = {args.m}, N = {args.n}, K = {args.ks} | t0 (us) | B streamed (GB/s) | t(K) at K = {ks[-1]} (us) |")
    print("|---|---|---|---|")
    for name, ys in medians.items():
        if name.endswith(" again"):
            continue
        t0, slope = line_fit([float(k) for k in ks], ys)
        fits[name] = {"t0_us": t0, "us_per_k": slope, "b_gb_per_s": args.n * elt / slope / 1e3}
        print(f"| {name} | {t0:.2f} | {fits[name]['b_gb_per_s']:.0f} | {ys[-1]:.1f} |")
    result = {"environment": environment().model_dump(), "kernel": args.kernel, "m": args.m, "n": args.n,
              "ks": ks, "rounds": args.rounds, "rows": rows, "fits": fits}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"bench-fixed-cost-{args.kernel}-m{args.m}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
