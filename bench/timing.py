"""Timers the benchmark scripts share (bench_triton.py, bench_cute.py): do_bench medians, TFLOP/s, and host
cost per call. Imported by scripts run as `python bench/<script>.py`, which puts bench/ on sys.path."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from triton.testing import do_bench


def ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def tflops(M: int, N: int, K: int, t_ms: float) -> float:
    return 2 * M * N * K / (t_ms * 1e-3) / 1e12


def host_us(fn, calls: int = 100, batches: int = 41) -> float:
    """Host microseconds per call: the median over `batches` batches of `calls` calls each (after 200
    warm-up calls), the GPU drained between batches and outside the timing. A batch is far shorter
    than the launch queue, so a call never waits for the GPU: a 64^3 kernel at the GPU's idle clock
    can take longer than its launch, and long batches then time the GPU, not the host (runs with
    batches of thousands of calls moved between two levels with the GPU's clock)."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def host_us_interleaved(fns: dict[str, Callable[[], object]], calls: int = 100, batches: int = 41,
                        contexts: dict[str, Callable[[], AbstractContextManager]] | None = None) -> dict[str, list[float]]:
    """host_us for several calls at once, their batches interleaved: batch i of every call runs before
    batch i + 1 of any, in an order that rotates, so each batch of ours sits within milliseconds of the
    peer's. The host's speed moves by up to 1.5x over seconds (measured: torch.add 6.5 and 9.3 us in
    one run), which sequential figures read as a difference between the calls; the ratio of batch i's
    figures does not. `contexts[name]()` is entered around each batch of that call (outside the timing
    of the others). Returns each call's per-batch microseconds per call."""
    contexts = contexts or {}
    names = list(fns)
    for name in names:
        with contexts.get(name, nullcontext)():
            for _ in range(200):
                fns[name]()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(batches):
        for name in names[i % len(names):] + names[:i % len(names)]:
            fn = fns[name]
            with contexts.get(name, nullcontext)():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return samples


def paired_ratio(samples: dict[str, list[float]], num: str, den: str) -> float:
    """Median over batches of num's time / den's (host_us_interleaved's batches i side by side)."""
    return statistics.median(n / d for n, d in zip(samples[num], samples[den], strict=True))


_FLUSH: dict[int, torch.Tensor] = {}


def flush_l2(device: int = 0) -> None:
    """Evict the GPU's L2 (50 MB on an H200) by writing a 256 MB buffer, as do_bench does between runs."""
    buf = _FLUSH.get(device)
    if buf is None:
        buf = _FLUSH[device] = torch.empty(256 << 20, dtype=torch.int8, device=f"cuda:{device}")
    buf.zero_()


def kernel_us(fn, calls: int = 20) -> float:
    """Device time per call of the kernels `fn` launches, from CUPTI (torch.profiler), with L2 flushed
    before each call: the flush's own kernels (profiled alone first) are left out of the sum."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    flush_l2()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as alone:
        flush_l2()
        torch.cuda.synchronize()
    flush_names = {e.key for e in alone.key_averages() if e.device_time_total > 0}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush_l2()
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages()
                if e.device_time_total > 0 and e.key not in flush_names and not getattr(e, "is_user_annotation", False))
    return total / calls
