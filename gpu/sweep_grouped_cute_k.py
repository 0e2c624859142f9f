"""Default configs of the grouped CuTe sm90 ragged-K kernel (the weight gradient, issue 37) side by side: the
catalogue's `moe_wgrad_bf16` rendered with each candidate as its cute:sm90 config, all timed in one paired CUPTI
rotation with torch._grouped_mm's 2-D x 2-D form on gpu/bench_grouped.py's rows (x (rows, K) passed as x.t(), dy
(rows, N), out (G, K, N) bf16), L2 flushed before each call; peer / candidate per round, median and interval; the
first candidate again as A/A. Each candidate's output is compared with the peer's before timing.

    python gpu/sweep_grouped_cute_k.py --out out/gpu [--rows "DeepSeek-V3 up:even,Qwen3-235B up:skewed"]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

from specgen.bench.record import environment
from specgen.bench.stats import paired
from specgen.bench.timing import kernel_cycle
from specgen.spec.load import load_paths

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped import WORKLOADS, group_sizes  # noqa: E402  (the bench's rows and distributions, not a copy)
from sweep_grouped_cute_fp8 import candidate_module  # noqa: E402  (renders one candidate as the spec's config)

ROOT = Path(__file__).resolve().parents[1]
# (tile m, n, k, consumer warpgroups, stages or "auto"): the catalogue's config first
CANDIDATES = [
    (128, 256, 64, 2, "auto"),
    (128, 128, 64, 2, "auto"),
    (256, 128, 64, 2, "auto"),
    (128, 256, 32, 2, "auto"),
    (128, 192, 64, 2, "auto"),
    (64, 256, 64, 1, "auto"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rows", default="DeepSeek-V3 up:even,DeepSeek-V3 up:skewed,Qwen3-235B up:even,"
                    "Qwen3-235B up:skewed,Mixtral down:skewed", help="workload:distribution pairs (bench_grouped.py's)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (base,) = [ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs"]) if ls.name == "moe_wgrad_bf16"]
    base["pipeline"] = {**base.get("pipeline", {}), "ab_stages": "auto"}  # the top level's 2 are the Triton kernel's
    tmp = Path(tempfile.mkdtemp(prefix="sweep_k_"))
    fns = []
    for i, cand in enumerate(CANDIDATES):
        try:
            fns.append(candidate_module(base, i, cand, tmp))
        except Exception as exc:  # a candidate check refuses or the DSL cannot build: say so, time the rest
            print(f"candidate {cand}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    record = []
    print("| config | workload | ours us | peer us | peer / ours (interval) | A/A | max err |")
    print("|---|---|---|---|---|---|---|")
    shapes = {name: (experts, rows, n, k) for name, experts, rows, n, k in WORKLOADS}
    for row in args.rows.split(","):
        name, dist = row.split(":")
        experts, rows, n, k = shapes[name]
        sizes = group_sizes(dist, experts, rows)
        m = sum(sizes)
        gen = torch.Generator(device="cuda").manual_seed(37)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(max(max(sizes), 1))
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
        offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
        outs = [torch.empty(experts, k, n, device="cuda", dtype=torch.bfloat16) for _ in fns]
        calls = {label: (lambda fn=fn, out=out, x=x, dy=dy, offs=offs: fn(x.t(), dy, offs, out=out))
                 for (fn, label), out in zip(fns, outs, strict=True)}
        first = fns[0][1]
        calls[f"{first} again"] = calls[first]
        calls["peer"] = lambda x=x, dy=dy, offs=offs: torch._grouped_mm(x.t(), dy, offs=offs)
        peer = calls["peer"]().float()
        errs = {label: (calls[label]().float() - peer).abs().max().item() for _, label in fns}
        cycle = kernel_cycle(calls, args.rounds)
        s = {c: v["samples"] for c, v in cycle.items()}
        aa = paired(s[first], s[f"{first} again"])
        for _, label in fns:
            speed = paired(s[label], s["peer"])
            print(f"| {label} | {name} {dist} | {speed.ours_us:.1f} | {speed.peer_us:.1f} | {speed.ratio:.3f} "
                  f"({speed.ratio_lo:.3f}-{speed.ratio_hi:.3f}) | {aa.ratio if label == first else float('nan'):.3f} "
                  f"| {errs[label]:.3g} |", flush=True)
            record.append({"config": label, "workload": name, "dist": dist, "sizes": sizes, "n": n, "k": k,
                           "ours_us": speed.ours_us, "peer_us": speed.peer_us, "ratio": speed.ratio,
                           "ratio_lo": speed.ratio_lo, "ratio_hi": speed.ratio_hi, "max_err": errs[label]})
        record.append({"config": f"{first} A/A", "workload": name, "dist": dist, "ratio": aa.ratio})
    env = environment().model_dump(mode="json")
    (args.out / "sweep-grouped-cute-k.json").write_text(json.dumps({"environment": env, "rows": record}, indent=1))


if __name__ == "__main__":
    main()
