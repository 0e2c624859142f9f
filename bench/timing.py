"""Timers the benchmark scripts share (bench_triton.py, bench_cute.py): do_bench medians, TFLOP/s, and host
cost per call. Imported by scripts run as `python bench/<script>.py`, which puts bench/ on sys.path."""

from __future__ import annotations

import time

import torch
from triton.testing import do_bench


def ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def tflops(M: int, N: int, K: int, t_ms: float) -> float:
    return 2 * M * N * K / (t_ms * 1e-3) / 1e12


def host_us(fn, calls: int = 20000) -> float:
    """CPU time per call with the GPU never the bottleneck (tiny kernels), median of 5 batches."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        samples.append((time.perf_counter() - start) / (calls // 5) * 1e6)
        torch.cuda.synchronize()
    return sorted(samples)[2]
