"""Config sweep for the CuTe sm90 catalogue kernels on one Hopper GPU: which tile, cluster and schedule
(cooperative or ping-pong) is fastest per benchmark shape, against the same peer as bench_cute.py.

Each candidate is the catalogue kernel with its config replaced (tile, cluster, cute options), rendered
for cute:sm90 into a temporary folder (renders need specgen's own deps: pydantic), checked against the
peer's result on every shape (and on M = 1 and ragged shapes with `--smoke`), then timed: CUPTI kernel
time (torch.profiler), the candidate and the peer alternately, ROUNDS rounds, median. The winners feed
the per_target."cute:sm90" tables and variants of specs/ (bench/RESULTS.md says which run chose them).

Usage (repo root on PYTHONPATH): python bench/sweep_cute.py --out DIR [--smoke] [--only NAME ...]
  -> DIR/sweep-cute.json (one row per candidate and shape), progress on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

import tomllib
import torch
from bench_cute import FP8_SHAPES, GEMM_SHAPES, assert_matches, kernel_ms

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3


def tile(m: int, n: int, k: int) -> dict:
    return {"m": m, "n": n, "k": k}


def cand(label: str, t: dict, cluster: tuple[int, int] = (1, 1), schedule: str = "cooperative", wgs: int | None = None,
         group_m: int = 8) -> dict:
    cute = {"schedule": schedule} | ({"mma_warpgroups": wgs} if wgs else {})
    return {"label": label, "tile": t, "cluster": {"m": cluster[0], "n": cluster[1]}, "cute": cute,
            "group_m": group_m}


BF16 = [
    cand("coop 128x256x64 2x1", tile(128, 256, 64), (2, 1)),
    cand("pingpong 128x128x64 1x1", tile(128, 128, 64), schedule="pingpong"),
    cand("pingpong 128x128x64 2x1", tile(128, 128, 64), (2, 1), schedule="pingpong"),
    cand("pingpong 128x128x64 1x2", tile(128, 128, 64), (1, 2), schedule="pingpong"),
]
FP8 = [
    cand("coop 128x256x128 1x1", tile(128, 256, 128)),
    cand("coop 128x256x128 2x1", tile(128, 256, 128), (2, 1)),
    cand("coop 64x128x128 1x1", tile(64, 128, 128)),
    cand("pingpong 128x128x128 1x1", tile(128, 128, 128), schedule="pingpong"),
    cand("pingpong 128x128x128 2x1", tile(128, 128, 128), (2, 1), schedule="pingpong"),
    cand("pingpong 64x128x128 1x1", tile(64, 128, 128), schedule="pingpong"),
]
GELU = [c for c in BF16 if c["label"] in ("coop 128x256x64 2x1", "pingpong 128x128x64 1x1", "pingpong 128x128x64 2x1")]
# Measured before (bench/results/2026-11-22-h200-cute-sweep.json, first run): cooperative 128x256x64 1x1
# (the old default), 256x128x64 1x1 and 128x128x64 2x1 with two warpgroups; 128x256x64 2x1 was the best of them.


def catalogue() -> dict[str, dict]:
    found = {}
    for path in sorted((ROOT / "specs").glob("*.toml")):
        for k in tomllib.loads(path.read_text())["kernels"]:
            found[k["name"]] = k
    return found


def render(name: str, c: dict, folder: Path, index: int):
    """The catalogue kernel `name` with candidate `c` as its only cute:sm90 config, rendered and imported."""
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_modules
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    k = {key: v for key, v in catalogue()[name].items() if key not in ("variants", "per_target", "triton")}
    k |= {"name": f"{name}_c{index}", "targets": ["cute:sm90"], "tile": c["tile"], "cluster": c["cluster"],
          "cute": c["cute"], "schedule": {**k.get("schedule", {}), "persistent": True, "group_m": c["group_m"]}}
    (ls,) = load_text(json.dumps({"kernels": [k]}), f"<sweep:{k['name']}>", ".json")
    r = resolve(ls.spec, ls.spec.targets[0])
    (text,) = render_modules(ls, ls.spec.targets).values()
    path = folder / f"{k['name']}.py"
    path.write_text(text)
    mod = load_rendered(path)
    return getattr(mod, k["name"]), r.ab_stages, r.budget.total


def operands(group: str, M: int, N: int, K: int):
    if group == "fp8":
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
        return (a, w.t(), sa, sb), lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    if group == "gelu":
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        return (a, w.t(), bias), lambda: torch.nn.functional.gelu(torch.addmm(bias, a, w.t()), approximate="tanh")
    return (a, w.t()), lambda: a @ w.t()


def sweep(group: str, name: str, cands: list[dict], shapes: list[tuple[int, int, int]], smoke: bool, rows: list,
          out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(cands):
            try:
                fn, stages, smem = render(name, c, Path(tmp), i)
            except Exception as e:  # a candidate the checker or renderer refuses: say so, go on
                print(f"SKIP {name} {c['label']}: {type(e).__name__}: {e}", flush=True)
                continue
            if smoke:  # numerics only: M = 1, ragged M/N/K (the tails through TMA bounds), a mid-size square
                for M, N, K in ((1, 256, 128), (300, 264, 200), (129, 520, 72), (2048, 2048, 2048)):
                    args, peer = operands(group, M, N, K)
                    assert_matches(fn(*args), peer(), f"{name} {c['label']} {M}x{N}x{K}")
                print(f"OK {name} {c['label']}", flush=True)
                continue
            for M, N, K in shapes:
                args, peer = operands(group, M, N, K)
                outbuf = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                assert_matches(fn(*args), peer(), f"{name} {c['label']} {M}x{N}x{K}")
                ours, theirs = [], []
                for _ in range(ROUNDS):
                    ours.append(kernel_ms(lambda: fn(*args, out=outbuf), calls=10))  # noqa: B023
                    theirs.append(kernel_ms(peer, calls=10))
                o, p = sorted(ours)[ROUNDS // 2], sorted(theirs)[ROUNDS // 2]
                rows.append(dict(group=group, kernel=name, candidate=c["label"], config=c, ab_stages=stages,
                                 smem=smem, shape=[M, N, K], ours_kernel_ms=o, peer_kernel_ms=p, kernel_ratio=p / o))
                print(f"{group:5} {M}x{N}x{K:<6} {c['label']:28} stages {stages} ours {o * 1e3:8.1f} us "
                      f"peer {p * 1e3:8.1f} us ratio {p / o:.3f}", flush=True)
                (out / "sweep-cute.json").write_text(json.dumps(
                    {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
                     "torch": torch.__version__, "rows": rows}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", nargs="*", default=["bf16", "gelu", "fp8"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    plan = {"bf16": ("gemm_bf16", BF16, GEMM_SHAPES), "gelu": ("gemm_bias_gelu_bf16", GELU, [(8192, 8192, 8192)]),
            "fp8": ("gemm_fp8_rowwise", FP8, FP8_SHAPES)}
    for group in args.only:
        name, cands, shapes = plan[group]
        sweep(group, name, cands, shapes, args.smoke, rows, args.out)
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["group"], tuple(r["shape"]))
        if key not in best or r["kernel_ratio"] > best[key]["kernel_ratio"]:
            best[key] = r
    for (group, shape), r in best.items():
        print(f"BEST {group} {shape}: {r['candidate']} {r['kernel_ratio']:.3f}x", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
