"""Side-by-side benchmark of the rendered Triton catalogue against the peers, on one GPU.

Same process, same data, same timer (`triton.testing.do_bench`, median of `rep` ms of runs), peer
beside each kernel, reported as ratios (ours / peer throughput: > 1 means specgen is faster):
- bf16 GEMM (gemm_bf16) vs cuBLAS (`a @ w.t()`), five shapes, geomean
- bf16 GEMM + bias + GELU-tanh (gemm_bias_gelu_bf16) vs eager `gelu(addmm(...))`
- fp8 e4m3 rowwise-scaled GEMM (gemm_fp8_rowwise) vs `torch._scaled_mm`
- per-call host cost of a tiny GEMM vs `torch.add` and vs Triton's own `kernel[grid](...)` path

Usage (repo root on PYTHONPATH): python bench/bench_triton.py --out DIR  -> DIR/bench.json, DIR/bench.md
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import platform
from pathlib import Path

import torch
import triton
import triton.language as tl
from timing import host_us, ms, tflops

GEMM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048), (8192, 1024, 8192), (4096, 14336, 4096)]
FP8_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]


ROUNDS = 5


def ms_pair(ours, peer) -> tuple[float, float]:
    """Median times of ours and the peer, measured alternately for ROUNDS rounds: the card's clocks
    drift with heat over a run, and whichever ran first in a single back-to-back pair would win."""
    a, b = [], []
    for _ in range(ROUNDS):
        a.append(ms(ours))
        b.append(ms(peer))
    return sorted(a)[ROUNDS // 2], sorted(b)[ROUNDS // 2]


def assert_matches(ours: torch.Tensor, peer: torch.Tensor, what: str) -> None:
    """Same result up to output rounding: max error within 1% of the largest magnitude."""
    err = (ours.float() - peer.float()).abs().max().item()
    scale = peer.float().abs().max().item()
    assert err <= 1e-2 * scale, f"{what}: max |ours - peer| = {err} > 1% of max |peer| = {scale}"


def kernel(name: str):
    mod = importlib.import_module(f"generated.triton.{name}")
    return getattr(mod, name), mod


def bench_bf16(rows: list[dict]) -> None:
    fn, _ = kernel("gemm_bf16")
    for M, N, K in GEMM_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        assert_matches(fn(a, w.t()), a @ w.t(), f"bf16 {M}x{N}x{K}")
        t_ours, t_peer = ms_pair(lambda: fn(a, w.t(), out=out), lambda: torch.matmul(a, w.t(), out=out))
        rows.append(dict(workload=f"bf16 GEMM {M}x{N}x{K}", kernel="gemm_bf16", peer="cuBLAS (a @ w.t())",
                         ours_ms=t_ours, peer_ms=t_peer, ours_tflops=tflops(M, N, K, t_ours),
                         peer_tflops=tflops(M, N, K, t_peer), ratio=t_peer / t_ours, group="bf16"))


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
    t_ours, t_peer = ms_pair(lambda: fn(a, w.t(), bias, out=out), eager)
    # The peer's two parts: the best a fused kernel can do is the GEMM alone, so eager / addmm bounds the
    # gain from fusing (when the GEMM mainloop is no faster than cuBLAS's).
    pre = torch.addmm(bias, a, w.t())
    t_addmm, t_gelu = ms_pair(lambda: torch.addmm(bias, a, w.t(), out=out),
                              lambda: torch.nn.functional.gelu(pre, approximate="tanh"))
    rows.append(dict(workload="bf16 GEMM + bias + GELU-tanh 8192^3", kernel="gemm_bias_gelu_bf16",
                     peer="eager gelu(addmm(...))", ours_ms=t_ours, peer_ms=t_peer, ours_tflops=tflops(M, N, K, t_ours),
                     peer_tflops=tflops(M, N, K, t_peer), ratio=t_peer / t_ours, group="bias_gelu"))
    rows.append(dict(workload="(peer's parts) cuBLAS addmm alone vs GELU pass alone", kernel="-",
                     peer="torch.addmm / F.gelu", ours_ms=t_addmm, peer_ms=t_gelu, ours_tflops=tflops(M, N, K, t_addmm),
                     peer_tflops=0.0, ratio=t_peer / t_addmm, group="info"))


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
        t_ours, t_peer = ms_pair(lambda: fn(a, w.t(), sa, sb, out=out),
                                 lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
        rows.append(dict(workload=f"fp8 e4m3 rowwise {M}x{N}x{K}", kernel="gemm_fp8_rowwise", peer="torch._scaled_mm",
                         ours_ms=t_ours, peer_ms=t_peer, ours_tflops=tflops(M, N, K, t_ours),
                         peer_tflops=tflops(M, N, K, t_peer), ratio=t_peer / t_ours, group="fp8"))


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def bench_host(rows: list[dict]) -> None:
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")
    z = torch.empty_like(x)
    t_add = host_us(lambda: torch.add(x, y, out=z))
    t_jit_add = host_us(lambda: _add_kernel[(1,)](x, y, z, 1024, BLOCK=1024))
    # gemm_small_bf16: one program per tile, pointer loads; gemm_bf16: persistent, TMA descriptors
    for name in ("gemm_small_bf16", "gemm_bf16"):
        fn, _ = kernel(name)
        a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16).t()  # both kernels take B K-major
        out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
        t_ours = host_us(lambda: fn(a, b, out=out))
        t_ours_alloc = host_us(lambda: fn(a, b))
        rows.append(dict(workload=f"host cost per call, 64^3 {name} (out given)", kernel=name, peer="torch.add",
                         ours_us=t_ours, peer_us=t_add, ratio=t_add / t_ours, group="host"))
        rows.append(dict(workload=f"host cost per call, 64^3 {name} (out allocated)", kernel=name, peer="torch.add",
                         ours_us=t_ours_alloc, peer_us=t_add, ratio=t_add / t_ours_alloc, group="host"))
        rows.append(dict(workload=f"host cost per call, 64^3 {name} (out given)", kernel=name,
                         peer="Triton kernel[grid] (trivial add kernel)", ours_us=t_ours, peer_us=t_jit_add,
                         ratio=t_jit_add / t_ours, group="host"))


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# specgen Triton catalogue vs peers: {meta['date']}", "",
             f"GPU: {meta['gpu']} ({meta['sms']} SMs); torch {meta['torch']}, triton {meta['triton']}, "
             f"CUDA {meta['cuda']}, Python {meta['python']}.",
             f"Timer: triton.testing.do_bench median (warmup 50 ms, rep 300 ms), specgen and peer measured alternately, "
             f"{ROUNDS} rounds, median of each; host cost: wall time per call "
             "over 20,000 calls of a 64^3 GEMM, median of 5 batches. Ratio = peer time / specgen time "
             "(> 1: specgen faster).", "",
             "| workload | peer | specgen | peer | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        if r["group"] == "info":
            lines.append(f"| eager's parts: addmm {r['ours_ms'] * 1e3:.1f} us + GELU pass {r['peer_ms'] * 1e3:.1f} us | - | - | - "
                         f"| fusion bound (eager / addmm) {r['ratio']:.3f}x |")
            continue
        if "ours_ms" in r:
            ours = f"{r['ours_ms'] * 1e3:.1f} us ({r['ours_tflops']:.0f} TFLOP/s)"
            peer = f"{r['peer_ms'] * 1e3:.1f} us ({r['peer_tflops']:.0f} TFLOP/s)"
        else:
            ours, peer = f"{r['ours_us']:.2f} us", f"{r['peer_us']:.2f} us"
        lines.append(f"| {r['workload']} | {r['peer']} | {ours} | {peer} | {r['ratio']:.3f}x |")
    lines.append("")
    for group, label in (("bf16", "bf16 GEMM geomean vs cuBLAS"), ("fp8", "fp8 rowwise geomean vs torch._scaled_mm")):
        ratios = [r["ratio"] for r in rows if r["group"] == group]
        if ratios:
            lines.append(f"- {label}: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=["bf16", "bias_gelu", "fp8", "host"])
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    meta = dict(date=datetime.date.today().isoformat(), gpu=props.name, sms=props.multi_processor_count,
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                python=platform.python_version())
    rows: list[dict] = []
    for part, fn in (("bf16", bench_bf16), ("bias_gelu", bench_bias_gelu), ("fp8", bench_fp8), ("host", bench_host)):
        if part in args.only:
            fn(rows)
            print(markdown(meta, rows).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    text = markdown(meta, rows)
    (args.out / "bench.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
