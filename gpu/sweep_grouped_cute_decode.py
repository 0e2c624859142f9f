"""Decode configs of the grouped CuTe sm90 kernel (issue 37) side by side: the catalogue's `moe_bf16` rendered with
each candidate as its cute:sm90 decode variant (M <= 64), all timed in one paired CUPTI rotation with
torch._grouped_mm on gpu/bench_grouped.py's decode rows (32 experts x 2 rows on average, N 4096, K 7168; even and
skewed), L2 flushed before each call; peer / candidate per round, median and interval; the first candidate again
as A/A. Each candidate's output is compared with the peer's before timing.

    python gpu/sweep_grouped_cute_decode.py --out out/gpu
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
from bench_grouped import group_sizes  # noqa: E402  (the bench's distributions, not a copy)

ROOT = Path(__file__).resolve().parents[1]
# (tile m, n, k, consumer warpgroups, stages or "auto"): the session-21 tile first (what decode ran before variants)
CANDIDATES = [
    (128, 256, 64, 2, "auto"),
    (64, 128, 64, 1, "auto"),
    (64, 128, 128, 1, "auto"),
    (64, 256, 64, 1, "auto"),
    (64, 64, 128, 1, "auto"),
    (64, 128, 64, 1, 4),
]


def candidate_module(base: dict, i: int, cand: tuple, tmp: Path):
    m, n, k, wgs, stages = cand
    variant = {"when": {"m_max": 64}, "tile": {"m": m, "n": n, "k": k}, "cute": {"mma_warpgroups": wgs}}
    if stages != "auto":
        variant["pipeline"] = {"ab_stages": stages}
    spec = {**base, "name": f"sweep_decode_{i}", "targets": ["cute:sm90"],
            "per_target": {"cute:sm90": {"variants": [variant]}}, "variants": []}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<sweep {i}>", ".json")
    ((rel, text),) = render_modules(ls, [parse_target("cute:sm90")]).items()
    path = tmp / Path(rel).name
    path.write_text(text)
    module = load_rendered(path, f"_specgen_sweep_{path.stem}")
    cfg = module.VARIANT_CONFIGS[0]
    label = f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} {cfg.mma_warpgroups}wg {cfg.ab_stages}st"
    return getattr(module, spec["name"]), label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (base,) = [ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs"]) if ls.name == "moe_bf16"]
    tmp = Path(tempfile.mkdtemp(prefix="sweep_decode_"))
    fns = [candidate_module(base, i, c, tmp) for i, c in enumerate(CANDIDATES)]
    experts, rows, n, k = 32, 2, 4096, 7168
    record = []
    print("| config | sizes | ours us | peer us | peer / ours (interval) | A/A | max err |")
    print("|---|---|---|---|---|---|---|")
    for dist in ("even", "skewed"):
        sizes = group_sizes(dist, experts, rows)
        m = sum(sizes)
        gen = torch.Generator(device="cuda").manual_seed(37)
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = (torch.randn(experts, n, k, device="cuda", generator=gen) / math.sqrt(k)).to(torch.bfloat16).transpose(-2, -1)
        offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in fns]
        calls = {label: (lambda fn=fn, out=out, a=a, b=b, offs=offs: fn(a, b, offs, out=out))
                 for (fn, label), out in zip(fns, outs, strict=True)}
        first = fns[0][1]
        calls[f"{first} again"] = calls[first]
        calls["peer"] = lambda a=a, b=b, offs=offs: torch._grouped_mm(a, b, offs=offs)
        peer = calls["peer"]().float()
        errs = {label: (calls[label]().float() - peer).abs().max().item() for _, label in fns}
        cycle = kernel_cycle(calls, args.rounds)
        s = {name: v["samples"] for name, v in cycle.items()}
        aa = paired(s[first], s[f"{first} again"])
        for _, label in fns:
            speed = paired(s[label], s["peer"])
            print(f"| {label} | {dist} | {speed.ours_us:.1f} | {speed.peer_us:.1f} | {speed.ratio:.3f} "
                  f"({speed.ratio_lo:.3f}-{speed.ratio_hi:.3f}) | {aa.ratio if label == first else float('nan'):.3f} "
                  f"| {errs[label]:.3g} |", flush=True)
            record.append({"config": label, "dist": dist, "sizes": sizes, "ours_us": speed.ours_us,
                           "peer_us": speed.peer_us, "ratio": speed.ratio, "ratio_lo": speed.ratio_lo,
                           "ratio_hi": speed.ratio_hi, "max_err": errs[label]})
        record.append({"config": f"{first} A/A", "dist": dist, "ratio": aa.ratio})
    env = environment().model_dump(mode="json")
    (args.out / "sweep-grouped-cute-decode.json").write_text(json.dumps({"environment": env, "rows": record}, indent=1))


if __name__ == "__main__":
    main()
