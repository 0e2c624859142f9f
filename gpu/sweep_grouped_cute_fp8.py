"""Default configs of the grouped CuTe sm90 fp8 kernel (issue 37) side by side: the catalogue's `moe_fp8_rowwise`
rendered with each candidate as its cute:sm90 default config (no variant: every row below has M > 64), all timed
in one paired CUPTI rotation with torch._scaled_grouped_mm on gpu/bench_grouped.py's rows (e4m3 A and B, scale_a
per row, scale_b per expert and column, bf16 out), L2 flushed before each call; peer / candidate per round, median
and interval; the first candidate again as A/A. Each candidate's output is compared with the peer's before timing.

    python gpu/sweep_grouped_cute_fp8.py --out out/gpu [--rows "DeepSeek-V3 down:even,Qwen3-235B up:even"]
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
from specgen.compile import load_rendered
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_paths, load_text
from specgen.spec.models import parse_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped import WORKLOADS, group_sizes  # noqa: E402  (the bench's rows and distributions, not a copy)

ROOT = Path(__file__).resolve().parents[1]
# (tile m, n, k, consumer warpgroups, stages or "auto"): the catalogue's default first
CANDIDATES = [
    (128, 256, 128, 2, "auto"),
    (128, 128, 128, 2, "auto"),
    (128, 256, 64, 2, "auto"),
    (128, 128, 256, 2, "auto"),
    (64, 256, 128, 1, "auto"),
    (64, 128, 256, 1, "auto"),
]


def candidate_module(base: dict, i: int, cand: tuple, tmp: Path):
    m, n, k, wgs, stages = cand
    spec = {**base, "name": f"sweep_fp8_{i}", "targets": ["cute:sm90"], "tile": {"m": m, "n": n, "k": k},
            "cute": {**base.get("cute", {}), "mma_warpgroups": wgs}, "per_target": {}, "variants": []}
    if stages != "auto":
        spec["pipeline"] = {**base.get("pipeline", {}), "ab_stages": stages}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<sweep {i}>", ".json")
    ((rel, text),) = render_modules(ls, [parse_target("cute:sm90")]).items()
    path = tmp / Path(rel).name
    path.write_text(text)
    module = load_rendered(path, f"_specgen_sweep_{path.stem}")
    cfg = module.CONFIG
    label = f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} {cfg.mma_warpgroups}wg {cfg.ab_stages}st"
    return getattr(module, spec["name"]), label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--rows", default="DeepSeek-V3 up:even,DeepSeek-V3 down:even,Mixtral up:even,Mixtral down:even,"
                    "Qwen3-235B up:even,DeepSeek-V3 up:skewed", help="workload:distribution pairs (bench_grouped.py's)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (base,) = [ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs"]) if ls.name == "moe_fp8_rowwise"]
    tmp = Path(tempfile.mkdtemp(prefix="sweep_fp8_"))
    fns = [candidate_module(base, i, c, tmp) for i, c in enumerate(CANDIDATES)]
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
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(experts, n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).transpose(-2, -1)
        offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
        sa = torch.rand(m, device="cuda", generator=gen) * 0.5 + 0.5
        sb = (torch.rand(experts, n, device="cuda", generator=gen) * 0.5 + 0.5) / math.sqrt(k)
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in fns]
        calls = {label: (lambda fn=fn, out=out, a=a, b=b, offs=offs, sa=sa, sb=sb: fn(a, b, offs, sa, sb, out=out))
                 for (fn, label), out in zip(fns, outs, strict=True)}
        first = fns[0][1]
        calls[f"{first} again"] = calls[first]
        calls["peer"] = lambda a=a, b=b, offs=offs, sa=sa, sb=sb: torch._scaled_grouped_mm(
            a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
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
    (args.out / "sweep-grouped-cute-fp8.json").write_text(json.dumps({"environment": env, "rows": record}, indent=1))


if __name__ == "__main__":
    main()
