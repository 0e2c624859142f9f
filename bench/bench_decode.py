"""Decode-shaped GEMMs (small M) against cuBLAS and torch._scaled_mm, and the per-call host cost of
the TMA and pointer kernels, on one GPU.

Three steps, because the GPU machine has no pydantic (it cannot render):
  python bench/bench_decode.py render DIR [4]   # here: renders each candidate config (of sweep 3 or 4)
  python bench/bench_decode.py sweep DIR OUT    # there: every candidate on its shapes -> OUT/sweep.json
  python bench/bench_decode.py run OUT          # there: the shipped modules -> OUT/decode.json, decode.md
Same process, same data; ours and the peer measured alternately. Each kernel's result is checked
against the peer first. The sweep times with `triton.testing.do_bench` (L2 flushed between runs) to
pick configs; `run` records both timers per pair, `do_bench` medians and the CUPTI kernel time
(torch.profiler, L2 flushed before each call: bench/timing.py), median over ROUNDS alternating rounds.
Ratios are peer time / ours (> 1: specgen faster).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

BF16_SHAPES = [(m, n, k) for m in (1, 16, 64, 128) for n, k in ((8192, 8192), (14336, 4096), (4096, 14336))]
FP8_SHAPES = [(16, 8192, 8192), (128, 8192, 8192), (512, 2048, 2048)]
# (tile m, n, k, warps, split_k, ab_stages or 0 for auto, M range, swap_ab): candidates for small-M configs
# of the shipped persistent TMA kernels, each tried on the sweep's shapes of its M range ("small":
# M <= 16, "mid": M > 16). The first two sweeps (2026-11-22, results/2026-11-22-h200-decode-sweep{1,2}.json:
# 74 candidates) varied tile, stages, warps and split-K 1/2/4; this third one (session 3) tries
# triton.swap_ab (wgmma with tile.n as its rows for tile.m = 16), split counts that fill the 132 SMs in
# whole waves (128x256 split-K 4 at N = 8192: 128 work units), 128x64 tiles without split-K, deeper
# pipelines and BLOCK_K 256/512 for small M, on the shapes still short of the targets (SWEEP_SHAPES).
BF16_CANDIDATES = [
    (16, 64, 128, 4, 1, 0, "small", True), (16, 64, 128, 4, 1, 6, "small", True),
    (16, 128, 128, 4, 1, 0, "small", True), (16, 128, 128, 4, 2, 0, "small", True),
    (16, 64, 256, 4, 1, 4, "small", True), (16, 64, 256, 4, 2, 0, "small", True),
    (16, 128, 64, 4, 1, 8, "small", True), (16, 64, 512, 4, 1, 2, "small", True),
    (16, 128, 128, 4, 1, 5, "small", True), (16, 256, 64, 4, 1, 5, "small", True),
    (64, 128, 64, 4, 1, 6, "mid", False), (64, 128, 64, 8, 1, 5, "mid", False), (64, 128, 128, 4, 1, 4, "mid", False),
    (64, 128, 64, 4, 1, 5, "mid", True), (128, 128, 64, 8, 1, 6, "mid", False), (128, 128, 128, 8, 1, 3, "mid", False),
    (128, 256, 64, 8, 4, 3, "mid", False), (128, 128, 64, 8, 2, 6, "mid", False), (128, 64, 128, 4, 1, 4, "mid", False),
    (128, 64, 256, 4, 1, 2, "mid", False), (128, 128, 128, 8, 2, 0, "mid", True), (128, 128, 64, 8, 3, 6, "mid", False),
]
FP8_CANDIDATES = [
    (16, 64, 256, 4, 1, 6, "small", True), (16, 64, 256, 4, 1, 4, "small", True), (16, 128, 256, 4, 1, 4, "small", True),
    (16, 64, 512, 4, 1, 3, "small", True), (16, 128, 128, 4, 1, 6, "small", True), (16, 64, 256, 4, 2, 4, "small", True),
    (16, 128, 256, 4, 2, 0, "small", True), (16, 64, 512, 4, 1, 4, "small", False), (16, 256, 128, 4, 1, 5, "small", True),
    (128, 256, 128, 8, 4, 3, "mid", False), (128, 64, 256, 4, 1, 4, "mid", False), (128, 128, 128, 8, 2, 6, "mid", False),
    (128, 64, 512, 4, 1, 2, "mid", False), (128, 128, 128, 8, 3, 6, "mid", False),
]
# A fourth, smaller sweep around sweep 3's winners (the shipped variants re-chosen from it sit beside them):
# deeper or wider pipelines for fp8 M <= 16 swapped, and neighbours of 64x128x128 for bf16 M = 128.
SWEEP4 = (
    [(16, 64, 256, 4, 1, 5, "small", True), (16, 64, 128, 4, 1, 8, "small", True),
     (64, 128, 128, 4, 1, 3, "mid", False), (64, 128, 64, 4, 1, 8, "mid", False), (64, 128, 256, 4, 1, 2, "mid", False),
     (64, 128, 128, 8, 1, 4, "mid", False), (64, 128, 128, 4, 1, 3, "mid", True), (128, 128, 64, 8, 1, 4, "mid", False)],
    [(16, 64, 512, 4, 1, 4, "small", True), (16, 64, 512, 4, 1, 5, "small", True), (16, 64, 1024, 4, 1, 2, "small", True),
     (16, 128, 512, 4, 1, 2, "small", True), (16, 64, 256, 4, 1, 8, "small", True),
     (128, 64, 256, 4, 1, 3, "mid", False), (128, 64, 256, 8, 1, 4, "mid", False), (64, 128, 256, 4, 1, 4, "mid", False),
     (128, 64, 128, 4, 1, 8, "mid", False)],
    {("bf16", 16, 8192, 8192), ("bf16", 128, 8192, 8192), ("bf16", 128, 14336, 4096), ("fp8", 16, 8192, 8192),
     ("fp8", 128, 8192, 8192)},
)
# The sweep visits only these shapes (the run visits them all).
SWEEP_SHAPES = {("bf16", 1, 8192, 8192), ("bf16", 16, 8192, 8192), ("bf16", 1, 4096, 14336), ("bf16", 16, 14336, 4096),
                ("bf16", 64, 14336, 4096), ("bf16", 128, 8192, 8192), ("bf16", 128, 14336, 4096),
                ("fp8", 16, 8192, 8192), ("fp8", 128, 8192, 8192)}
ROUNDS = 5


def render(folder: Path, which: str = "3") -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from kernels import catalogue

    from specgen.check import check_spec
    from specgen.render.catalogue import render_module
    from specgen.spec.load import load_text

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    cat = catalogue()
    names = []
    bf16, fp8, shapes = SWEEP4 if which == "4" else (BF16_CANDIDATES, FP8_CANDIDATES, SWEEP_SHAPES)
    for base, cands in (("gemm_bf16", bf16), ("gemm_fp8_rowwise", fp8)):
        for m, n, k, w, s, st, scope, swap in cands:
            spec = json.loads(json.dumps(cat[base]))
            for key in ("variants", "per_target"):  # the candidate is the only config
                spec.pop(key, None)
            spec.update(name=f"{base}_{m}x{n}x{k}w{w}s{s}p{st}{'x' if swap else ''}_{scope}", targets=["triton:sm90"],
                        tile={"m": m, "n": n, "k": k},
                        triton={**spec["triton"], "num_warps": w, **({"swap_ab": True} if swap else {})},
                        schedule={**spec["schedule"], "split_k": s})
            if st:
                spec["pipeline"] = {"ab_stages": st}
            (ls,) = load_text(json.dumps({"kernels": [spec]}), f"specs/{base}.toml", ".json")
            errors = [d for d in check_spec(ls) if d.severity == "error"]
            if errors:
                print(f"skipped {spec['name']}: {errors[0].rule} {errors[0].message}")
                continue
            (folder / f"{spec['name']}.py").write_text(render_module(ls, ls.spec.targets))
            names.append(spec["name"])
    (folder / "candidates.json").write_text(json.dumps(dict(names=names, shapes=sorted(shapes))))


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _close(x, y) -> bool:
    return (x.float() - y.float()).abs().max().item() <= 1e-2 * y.float().abs().max().item()


def _problems():
    """(kind, (M, N, K), ours(fn, out), peer(out), ref): the same data for every kernel of a shape."""
    import torch

    for M, N, K in BF16_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        yield ("bf16", (M, N, K), lambda fn, out=None, a=a, w=w: fn(a, w.t(), out=out),
               lambda a=a, w=w, o=o: torch.matmul(a, w.t(), out=o), a @ w.t(), o)
    for M, N, K in FP8_SHAPES:
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
        o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

        def peer(a=a, w=w, sa=sa, sb=sb):
            return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        yield ("fp8", (M, N, K), lambda fn, out=None, a=a, w=w, sa=sa, sb=sb: fn(a, w.t(), sa, sb, out=out), peer,
               peer(), o)


def _meta() -> dict:
    import platform

    import torch
    import triton

    return dict(gpu=torch.cuda.get_device_name(), sms=torch.cuda.get_device_properties(0).multi_processor_count,
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                python=platform.python_version(), date=time.strftime("%Y-%m-%d"))


def sweep(folder: Path, out: Path) -> None:
    """Every candidate on the SWEEP_SHAPES it could serve: do_bench (warmup 10, rep 40 ms) alternating
    with the peer, median of ROUNDS rounds; results checked against the peer first."""
    from triton.testing import do_bench

    def ms(fn) -> float:
        return do_bench(fn, warmup=10, rep=40, return_mode="median")

    listed = json.loads((folder / "candidates.json").read_text())
    names, shapes = listed["names"], {tuple(x) for x in listed["shapes"]}
    mods = {n: _load(folder / f"{n}.py", f"cand_{n}") for n in names}
    root = Path(__file__).resolve().parents[1]
    for n in ("gemm_bf16", "gemm_fp8_rowwise"):  # the shipped module (its variants) beside the candidates
        mods[f"{n}_shipped"] = _load(root / "generated" / "triton" / f"{n}.py", f"shipped_{n}")
    rows, t0 = [], time.time()
    for kind, (M, N, K), ours, peer, ref, o in _problems():
        if (kind, M, N, K) not in shapes:
            continue
        base = "gemm_bf16_" if kind == "bf16" else "gemm_fp8_rowwise_"
        for name, mod in mods.items():
            if not name.startswith(base):
                continue
            if not name.endswith("_shipped") and name.endswith("_small") != (M <= 16):
                continue
            fn = getattr(mod, mod.METADATA["kernel"])
            try:
                ok = _close(ours(fn), ref)
                a_ms, p_ms = [], []
                for _ in range(ROUNDS):
                    a_ms.append(ms(lambda fn=fn: ours(fn, o)))
                    p_ms.append(ms(peer))
            except Exception as e:  # a candidate that fails to compile is a finding, not a crash
                rows.append(dict(kind=kind, shape=[M, N, K], kernel=name, error=repr(e)[:300]))
                continue
            t, p = sorted(a_ms)[ROUNDS // 2], sorted(p_ms)[ROUNDS // 2]
            rows.append(dict(kind=kind, shape=[M, N, K], kernel=name, ok=ok, ours_us=t * 1e3, peer_us=p * 1e3,
                             ratio=p / t))
        print(f"{kind} {M}x{N}x{K} done at {time.time() - t0:.0f}s", flush=True)
        out.mkdir(parents=True, exist_ok=True)  # written after every shape: a cut-off sweep keeps its rows
        (out / "sweep.json").write_text(json.dumps(dict(meta=_meta(), rows=rows), indent=1))
    for key in sorted({(r["kind"], *r["shape"]) for r in rows}):
        ranked = sorted((r for r in rows if (r["kind"], *r["shape"]) == key and r.get("ok")), key=lambda r: -r["ratio"])
        print(key, "  ".join(f"{r['kernel'].split('_')[-2]} {r['ratio']:.3f}" for r in ranked[:6]))
    for r in rows:
        if not r.get("ok", False):
            print("FAILED", r)


def run(out: Path) -> None:
    """The shipped gemm_bf16 and gemm_fp8_rowwise (their selected variants) vs the peers, both timers;
    the per-call host cost; a GPU check that descriptors and split-K workspaces never go stale."""
    import torch
    from triton.testing import do_bench

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from timing import kernel_us

    def ms(fn) -> float:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")

    root = Path(__file__).resolve().parents[1]
    shipped = {n: _load(root / "generated" / "triton" / f"{n}.py", f"shipped_{n}")
               for n in ("gemm_bf16", "gemm_small_bf16", "gemm_fp8_rowwise")}
    rows = []
    for kind, (M, N, K), ours, peer, ref, o in _problems():
        mod = shipped["gemm_bf16" if kind == "bf16" else "gemm_fp8_rowwise"]
        fn = getattr(mod, mod.METADATA["kernel"])
        try:
            ok = _close(ours(fn), ref)
            again = ours(fn)
            deterministic = bool(torch.equal(again, ours(fn)))
            a_ms, p_ms, a_k, p_k = [], [], [], []
            for _ in range(ROUNDS):
                a_ms.append(ms(lambda fn=fn: ours(fn, o)))
                p_ms.append(ms(peer))
                a_k.append(kernel_us(lambda fn=fn: ours(fn, o)))
                p_k.append(kernel_us(peer))
        except Exception as e:  # recorded, and the other shapes still run
            rows.append(dict(kind=kind, shape=[M, N, K], error=repr(e)[:400]))
            print("FAILED", rows[-1], flush=True)
            continue
        med = lambda xs: sorted(xs)[ROUNDS // 2]  # noqa: E731
        row = dict(kind=kind, shape=[M, N, K], kernel=mod.METADATA["kernel"], config=_config(mod, M, N, K), ok=ok,
                   bit_identical_rerun=deterministic,
                   ours_us=med(a_ms) * 1e3, peer_us=med(p_ms) * 1e3, ours_kernel_us=med(a_k), peer_kernel_us=med(p_k))
        row.update(ratio=row["peer_us"] / row["ours_us"], kernel_ratio=row["peer_kernel_us"] / row["ours_kernel_us"])
        rows.append(row)
        print(f"{kind} {M}x{N}x{K}: CUPTI {row['ours_kernel_us']:.1f} vs {row['peer_kernel_us']:.1f} us "
              f"{row['kernel_ratio']:.3f}x; do_bench {row['ours_us']:.1f} vs {row['peer_us']:.1f} us {row['ratio']:.3f}x",
              flush=True)
    host = host_cost(shipped)
    stale_ok = stale_check(shipped["gemm_bf16"])
    out.mkdir(parents=True, exist_ok=True)
    result = dict(meta=_meta(), rows=rows, host_us=host, stale_ok=stale_ok)
    (out / "decode.json").write_text(json.dumps(result, indent=1))
    (out / "decode.md").write_text(markdown(result))
    print(markdown(result))


def _config(mod, M: int, N: int, K: int) -> str:
    """The config the shipped module's launcher picks for a problem (its variants in order)."""
    for v in mod.METADATA.get("variants", ()):
        bounds = {"M": v["when"].get("m_max"), "N": v["when"].get("n_max"), "K": v["when"].get("k_max")}
        if all(b is None or x <= b for x, b in ((M, bounds["M"]), (N, bounds["N"]), (K, bounds["K"]))):
            split = f" split-K {v['split_k']}" if v.get("split_k", 1) > 1 else ""
            return "x".join(map(str, v["tile"])) + split + (" swap_ab" if v.get("swap_ab") else "")
    return "default"


