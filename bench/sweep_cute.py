"""Config sweep for the CuTe sm90 catalogue kernels on one Hopper GPU: which tile, cluster and schedule
(cooperative or ping-pong) is fastest per benchmark shape, against the same peer as bench_cute.py.

Each candidate is the catalogue kernel with its config replaced (tile, cluster, cute options), rendered
for cute:sm90 into a temporary folder (renders need specgen's own deps: pydantic), checked against the
peer's result on every shape (and on M = 1 and ragged shapes with `--smoke`), then timed with both timers,
the candidate and the peer alternately, ROUNDS rounds, median of each: CUPTI kernel time (torch.profiler,
L2 flushed before each call, 10 calls) and do_bench (warmup 25 ms, rep 100 ms: shorter than bench_cute.py's
so that a sweep fits a lease). The winners feed the per_target."cute:sm90" tables and variants of specs/
(bench/RESULTS.md says which run chose them). `--baseline DIR` adds, per kernel, a module rendered by
another checkout (DIR/<kernel>.py, e.g. main's generated/cute) as one more candidate: the same config
through another template, in the same process.

Usage (repo root on PYTHONPATH): python bench/sweep_cute.py --out DIR [--smoke] [--only NAME ...]
  [--rounds N] [--baseline DIR]  -> DIR/sweep-cute.json (one row per candidate and shape), progress on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path

import tomllib
import torch
from bench_cute import FP8_SHAPES, GEMM_SHAPES, assert_matches, kernel_ms
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 5


def tile(m: int, n: int, k: int) -> dict:
    return {"m": m, "n": n, "k": k}


def cand(label: str, t: dict, cluster: tuple[int, int] = (1, 1), schedule: str = "cooperative", wgs: int | None = None,
         group_m: int = 8, raster: str = "along_m", shapes: list | None = None) -> dict:
    """A candidate config; `shapes` limits it to those (M, N, K) of its group (None: every shape)."""
    cute = {"schedule": schedule} | ({"mma_warpgroups": wgs} if wgs else {})
    return {"label": label, "tile": t, "cluster": {"m": cluster[0], "n": cluster[1]}, "cute": cute,
            "group_m": group_m, "raster": raster, "shapes": shapes}


WIDE = [(8192, 8192, 8192), (4096, 14336, 4096)]


BF16 = [
    cand("coop 128x256x64 2x1", tile(128, 256, 64), (2, 1)),
    cand("pingpong 128x128x64 2x1", tile(128, 128, 64), (2, 1), schedule="pingpong"),
    cand("coop 128x256x64 1x2", tile(128, 256, 64), (1, 2), shapes=[*WIDE, (8192, 1024, 8192)]),
    cand("coop 128x256x64 2x1 along_n", tile(128, 256, 64), (2, 1), raster="along_n", shapes=WIDE),
    cand("coop 128x256x64 2x1 group 16", tile(128, 256, 64), (2, 1), group_m=16, shapes=WIDE),
    cand("coop 256x128x64 2x1", tile(256, 128, 64), (2, 1), wgs=2, shapes=WIDE),
    cand("pingpong 128x128x64 1x2", tile(128, 128, 64), (1, 2), schedule="pingpong", shapes=GEMM_SHAPES[:3]),
]
FP8 = [
    cand("pingpong 128x128x128 2x1", tile(128, 128, 128), (2, 1), schedule="pingpong", shapes=FP8_SHAPES[:2]),
    cand("coop 64x128x128 1x1", tile(64, 128, 128), shapes=FP8_SHAPES[2:]),
    cand("coop 128x256x128 2x1", tile(128, 256, 128), (2, 1), shapes=FP8_SHAPES[:2]),
    cand("pingpong 128x128x128 1x2", tile(128, 128, 128), (1, 2), schedule="pingpong", shapes=FP8_SHAPES[:2]),
]
GELU = [c for c in BF16 if c["label"] in ("coop 128x256x64 2x1", "pingpong 128x128x64 2x1")]
# Measured before (bench/results/2026-11-22-h200-cute-sweep.json): cooperative 128x256x64 1x1 (the first
# default), ping-pong 128x128 without a cluster (15-30% behind), fp8 coop 128x256x128 1x1 and 64x128 tiles
# on the large shapes (0.54-0.57x).


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
          "cute": c["cute"], "schedule": {**k.get("schedule", {}), "persistent": True, "group_m": c["group_m"],
                                          "raster": c["raster"]}}
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


def baseline(name: str, folder: Path):
    """DIR/<name>.py rendered by another checkout, imported beside ours: its custom op gets another name
    (the spec hash is the same) and its compiled kernels another cache key (the source differs)."""
    from specgen.compile import load_rendered

    src = (folder / f"{name}.py").read_text()
    src = re.sub(r'(register_custom_op\(\s*"\w+",\s*"\w+)"', r'\1_baseline"', src, count=1)
    path = folder / f"_baseline_{name}.py"
    path.write_text(src)
    return getattr(load_rendered(path, f"_sweep_baseline_{name}"), name)


def measure(ours, peer) -> tuple[float, float, float, float]:
    """Both timers, ours and the peer alternately, ROUNDS rounds: medians (CUPTI ours, peer, do_bench ours, peer)."""
    ko, kp, do, dp = [], [], [], []
    for _ in range(ROUNDS):
        ko.append(kernel_ms(ours, calls=10))
        kp.append(kernel_ms(peer, calls=10))
        do.append(do_bench(ours, warmup=25, rep=100, return_mode="median"))
        dp.append(do_bench(peer, warmup=25, rep=100, return_mode="median"))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return med(ko), med(kp), med(do), med(dp)


def sweep(group: str, name: str, cands: list[dict], shapes: list[tuple[int, int, int]], smoke: bool, rows: list,
          out: Path, base: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        found = []
        if base is not None and (base / f"{name}.py").exists():
            found.append(({"label": f"baseline {name}.py (its own configs)", "shapes": None}, lambda: (baseline(name, base), 0, 0)))
        found += [(c, lambda c=c, i=i: render(name, c, Path(tmp), i)) for i, c in enumerate(cands)]
        for c, make in found:
            try:
                fn, stages, smem = make()
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
                if c["shapes"] is not None and (M, N, K) not in c["shapes"]:
                    continue
                args, peer = operands(group, M, N, K)
                outbuf = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                assert_matches(fn(*args), peer(), f"{name} {c['label']} {M}x{N}x{K}")
                o, p, do, dp = measure(lambda: fn(*args, out=outbuf), peer)  # noqa: B023
                rows.append(dict(group=group, kernel=name, candidate=c["label"], config=c, ab_stages=stages,
                                 smem=smem, shape=[M, N, K], ours_kernel_ms=o, peer_kernel_ms=p, kernel_ratio=p / o,
                                 ours_ms=do, peer_ms=dp, ratio=dp / do))
                print(f"{group:5} {M}x{N}x{K:<6} {c['label']:34} stages {stages} CUPTI ours {o * 1e3:8.1f} us "
                      f"peer {p * 1e3:8.1f} us ratio {p / o:.3f} | do_bench ours {do * 1e3:8.1f} us "
                      f"peer {dp * 1e3:8.1f} us ratio {dp / do:.3f}", flush=True)
                (out / "sweep-cute.json").write_text(json.dumps(
                    {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
                     "torch": torch.__version__, "rounds": ROUNDS, "rows": rows}, indent=1, default=str) + "\n")


def main() -> None:
    global ROUNDS
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", nargs="*", default=["bf16", "gelu", "fp8"])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    ROUNDS = args.rounds
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    plan = {"bf16": ("gemm_bf16", BF16, GEMM_SHAPES), "gelu": ("gemm_bias_gelu_bf16", GELU, [(8192, 8192, 8192)]),
            "fp8": ("gemm_fp8_rowwise", FP8, FP8_SHAPES)}
    for group in args.only:
        name, cands, shapes = plan[group]
        sweep(group, name, cands, shapes, args.smoke, rows, args.out, args.baseline)
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["group"], tuple(r["shape"]))
        score = (r["kernel_ratio"] * r["ratio"]) ** 0.5  # both timers
        if key not in best or score > best[key][0]:
            best[key] = (score, r)
    for (group, shape), (_, r) in best.items():
        print(f"BEST {group} {shape}: {r['candidate']} CUPTI {r['kernel_ratio']:.3f}x do_bench {r['ratio']:.3f}x",
              flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
