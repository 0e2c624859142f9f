"""Config sweep for the CuTe sm90 catalogue kernels on one Hopper GPU: which tile, cluster and schedule
(cooperative or ping-pong) is fastest per benchmark shape, against the same peer as bench_cute.py.

Each candidate is the catalogue kernel with its config replaced (tile, cluster, cute options), rendered
for cute:sm90 into a temporary folder (renders need specgen's own deps: pydantic), checked against the
peer's result on every shape (and on M = 1 and ragged shapes with `--smoke`), then timed with both timers,
the candidate and the peer paired (bench/timing.py): CUPTI kernel time alternated call by call (L2 flushed
before each call, 40 pairs) and do_bench alternated window by window (2 x ROUNDS + 1 windows of 25 ms each),
each ranked by the median of its pairs' ratios: the card's clock moves 1390-1760 MHz between windows, which
moved unpaired medians by up to 8% and hid differences between configs of under ~5%. The winners feed the
per_target."cute:sm90" tables and variants of specs/ (bench/RESULTS.md says which run chose them). `--baseline DIR` adds, per kernel, a module rendered by
another checkout (DIR/<kernel>.py, e.g. main's generated/cute) as one more candidate: the same config
through another template, in the same process.

`--cycle W` times every candidate of a shape and the peer in one rotation instead (W windows of 30 rounds),
so that candidates are compared in the same rounds rather than each through the peer in its own window.

Usage (repo root on PYTHONPATH): python bench/sweep_cute.py --out DIR [--smoke] [--only NAME ...]
  [--rounds N] [--baseline DIR] [--cycle W] [--shapes MxNxK,...]
  -> DIR/sweep-cute.json (one row per candidate and shape), progress on stdout.
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
from bench_cute import FP8_SHAPES, GEMM_SHAPES, assert_matches
from timing import bench_cycle, bench_pairs, cycle_ratios, kernel_cycle, kernel_pairs

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 5


def tile(m: int, n: int, k: int) -> dict:
    return {"m": m, "n": n, "k": k}


def cand(label: str, t: dict, cluster: tuple[int, int] = (1, 1), schedule: str = "cooperative", wgs: int | None = None,
         group_m: int = 8, raster: str = "along_m", shapes: list | None = None, stages: int | None = None,
         epi: int | None = None) -> dict:
    """A candidate config; `shapes` limits it to those (M, N, K) of its group (None: every shape); `stages`
    sets pipeline.ab_stages (None: auto, as many as the SMEM budget holds), `epi` pipeline.epilogue_stages
    (the TMA stores in flight; None: the default)."""
    cute = {"schedule": schedule} | ({"mma_warpgroups": wgs} if wgs else {})
    return {"label": label, "tile": t, "cluster": {"m": cluster[0], "n": cluster[1]}, "cute": cute,
            "group_m": group_m, "raster": raster, "shapes": shapes, "stages": stages, "epi": epi}


WIDE = [(8192, 8192, 8192), (4096, 14336, 4096)]


BF16 = [
    cand("coop 128x256x64 2x1", tile(128, 256, 64), (2, 1)),
    cand("pingpong 128x128x64 2x1", tile(128, 128, 64), (2, 1), schedule="pingpong"),
    cand("coop 128x256x64 1x2", tile(128, 256, 64), (1, 2)),
    cand("coop 256x128x64 2x1", tile(256, 128, 64), (2, 1), wgs=2),
    cand("coop 256x128x64 1x2", tile(256, 128, 64), (1, 2), wgs=2),
    cand("pingpong 128x128x64 1x2", tile(128, 128, 64), (1, 2), schedule="pingpong"),
    cand("coop 128x256x64 2x1 group 16", tile(128, 256, 64), (2, 1), group_m=16, shapes=WIDE),
    cand("coop 128x256x64 2x1 along_n", tile(128, 256, 64), (2, 1), raster="along_n", shapes=WIDE),
    cand("coop 128x256x64 2x1 group 4", tile(128, 256, 64), (2, 1), group_m=4, shapes=WIDE),
]
FP8 = [
    cand("pingpong 128x128x128 2x1", tile(128, 128, 128), (2, 1), schedule="pingpong"),
    cand("coop 64x128x128 1x1", tile(64, 128, 128), shapes=FP8_SHAPES[2:]),
    cand("coop 128x256x128 2x1", tile(128, 256, 128), (2, 1)),
    cand("pingpong 128x128x128 1x2", tile(128, 128, 128), (1, 2), schedule="pingpong"),
    cand("pingpong 128x128x128 1x1", tile(128, 128, 128), schedule="pingpong"),
    cand("coop 128x128x128 1x1", tile(128, 128, 128), wgs=2),
    cand("coop 128x128x128 2x1", tile(128, 128, 128), (2, 1), wgs=2),
    cand("coop 256x128x128 2x1", tile(256, 128, 128), (2, 1), wgs=2, shapes=FP8_SHAPES[:2]),
    cand("pingpong 64x128x128 1x1", tile(64, 128, 128), schedule="pingpong", shapes=FP8_SHAPES[2:]),
    cand("pingpong 128x128x256 2x1", tile(128, 128, 256), (2, 1), schedule="pingpong", shapes=FP8_SHAPES[:2]),
    cand("pingpong 128x128x128 2x1 4 stages", tile(128, 128, 128), (2, 1), schedule="pingpong", stages=4,
         shapes=FP8_SHAPES[:2]),
    cand("pingpong 128x128x128 2x1 group 16", tile(128, 128, 128), (2, 1), schedule="pingpong", group_m=16,
         shapes=FP8_SHAPES[:2]),
    cand("pingpong 128x128x128 2x1 along_n", tile(128, 128, 128), (2, 1), schedule="pingpong", raster="along_n",
         shapes=FP8_SHAPES[:2]),
    cand("pingpong 128x192x128 2x1", tile(128, 192, 128), (2, 1), schedule="pingpong", shapes=FP8_SHAPES[:2]),
    cand("coop 64x128x128 1x1 4 stages", tile(64, 128, 128), stages=4, shapes=FP8_SHAPES[2:]),
    cand("coop 64x256x128 1x1", tile(64, 256, 128), shapes=FP8_SHAPES[2:]),
]
# The TMA stores each warpgroup keeps in flight (pipeline.epilogue_stages), beside the shipped configs.
EPI = {
    "bf16": [cand("coop 128x256x64 2x1", tile(128, 256, 64), (2, 1), shapes=GEMM_SHAPES[1:4]),
             *[cand(f"coop 128x256x64 2x1 epi {e}", tile(128, 256, 64), (2, 1), stages=4, epi=e, shapes=GEMM_SHAPES[1:4])
               for e in (3, 4)],
             cand("pingpong 128x128x64 2x1", tile(128, 128, 64), (2, 1), schedule="pingpong", shapes=WIDE),
             *[cand(f"pingpong 128x128x64 2x1 epi {e}", tile(128, 128, 64), (2, 1), schedule="pingpong", stages=6, epi=e,
                    shapes=WIDE) for e in (3, 4)]],
    "fp8": [cand("pingpong 128x192x128 2x1", tile(128, 192, 128), (2, 1), schedule="pingpong", shapes=FP8_SHAPES[:1]),
            *[cand(f"pingpong 128x192x128 2x1 epi {e}", tile(128, 192, 128), (2, 1), schedule="pingpong", stages=5, epi=e,
                   shapes=FP8_SHAPES[:1]) for e in (3, 4)],
            cand("pingpong 128x128x128 2x1", tile(128, 128, 128), (2, 1), schedule="pingpong", shapes=FP8_SHAPES[1:2]),
            *[cand(f"pingpong 128x128x128 2x1 epi {e}", tile(128, 128, 128), (2, 1), schedule="pingpong", stages=6, epi=e,
                   shapes=FP8_SHAPES[1:2]) for e in (3, 4)],
            cand("coop 64x128x128 1x1", tile(64, 128, 128), shapes=FP8_SHAPES[2:]),
            *[cand(f"coop 64x128x128 1x1 epi {e}", tile(64, 128, 128), epi=e, shapes=FP8_SHAPES[2:]) for e in (3, 4)]],
}
GELU = [c for c in BF16 if c["label"] in ("coop 128x256x64 2x1", "pingpong 128x128x64 2x1", "coop 256x128x64 2x1",
                                          "coop 128x256x64 1x2")]
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
    from specgen.check import check_spec
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_modules
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    k = {key: v for key, v in catalogue()[name].items() if key not in ("variants", "per_target", "triton")}
    k |= {"name": f"{name}_c{index}", "targets": ["cute:sm90"], "tile": c["tile"], "cluster": c["cluster"],
          "cute": c["cute"], "schedule": {**k.get("schedule", {}), "persistent": True, "group_m": c["group_m"],
                                          "raster": c["raster"]}}
    if c.get("stages"):
        k["pipeline"] = {**k.get("pipeline", {}), "ab_stages": c["stages"]}
    if c.get("epi"):
        k["pipeline"] = {**k.get("pipeline", {}), "epilogue_stages": c["epi"]}
    (ls,) = load_text(json.dumps({"kernels": [k]}), f"<sweep:{k['name']}>", ".json")
    errors = [f"{d.rule}: {d.message}" for d in check_spec(ls) if d.severity == "error"]
    if errors:  # the caller prints SKIP with this
        raise ValueError("; ".join(errors))
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


def save(out: Path, rows: list, mode: str) -> None:
    """Rewrite DIR/sweep-cute.json after every measurement, so that a lease cut short keeps what it timed."""
    (out / "sweep-cute.json").write_text(json.dumps(
        {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
         "rounds": ROUNDS, "mode": mode, "rows": rows}, indent=1, default=str) + "\n")


def measure(ours, peer) -> tuple[float, float, float, float, dict, dict]:
    """Both timers paired with the peer (bench/timing.py: call by call for CUPTI, 40 pairs; window by
    window for do_bench, ROUNDS x 2 windows of 25 ms): medians (CUPTI ours, peer in ms, do_bench ours,
    peer) and the two pair summaries, whose median ratios rank the candidates."""
    k = kernel_pairs(ours, peer)
    d = bench_pairs(ours, peer, rounds=2 * ROUNDS + 1, rep=25)
    return k["ours"] / 1e3, k["peer"] / 1e3, d["ours"], d["peer"], k, d


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
                o, p, do, dp, k, d = measure(lambda: fn(*args, out=outbuf), peer)  # noqa: B023
                rows.append(dict(group=group, kernel=name, candidate=c["label"], config=c, ab_stages=stages,
                                 smem=smem, shape=[M, N, K], ours_kernel_ms=o, peer_kernel_ms=p, kernel_ratio=k["ratio"],
                                 ours_ms=do, peer_ms=dp, ratio=d["ratio"], paired_cupti=k, paired_do_bench=d))
                print(f"{group:5} {M}x{N}x{K:<6} {c['label']:34} stages {stages} CUPTI ours {o * 1e3:8.1f} us "
                      f"peer {p * 1e3:8.1f} us paired ratio {k['ratio']:.3f} ({k['ratio_lo']:.3f}-{k['ratio_hi']:.3f}) "
                      f"| do_bench ours {do * 1e3:8.1f} us peer {dp * 1e3:8.1f} us paired ratio {d['ratio']:.3f} "
                      f"({d['ratio_lo']:.3f}-{d['ratio_hi']:.3f}) | peer {list(k['peer_kernels'])}", flush=True)
                save(out, rows, "pairs")


def cycle(group: str, name: str, cands: list[dict], shapes: list[tuple[int, int, int]], windows: int, rows: list,
          out: Path) -> None:
    """Every candidate of a shape and the peer in ONE rotation (timing.kernel_cycle, bench_cycle), `windows`
    times: candidates compared with each other in the same rounds, not through the peer measured in
    another window (the throttle state moved the peer's own time by up to 15% between windows of one call,
    and which kernel led with it)."""
    with tempfile.TemporaryDirectory() as tmp:
        made = {}
        for i, c in enumerate(cands):
            try:
                made[c["label"]] = (c, *render(name, c, Path(tmp), i))
            except Exception as e:  # a candidate the checker or renderer refuses: say so, go on
                print(f"SKIP {name} {c['label']}: {type(e).__name__}: {e}", flush=True)
        for M, N, K in shapes:
            args, peer = operands(group, M, N, K)
            outbuf = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            fns = {}
            for label, (c, fn, _, _) in made.items():
                if c["shapes"] is None or (M, N, K) in c["shapes"]:
                    assert_matches(fn(*args), peer(), f"{name} {label} {M}x{N}x{K}")
                    fns[label] = lambda fn=fn: fn(*args, out=outbuf)  # noqa: B023
            fns["peer"] = peer
            for w in range(windows):
                k = cycle_ratios(kernel_cycle(fns, rounds=30), "peer")
                d = cycle_ratios(bench_cycle(fns, rounds=2 * ROUNDS + 1, rep=25), "peer")
                for label in k:
                    rows.append(dict(group=group, kernel=name, candidate=label, shape=[M, N, K], window=w,
                                     config=made[label][0], ab_stages=made[label][2], kernel_ratio=k[label]["ratio"],
                                     ratio=d[label]["ratio"], paired_cupti=k[label], paired_do_bench=d[label]))
                    print(f"{group:5} {M}x{N}x{K:<6} w{w} {label:34} CUPTI {k[label]['ours']:8.1f} us vs peer "
                          f"{k[label]['peer']:8.1f} ratio {k[label]['ratio']:.3f} ({k[label]['ratio_lo']:.3f}-"
                          f"{k[label]['ratio_hi']:.3f}) | do_bench ratio {d[label]['ratio']:.3f} ({d[label]['ratio_lo']:.3f}-"
                          f"{d[label]['ratio_hi']:.3f})", flush=True)
                save(out, rows, "cycle")


def main() -> None:
    global ROUNDS
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", nargs="*", default=["bf16", "gelu", "fp8"])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--cycle", type=int, default=0, metavar="WINDOWS",
                        help="time every candidate of a shape in one rotation with the peer, WINDOWS times")
    parser.add_argument("--shapes", default="", help="only these shapes, e.g. 8192x8192x8192,4096x14336x4096")
    parser.add_argument("--epi", action="store_true", help="the epilogue-stage candidates (EPI) instead")
    args = parser.parse_args()
    ROUNDS = args.rounds
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    plan = {"bf16": ("gemm_bf16", BF16, GEMM_SHAPES), "gelu": ("gemm_bias_gelu_bf16", GELU, [(8192, 8192, 8192)]),
            "fp8": ("gemm_fp8_rowwise", FP8, FP8_SHAPES)}
    for group in args.only:
        name, cands, shapes = plan[group]
        if args.epi:
            cands = EPI[group]
        if args.shapes:
            shapes = [s for s in shapes if "x".join(map(str, s)) in args.shapes.split(",")]
        if args.cycle:
            cycle(group, name, cands, shapes, args.cycle, rows, args.out)
        else:
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
