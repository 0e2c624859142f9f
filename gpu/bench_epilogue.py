"""What a fused epilogue costs (issue 20): the catalogue's bias + GELU-tanh kernel against the same spec with
no epilogue (its plain twin: same tile, cluster, schedule, stages and size variants), on the same backend and
the same data, paired CUPTI (each call paired with the others in one rotation, L2 flushed before each), and
the eager peer beside them (torch's `gelu(addmm)`, XLA's fused jit for Mosaic GPU).

Reported per backend and shape: fused / plain kernel time (the epilogue's cost; target <= 1.02) and peer /
fused (the speed a user sees; eager's separate GELU pass makes ~1.06x the ceiling at 8192^3). The A/A row
times the plain twin against itself.

    python gpu/bench_epilogue.py --out out/gpu        (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax share the GPU here

from specgen.bench.record import environment  # noqa: E402
from specgen.bench.shapes import parse_shapes  # noqa: E402
from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import kernel_cycle  # noqa: E402
from specgen.bench.workloads import build_module, catalogue_kernel, inputs, max_error, ours_call, peer_call  # noqa: E402
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import LoadedSpec  # noqa: E402
from specgen.spec.models import parse_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "gemm_bias_gelu_bf16"


def plain_twin(loaded: LoadedSpec) -> LoadedSpec:
    """The same kernel with no epilogue: every config field kept, so both run the same tiles."""
    data = loaded.spec.model_dump(mode="json", exclude_unset=True)
    data.update(name=f"{loaded.name}_plain", epilogue=[])
    return dataclasses.replace(loaded, spec=GemmSpec.model_validate(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--targets", default="triton:sm90,cute:sm90,pallas:gpu_sm90")
    ap.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096,128x8192x8192,16x8192x8192")
    args = ap.parse_args()
    fused = catalogue_kernel(KERNEL, ROOT / "specs")
    plain = plain_twin(fused)
    rows = []
    print("| target | shape | fused / plain (epilogue cost) | peer / fused | A/A (plain / plain) | fused us | plain us | max err |")
    print("|---|---|---|---|---|---|---|---|")
    for t in args.targets.split(","):
        target = parse_target(t)
        try:
            mods = {"fused": build_module(fused, target), "plain": build_module(plain, target)}
        except Exception as e:  # a backend this machine lacks: say so, time the rest
            print(f"| {t} | not timed: {type(e).__name__}: {e} |")
            continue
        for shape in parse_shapes(args.shapes, "gemm"):
            x = inputs(fused.spec, shape)
            fns = {"fused": ours_call(mods["fused"], fused.spec, target, x),
                   "plain": ours_call(mods["plain"], plain.spec, target, x[:2]),
                   "plain again": ours_call(mods["plain"], plain.spec, target, x[:2]),
                   "peer": peer_call(fused.spec, target, x)}
            err = max_error(fns["fused"](), fns["peer"]())
            cycle = kernel_cycle(fns, args.rounds)
            s = {k: v["samples"] for k, v in cycle.items()}
            cost = paired(s["fused"], s["plain"])  # plain / fused per round: 1 / cost
            speed = paired(s["fused"], s["peer"])
            aa = paired(s["plain again"], s["plain"])
            med = {k: sorted(v)[len(v) // 2] for k, v in s.items()}
            row = {"target": t, "shape": str(shape), "fused_over_plain": 1 / cost.ratio,
                   "fused_over_plain_interval": [1 / cost.ratio_hi, 1 / cost.ratio_lo], "peer_over_fused": speed.ratio,
                   "aa": aa.ratio, "median_us": med, "max_error": err,
                   "kernels": {k: v["kernels"] for k, v in cycle.items()}}
            rows.append(row)
            print(f"| {t} | {shape} | {row['fused_over_plain']:.3f} ({1 / cost.ratio_hi:.3f}-{1 / cost.ratio_lo:.3f}) | "
                  f"{speed.ratio:.3f} | {aa.ratio:.3f} | {med['fused']:.1f} | {med['plain']:.1f} | {err:.4f} |", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-epilogue.json").write_text(json.dumps({"environment": environment().model_dump(),
                                                              "kernel": KERNEL, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
