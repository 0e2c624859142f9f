"""A kernel's size-selected variants against its default config on the shapes the variants serve: the module
as shipped and the same spec with no variants on that target, same data, paired CUPTI in one rotation with
the peer (cuBLAS / `_scaled_mm` / eager through torch; XLA's jit for Mosaic GPU). A variant earns its place
only where `variants / default` is above 1; an A/A row times the shipped module against itself.

    python gpu/bench_variants.py --kernel gemm_bf16 --target pallas:gpu_sm90 \
        --shapes 1x8192x8192,16x8192x8192,128x8192x8192 --out out/gpu
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax share the GPU here

from specgen.bench.record import environment  # noqa: E402
from specgen.bench.shapes import parse_shapes, slot_for, slot_label  # noqa: E402
from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import kernel_cycle  # noqa: E402
from specgen.bench.workloads import build_module, catalogue_kernel, inputs, max_error, ours_call, peer_call  # noqa: E402
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import LoadedSpec  # noqa: E402
from specgen.spec.models import parse_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DECODE = "1x8192x8192,4x8192x8192,16x8192x8192,32x8192x8192,64x4096x14336,128x8192x8192,128x14336x4096"


def without_variants(loaded: LoadedSpec, target: str) -> LoadedSpec:
    """The same spec, renamed, with no size-selected variant on `target` (its default config everywhere)."""
    data = loaded.spec.model_dump(mode="json", exclude_unset=True)
    per = data.setdefault("per_target", {})
    per.setdefault(target, {})["variants"] = []
    data["name"] = f"{loaded.name}_default_only"
    return dataclasses.replace(loaded, spec=GemmSpec.model_validate(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="gemm_bf16")
    ap.add_argument("--target", default="pallas:gpu_sm90")
    ap.add_argument("--shapes", default=DECODE)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    args = ap.parse_args()
    shipped = catalogue_kernel(args.kernel, ROOT / "specs")
    default = without_variants(shipped, args.target)
    target = parse_target(args.target)
    mods = {"shipped": build_module(shipped, target), "default": build_module(default, target)}
    rows = []
    print(f"{args.kernel} @ {args.target}")
    print("| shape | config | variants / default | peer / shipped | peer / default | A/A | shipped us | default us | max err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in parse_shapes(args.shapes, "gemm"):
        x = inputs(shipped.spec, shape)
        fns = {"shipped": ours_call(mods["shipped"], shipped.spec, target, x),
               "shipped again": ours_call(mods["shipped"], shipped.spec, target, x),
               "default": ours_call(mods["default"], default.spec, target, x),
               "peer": peer_call(shipped.spec, target, x)}
        err = max(max_error(fns["shipped"](), fns["peer"]()), max_error(fns["default"](), fns["peer"]()))
        cycle = kernel_cycle(fns, args.rounds)
        s = {k: v["samples"] for k, v in cycle.items()}
        gain = paired(s["shipped"], s["default"])  # default / shipped per round: > 1, the variant is faster
        label = slot_label(shipped.spec, target, slot_for(shipped.spec, target, shape))
        row = {"shape": str(shape), "config": label, "variants_over_default": gain.ratio,
               "interval": [gain.ratio_lo, gain.ratio_hi], "peer_over_shipped": paired(s["shipped"], s["peer"]).ratio,
               "peer_over_default": paired(s["default"], s["peer"]).ratio,
               "aa": paired(s["shipped again"], s["shipped"]).ratio,
               "median_us": {k: sorted(v)[len(v) // 2] for k, v in s.items()}, "max_error": err}
        rows.append(row)
        print(f"| {shape} | {label} | {gain.ratio:.3f} ({gain.ratio_lo:.3f}-{gain.ratio_hi:.3f}) | "
              f"{row['peer_over_shipped']:.3f} | {row['peer_over_default']:.3f} | {row['aa']:.3f} | "
              f"{row['median_us']['shipped']:.1f} | {row['median_us']['default']:.1f} | {err:.4f} |", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"bench-variants-{args.kernel}-{args.target.replace(':', '_')}.json"
    (args.out / name).write_text(json.dumps({"environment": environment().model_dump(), "kernel": args.kernel,
                                             "target": args.target, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