def host_cost(shipped: dict) -> dict[str, list[float]]:
    """Per-call host time, 64^3, out given (timing.host_us: short batches, the GPU drained between
    them), 3 alternating rounds (64^3 takes gemm_bf16's M <= 64 and K <= 4096 variant: no split-K)."""
    import torch
    from timing import host_us  # bench/ is on sys.path (run as a script)

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    tma, ptr = shipped["gemm_bf16"], shipped["gemm_small_bf16"]
    host: dict[str, list[float]] = {}
    for _r in range(3):
        host.setdefault("tma", []).append(host_us(lambda: tma.gemm_bf16(a, w.t(), out=o)))
        host.setdefault("pointer", []).append(host_us(lambda: ptr.gemm_small_bf16(a, w.t(), out=o)))
        host.setdefault("torch_add", []).append(host_us(lambda: torch.add(x, x, out=o)))
        host.setdefault("torch_mm", []).append(host_us(lambda: torch.mm(a, w.t(), out=o)))
    return host


def stale_check(tma) -> bool:
    """New addresses, shapes and strides between calls through the cached launcher, split-K shapes
    included: every result must match cuBLAS."""
    import torch

    ok = True
    for M, N, K in ((64, 64, 64), (128, 64, 64), (64, 128, 64), (64, 64, 128), (64, 64, 64), (16, 4096, 4096),
                    (1, 4096, 8192), (128, 4096, 8192), (128, 2048, 8192)):
        for _ in range(2):
            a2 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w2 = torch.randn(N, K + 8, device="cuda", dtype=torch.bfloat16)[:, :K]  # a wider stride
            ok &= _close(tma.gemm_bf16(a2, w2.t()), a2 @ w2.t())
    return bool(ok)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def markdown(result: dict) -> str:
    m, rows = result["meta"], result["rows"]
    lines = [f"Decode shapes, {m['gpu']} ({m['sms']} SMs), torch {m['torch']}, triton {m['triton']}, CUDA {m['cuda']}, "
             f"{m['date']}. Ratio = peer / ours.", "",
             "| workload | config | checked | rerun bit-identical | ours CUPTI us | peer CUPTI us | ratio CUPTI | "
             "ours do_bench us | peer do_bench us | ratio do_bench |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    rows = [r for r in rows if "error" not in r]
    for r in rows:
        M, N, K = r["shape"]
        lines.append(f"| {r['kind']} {M}x{N}x{K} | {r.get('config', '')} | {r['ok']} | {r['bit_identical_rerun']} | "
                     f"{r['ours_kernel_us']:.1f} | {r['peer_kernel_us']:.1f} | "
                     f"{r['kernel_ratio']:.3f}x | {r['ours_us']:.1f} | {r['peer_us']:.1f} | {r['ratio']:.3f}x |")
    bf = [r for r in rows if r["kind"] == "bf16"]
    lines += ["", f"bf16 geomean: CUPTI {geomean([r['kernel_ratio'] for r in bf]):.3f}x, do_bench "
              f"{geomean([r['ratio'] for r in bf]):.3f}x; lowest CUPTI {min(r['kernel_ratio'] for r in bf):.3f}x, "
              f"do_bench {min(r['ratio'] for r in bf):.3f}x"]
    h = {k: sorted(v)[1] for k, v in result["host_us"].items()}
    lines += [f"host us per call (64^3, out given, middle of 3 rounds): TMA {h['tma']:.1f}, pointer {h['pointer']:.1f}, "
              f"torch.add {h['torch_add']:.1f}, torch.mm {h['torch_mm']:.1f}; TMA/pointer {h['tma'] / h['pointer']:.2f}x, "
              f"pointer/add {h['pointer'] / h['torch_add']:.2f}x; stale check ok: {result['stale_ok']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1] == "render":
        render(Path(sys.argv[2]), *sys.argv[3:4])
    elif sys.argv[1] == "sweep":
        sweep(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        run(Path(sys.argv[2]))
