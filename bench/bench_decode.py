"""Decode-shaped GEMMs (small M) against cuBLAS and torch._scaled_mm, and the per-call host cost of
the TMA and pointer kernels, on one GPU.

Two steps, because the GPU machine has no pydantic (it cannot render):
  python bench/bench_decode.py render DIR   # here: renders each candidate config as its own module
  python bench/bench_decode.py run DIR OUT  # there: measures them -> OUT/decode.json
Same process, same data; ours and the peer measured alternately (`triton.testing.do_bench` median of
each, median over rounds). Each candidate's result is checked against the peer first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BF16_SHAPES = [(m, n, k) for m in (1, 16, 64, 128) for n, k in ((8192, 8192), (14336, 4096), (4096, 14336))]
FP8_SHAPES = [(16, 8192, 8192), (128, 8192, 8192), (512, 2048, 2048)]
# (tile m, n, k, warps): candidates for small-M configs of the shipped persistent TMA kernels
BF16_CANDIDATES = [(16, 64, 128, 4), (16, 32, 256, 4), (16, 128, 128, 4), (32, 64, 128, 4), (64, 64, 128, 4),
                   (64, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 8)]
FP8_CANDIDATES = [(16, 64, 256, 4), (16, 128, 256, 4), (32, 64, 256, 4), (64, 128, 128, 4), (128, 128, 128, 8),
                  (64, 64, 256, 4)]


def render(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from kernels import catalogue

    from specgen.render.catalogue import render_triton_module
    from specgen.spec.load import load_text

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    cat = catalogue()
    names = []
    for base, cands in (("gemm_bf16", BF16_CANDIDATES), ("gemm_fp8_rowwise", FP8_CANDIDATES)):
        for m, n, k, w in cands:
            spec = json.loads(json.dumps(cat[base]))
            spec.update(name=f"{base}_{m}x{n}x{k}w{w}", targets=["triton:sm90"], tile={"m": m, "n": n, "k": k},
                        triton={**spec["triton"], "num_warps": w})
            (ls,) = load_text(json.dumps({"kernels": [spec]}), f"specs/{base}.toml", ".json")
            (folder / f"{spec['name']}.py").write_text(render_triton_module(ls, ls.spec.targets))
            names.append(spec["name"])
    (folder / "candidates.json").write_text(json.dumps(names))


def run(folder: Path, out: Path) -> None:
    import importlib.util
    import time

    import torch
    import triton
    from triton.testing import do_bench

    def load(path: Path):
        spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    def ms(fn) -> float:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")

    def pair(ours, peer, rounds: int = 3) -> tuple[float, float]:
        a, b = [], []
        for _ in range(rounds):
            a.append(ms(ours))
            b.append(ms(peer))
        return sorted(a)[rounds // 2], sorted(b)[rounds // 2]

    def close(x, y) -> bool:
        return (x.float() - y.float()).abs().max().item() <= 1e-2 * y.float().abs().max().item()

    names = json.loads((folder / "candidates.json").read_text())
    mods = {n: load(folder / f"{n}.py") for n in names}
    root = Path(__file__).resolve().parents[1]
    shipped = {n: load(root / "generated" / "triton" / f"{n}.py") for n in ("gemm_bf16", "gemm_small_bf16", "gemm_fp8_rowwise")}
    rows = []
    t0 = time.time()
    for M, N, K in BF16_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = a @ w.t()
        for name, mod in [*((n, shipped[n]) for n in ("gemm_bf16", "gemm_small_bf16")),
                          *((n, m) for n, m in mods.items() if n.startswith("gemm_bf16_"))]:
            fn = getattr(mod, mod.METADATA["kernel"])
            try:
                ok = close(fn(a, w.t()), ref)
                t, p = pair(lambda fn=fn: fn(a, w.t(), out=o), lambda: torch.matmul(a, w.t(), out=o))
            except Exception as e:  # a candidate that fails to compile is a finding, not a crash
                rows.append(dict(kind="bf16", shape=[M, N, K], kernel=name, error=repr(e)[:300]))
                continue
            rows.append(dict(kind="bf16", shape=[M, N, K], kernel=name, ok=ok, ours_us=t * 1e3, peer_us=p * 1e3,
                             ratio=p / t))
        print(f"bf16 {M}x{N}x{K} done at {time.time() - t0:.0f}s", flush=True)
    for M, N, K in FP8_SHAPES:
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
        o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

        def peer():
            return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        ref = peer()
        for name, mod in [("gemm_fp8_rowwise", shipped["gemm_fp8_rowwise"]),
                          *((n, m) for n, m in mods.items() if n.startswith("gemm_fp8_rowwise_"))]:
            fn = getattr(mod, mod.METADATA["kernel"])
            try:
                ok = close(fn(a, w.t(), sa, sb), ref)
                t, p = pair(lambda fn=fn: fn(a, w.t(), sa, sb, out=o), peer)
            except Exception as e:
                rows.append(dict(kind="fp8", shape=[M, N, K], kernel=name, error=repr(e)[:300]))
                continue
            rows.append(dict(kind="fp8", shape=[M, N, K], kernel=name, ok=ok, ours_us=t * 1e3, peer_us=p * 1e3,
                             ratio=p / t))
        print(f"fp8 {M}x{N}x{K} done at {time.time() - t0:.0f}s", flush=True)

    # Host cost per call, 64^3, out given: alternating batches, median; the TMA kernel with and
    # without the descriptor cache (a fresh launcher entry each way).
    from specgen.runtime.triton import launch as launch_mod

    def host_us(fn, calls: int = 4000) -> float:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
        return sorted(samples)[3]

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    tma, ptr = shipped["gemm_bf16"], shipped["gemm_small_bf16"]
    host = {}
    for _r in range(3):
        host.setdefault("tma_cached", []).append(host_us(lambda: tma.gemm_bf16(a, w.t(), out=o)))
        host.setdefault("pointer", []).append(host_us(lambda: ptr.gemm_small_bf16(a, w.t(), out=o)))
        host.setdefault("torch_add", []).append(host_us(lambda: torch.add(x, x, out=o)))
        host.setdefault("torch_mm", []).append(host_us(lambda: torch.mm(a, w.t(), out=o)))
    cache_fn = launch_mod.with_descriptor_cache
    launch_mod.with_descriptor_cache = lambda f: f
    tma._launcher._compiled.clear()
    for _r in range(3):
        host.setdefault("tma_uncached", []).append(host_us(lambda: tma.gemm_bf16(a, w.t(), out=o)))
    launch_mod.with_descriptor_cache = cache_fn
    # stale-descriptor check on the GPU: new addresses, shapes and strides through the cached launcher
    tma._launcher._compiled.clear()
    stale_ok = True
    for M, N, K in ((64, 64, 64), (128, 64, 64), (64, 128, 64), (64, 64, 128), (64, 64, 64)):
        for _ in range(2):
            a2 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w2 = torch.randn(N, K + 8, device="cuda", dtype=torch.bfloat16)[:, :K]  # a wider stride
            stale_ok &= close(tma.gemm_bf16(a2, w2.t()), a2 @ w2.t())
            stale_ok &= close(tma.gemm_bf16(a, w.t()), a @ w.t())
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                cuda=torch.version.cuda, date=time.strftime("%Y-%m-%d"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode.json").write_text(json.dumps(dict(meta=meta, rows=rows, host_us=host, stale_ok=stale_ok), indent=1))
    print(json.dumps(dict(meta=meta, host=host, stale_ok=stale_ok)))
    best: dict[tuple, dict] = {}
    for row in rows:
        if row.get("ok"):
            key = (row["kind"], *row["shape"])
            if key not in best or row["ratio"] > best[key]["ratio"]:
                best[key] = row
    for key, row in best.items():
        print(key, row["kernel"], f"{row['ours_us']:.1f} vs {row['peer_us']:.1f} us", f"{row['ratio']:.3f}x")


if __name__ == "__main__":
    if sys.argv[1] == "render":
        render(Path(sys.argv[2]))
    else:
        run(Path(sys.argv[2]), Path(sys.argv[3]))
