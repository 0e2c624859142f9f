"""Side-by-side benchmark of the rendered CuTe sm90 catalogue against the peers, on one Hopper GPU.

Same process, same data, specgen and peer measured alternately (ROUNDS rounds, median of each), two
timers per pair: `triton.testing.do_bench` (wall time of back-to-back calls, host included) and the
kernel time CUPTI records (torch.profiler, device time of the kernels each call launches, L2 flushed
before each call). Ratios are
peer time / specgen time (> 1: specgen faster):
- bf16 GEMM (gemm_bf16) vs cuBLAS (`a @ w.t()`), five shapes, geomean
- bf16 GEMM + bias + GELU-tanh 8192^3 (gemm_bias_gelu_bf16) vs eager `gelu(addmm(...))`
- fp8 e4m3 rowwise GEMM (gemm_fp8_rowwise) vs `torch._scaled_mm`, three shapes, geomean
- per-call host cost (64^3, out given) vs the Triton pointer kernel (generated.triton.gemm_small_bf16)
- cold start (empty disk cache: import + compile + first call) and warm start (disk cache) per kernel,
  each in a fresh process

Usage (repo root on PYTHONPATH): python bench/bench_cute.py --out DIR  -> DIR/bench-cute.json, .md
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from timing import bench_pairs, host_us, kernel_pairs, kernel_us, ms, tflops

GEMM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048), (8192, 1024, 8192), (4096, 14336, 4096)]
FP8_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (512, 2048, 2048)]
NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise",
         "gemm_residual_bf16"]
ROUNDS = 5


def kernel_ms(fn, calls: int = 20) -> float:
    """Device time per call of the kernels `fn` launches, from CUPTI (torch.profiler), L2 flushed
    before each call (bench/timing.py's timer, shared with the Triton and decode benchmarks)."""
    return kernel_us(fn, calls) / 1e3


def pair(ours, peer) -> dict:
    """Both timers, alternating ours and the peer for ROUNDS rounds: clocks drift with heat. Then both
    timers paired call by call (timing.kernel_pairs) and window by window (timing.bench_pairs): the
    ratio of adjacent measurements, which the clock's swings between windows do not move."""
    a, b, ka, kb = [], [], [], []
    for _ in range(ROUNDS):
        a.append(ms(ours))
        b.append(ms(peer))
        ka.append(kernel_ms(ours))
        kb.append(kernel_ms(peer))
    med = lambda xs: sorted(xs)[ROUNDS // 2]  # noqa: E731
    return dict(ours_ms=med(a), peer_ms=med(b), ours_kernel_ms=med(ka), peer_kernel_ms=med(kb),
                paired_cupti=kernel_pairs(ours, peer), paired_do_bench=bench_pairs(ours, peer))


def assert_matches(ours: torch.Tensor, peer: torch.Tensor, what: str) -> None:
    err = (ours.float() - peer.float()).abs().max().item()
    scale = peer.float().abs().max().item()
    assert err <= 1e-2 * scale, f"{what}: max |ours - peer| = {err} > 1% of max |peer| = {scale}"


def kernel(name: str):
    mod = importlib.import_module(f"generated.cute.{name}")
    return getattr(mod, name), mod


def row(workload: str, kernel_name: str, peer: str, group: str, M: int, N: int, K: int, t: dict) -> dict:
    return dict(workload=workload, kernel=kernel_name, peer=peer, group=group, **t,
                ours_tflops=tflops(M, N, K, t["ours_kernel_ms"]), peer_tflops=tflops(M, N, K, t["peer_kernel_ms"]),
                ratio=t["peer_ms"] / t["ours_ms"], kernel_ratio=t["peer_kernel_ms"] / t["ours_kernel_ms"])


def bench_bf16(rows: list[dict]) -> None:
    fn, _ = kernel("gemm_bf16")
    for M, N, K in GEMM_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        assert_matches(fn(a, w.t()), a @ w.t(), f"bf16 {M}x{N}x{K}")
        t = pair(lambda: fn(a, w.t(), out=out), lambda: torch.matmul(a, w.t(), out=out))
        rows.append(row(f"bf16 GEMM {M}x{N}x{K}", "gemm_bf16", "cuBLAS (a @ w.t())", "bf16", M, N, K, t))


def bench_bias_gelu(rows: list[dict]) -> None:
    fn, _ = kernel("gemm_bias_gelu_bf16")
    M = N = K = 8192
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)

    def eager():
        return torch.nn.functional.gelu(torch.addmm(bias, a, w.t()), approximate="tanh")

    assert_matches(fn(a, w.t(), bias), eager(), "bias+gelu")
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    t = pair(lambda: fn(a, w.t(), bias, out=out), eager)
    rows.append(row("bf16 GEMM + bias + GELU-tanh 8192^3", "gemm_bias_gelu_bf16", "eager gelu(addmm(...))",
                    "bias_gelu", M, N, K, t))


def bench_fp8(rows: list[dict]) -> None:
    fn, _ = kernel("gemm_fp8_rowwise")
    for M, N, K in FP8_SHAPES:
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        peer = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        assert_matches(fn(a, w.t(), sa, sb), peer, f"fp8 {M}x{N}x{K}")
        t = pair(lambda: fn(a, w.t(), sa, sb, out=out),
                 lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
        rows.append(row(f"fp8 e4m3 rowwise {M}x{N}x{K}", "gemm_fp8_rowwise", "torch._scaled_mm", "fp8", M, N, K, t))


def bench_host(rows: list[dict]) -> None:
    triton_mod = importlib.import_module("generated.triton.gemm_small_bf16")
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    for name in ("gemm_small_bf16", "gemm_bf16"):
        fn, _ = kernel(name)
        samples_ours, samples_peer = [], []
        for _ in range(3):  # alternate: the host's clocks drift too
            samples_ours.append(host_us(lambda: fn(a, b, out=out)))
            samples_peer.append(host_us(lambda: triton_mod.gemm_small_bf16(a, b, out=out)))
        t_ours, t_peer = sorted(samples_ours)[1], sorted(samples_peer)[1]
        rows.append(dict(workload=f"host cost per call, 64^3 {name} (out given)", kernel=name,
                         peer="Triton gemm_small_bf16 (pointer kernel)", ours_us=t_ours, peer_us=t_peer,
                         ratio=t_peer / t_ours, group="host"))


START = """
import time, torch
t0 = time.perf_counter()
import generated.cute.{name} as m
t1 = time.perf_counter()
args = {args}
fn = getattr(m, "{name}")
fn(*args); torch.cuda.synchronize()
t2 = time.perf_counter()
print("START", t1 - t0, t2 - t1)
"""


def bench_start(rows: list[dict]) -> None:
    """Cold (empty cache) and warm (disk cache) start of each kernel, each in a fresh process: the import
    (cutlass, torch), then the first call (load or compile, launch)."""
    a16 = "torch.randn(256, 256, device='cuda', dtype=torch.bfloat16)"
    args = {
        "gemm_bf16": f"[{a16}, {a16}.t()]", "gemm_small_bf16": f"[{a16}, {a16}.t()]",
        "gemm_bias_gelu_bf16": f"[{a16}, {a16}.t(), torch.randn(256, device='cuda', dtype=torch.bfloat16)]",
        "gemm_relu_f16": "[torch.randn(256, 256, device='cuda', dtype=torch.float16)] * 2",
        "bmm_bf16": "[torch.randn(2, 256, 256, device='cuda', dtype=torch.bfloat16)] * 2",
        "gemm_fp8_rowwise": "[torch.randn(256, 256, device='cuda').to(torch.float8_e4m3fn), "
                            "torch.randn(256, 256, device='cuda').to(torch.float8_e4m3fn).t(), "
                            "torch.ones(256, device='cuda'), torch.ones(256, device='cuda')]",
        "gemm_residual_bf16": f"[{a16}.t(), {a16}.t(), 1.0, {a16}]",
    }
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "SPECGEN_CUTE_CACHE": cache}
        for name in NAMES:
            times = []
            for _ in ("cold", "warm"):
                proc = subprocess.run([sys.executable, "-c", START.format(name=name, args=args[name])], env=env,
                                      capture_output=True, text=True, timeout=600)
                line = [ln for ln in proc.stdout.splitlines() if ln.startswith("START")]
                assert proc.returncode == 0 and line, proc.stderr[-2000:]
                times.append(tuple(map(float, line[0].split()[1:])))
            (ci, cf), (wi, wf) = times
            rows.append(dict(workload=f"start {name}", kernel=name, peer="-", group="start", cold_import_s=ci,
                             cold_first_call_s=cf, warm_import_s=wi, warm_first_call_s=wf))


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def interval(p: dict) -> str:
    return f"{p['ratio']:.3f}x ({p['ratio_lo']:.3f}-{p['ratio_hi']:.3f})"


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# specgen CuTe sm90 catalogue vs peers: {meta['date']}", "",
             f"GPU: {meta['gpu']} ({meta['sms']} SMs); torch {meta['torch']}, nvidia-cutlass-dsl {meta['cutlass']}, "
             f"TVM-FFI {meta['tvm_ffi']}, CUDA {meta['cuda']}, Python {meta['python']}.",
             f"Timers: do_bench median (warmup 50 ms, rep 300 ms) and CUPTI kernel time (torch.profiler, 20 calls, L2 flushed before each), "
             f"specgen and peer alternately, {ROUNDS} rounds, median of each. Ratio = peer / specgen (> 1: specgen faster).",
             "Paired: the same timers alternated call by call (CUPTI, 40 pairs) and window by window (do_bench, 15 x 40 ms), "
             "median of each pair's ratio with its ~95% interval (bench/timing.py: kernel_pairs, bench_pairs).",
             "", "| workload | peer | specgen kernel | peer kernel | ratio (CUPTI) | ratio (do_bench) | paired CUPTI "
             "| paired do_bench | peer's kernels |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["group"] in ("host", "start"):
            continue
        lines.append(f"| {r['workload']} | {r['peer']} | {r['ours_kernel_ms'] * 1e3:.1f} us ({r['ours_tflops']:.0f} TFLOP/s) "
                     f"| {r['peer_kernel_ms'] * 1e3:.1f} us ({r['peer_tflops']:.0f} TFLOP/s) | {r['kernel_ratio']:.3f}x "
                     f"| {r['ratio']:.3f}x | {interval(r['paired_cupti'])} | {interval(r['paired_do_bench'])} "
                     f"| {'; '.join(f'{k[:90]} {v:.1f} us' for k, v in r['paired_cupti']['peer_kernels'].items())} |")
    lines.append("")
    for group, label in (("bf16", "bf16 GEMM geomean vs cuBLAS"), ("fp8", "fp8 rowwise geomean vs torch._scaled_mm")):
        sel = [r for r in rows if r["group"] == group]
        if sel:
            lines.append(f"- {label}: CUPTI {geomean([r['kernel_ratio'] for r in sel]):.3f}x, "
                         f"do_bench {geomean([r['ratio'] for r in sel]):.3f}x (lowest {min(r['kernel_ratio'] for r in sel):.3f}x); "
                         f"paired CUPTI {geomean([r['paired_cupti']['ratio'] for r in sel]):.3f}x "
                         f"(lowest {min(r['paired_cupti']['ratio'] for r in sel):.3f}x), paired do_bench "
                         f"{geomean([r['paired_do_bench']['ratio'] for r in sel]):.3f}x")
    for r in rows:
        if r["group"] == "host":
            lines.append(f"- {r['workload']}: {r['ours_us']:.2f} us vs {r['peer']} {r['peer_us']:.2f} us")
        elif r["group"] == "start":
            lines.append(f"- {r['workload']}: cold import {r['cold_import_s']:.2f} s + first call {r['cold_first_call_s']:.2f} s; "
                         f"warm import {r['warm_import_s']:.2f} s + first call {r['warm_first_call_s']:.2f} s")
    return "\n".join(lines) + "\n"


def main() -> None:
    global ROUNDS
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=["bf16", "bias_gelu", "fp8", "host", "start"])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="alternating rounds per pair (median taken)")
    args = parser.parse_args()
    ROUNDS = args.rounds
    from importlib.metadata import version

    from specgen.runtime.cute import TVM_FFI

    props = torch.cuda.get_device_properties(0)
    meta = dict(date=datetime.date.today().isoformat(), gpu=props.name, sms=props.multi_processor_count,
                torch=torch.__version__, cutlass=version("nvidia-cutlass-dsl"), tvm_ffi=TVM_FFI,
                cuda=torch.version.cuda, python=platform.python_version())
    rows: list[dict] = []
    for part in args.only:
        {"bf16": bench_bf16, "bias_gelu": bench_bias_gelu, "fp8": bench_fp8, "host": bench_host, "start": bench_start}[part](rows)
        print(markdown(meta, rows), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-cute.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (args.out / "bench-cute.md").write_text(markdown(meta, rows))


if __name__ == "__main__":
    main()
