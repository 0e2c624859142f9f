"""Timers the benchmark scripts share (bench_triton.py, bench_cute.py, bench_pallas.py): do_bench medians,
TFLOP/s, host cost per call, and the paired timers (`kernel_pairs`, `bench_pairs`) that alternate ours and
the peer call by call. Imported by scripts run as `python bench/<script>.py`, which puts bench/ on sys.path."""

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


def rotation(names: list[str], i: int) -> list[str]:
    """Round i's order of `names`: rotated by i, so that over len(names) rounds each call takes each place
    (for two calls: AB, BA, AB, ...), and no call always runs right after the same one."""
    return names[i % len(names):] + names[:i % len(names)]


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
        for name in rotation(names, i):
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


def _flush_kernel_names() -> set[str]:
    """The names of the kernels flush_l2 launches (profiled alone, after a flush that warms it up), which
    the CUPTI timers leave out of a call's time and use to tell calls apart."""
    from torch.profiler import ProfilerActivity, profile

    flush_l2()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as alone:
        flush_l2()
        torch.cuda.synchronize()
    return {e.key for e in alone.key_averages() if e.device_time_total > 0}


def kernel_us(fn, calls: int = 20) -> float:
    """Device time per call of the kernels `fn` launches, from CUPTI (torch.profiler), with L2 flushed
    before each call: the flush's own kernels (profiled alone first) are left out of the sum."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    flush_names = _flush_kernel_names()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush_l2()
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages()
                if e.device_time_total > 0 and e.key not in flush_names and not getattr(e, "is_user_annotation", False))
    return total / calls


def _median_ci(xs: list[float]) -> tuple[float, float, float]:
    """Median and a distribution-free ~95% interval for it (order statistics n/2 -+ 0.98 sqrt(n))."""
    xs = sorted(xs)
    n = len(xs)
    half = 0.98 * n ** 0.5
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half))
    return statistics.median(xs), xs[lo], xs[hi]


def _pair_summary(ours: list[float], peer: list[float]) -> dict:
    ratios = [p / o for o, p in zip(ours, peer, strict=True)]
    med, lo, hi = _median_ci(ratios)
    return {"ours": statistics.median(ours), "peer": statistics.median(peer), "ratio": med, "ratio_lo": lo,
            "ratio_hi": hi, "pairs": len(ratios)}


def kernel_cycle(fns: dict[str, Callable[[], object]], rounds: int = 40) -> dict[str, dict]:
    """CUPTI kernel time of several calls alternated call by call in one profiler window: each round runs
    every call once, in an order that rotates every round, each call preceded by an L2 flush and a device
    sync (so a call on another stream, jax's, cannot overlap the flush). The card runs at its power limit
    and its SM clock moves 1390-1760 MHz between windows tens of ms apart: medians taken in separate
    windows compare clock states, one round's calls run at (nearly) one clock. (The throttle state still
    shifts between runs, and with it which kernel leads: a kernel drawing more power also lowers the
    others' clock. Compare runs, not only rounds.) Returns per call: "samples", each round's us, and
    "kernels", its kernels by name with their median us (what cuBLAS or XLA picked for the shape, how an
    eager peer's time splits)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    names = list(fns)
    for fn in fns.values():
        fn()
    flush_names = _flush_kernel_names()
    order: list[str] = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(rounds):
            for name in rotation(names, i):
                flush_l2()
                torch.cuda.synchronize()
                fns[name]()
                torch.cuda.synchronize()
                order.append(name)
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    calls: list[list] = []
    for e in kernels:  # one segment per call: the kernels between two flushes
        if e.name in flush_names:
            if not calls or calls[-1]:
                calls.append([])
        elif calls:
            calls[-1].append(e)
    calls = [c for c in calls if c]
    if len(calls) != len(order):
        raise RuntimeError(f"kernel_cycle: {len(calls)} kernel segments for {len(order)} calls (a call launched no "
                           f"kernel, or a kernel shares the flush's name: {sorted(flush_names)})")
    out: dict[str, dict] = {name: {"samples": [], "kernels": {}} for name in names}
    for name, segment in zip(order, calls, strict=True):
        out[name]["samples"].append(sum(e.time_range.elapsed_us() for e in segment))
        for e in segment:
            out[name]["kernels"].setdefault(e.name, []).append(e.time_range.elapsed_us())
    for side in out.values():
        side["kernels"] = {k: statistics.median(v) for k, v in side["kernels"].items()}
    return out


def cycle_ratios(cycle: dict[str, dict], peer: str) -> dict[str, dict]:
    """Per call of a kernel_cycle or bench_cycle: the median over rounds of the peer's time / its time in the
    same round, with a ~95% interval, and the two medians."""
    return {name: _pair_summary(side["samples"], cycle[peer]["samples"]) for name, side in cycle.items() if name != peer}


def kernel_pairs(ours: Callable[[], object], peer: Callable[[], object], pairs: int = 40) -> dict:
    """kernel_cycle of ours and the peer (ABBA): the median over pairs of peer / ours with a ~95% interval,
    medians (us), and each side's kernels by name (`ours_kernels`, `peer_kernels`)."""
    c = kernel_cycle({"ours": ours, "peer": peer}, pairs)
    return _pair_summary(c["ours"]["samples"], c["peer"]["samples"]) | {"ours_kernels": c["ours"]["kernels"],
                                                                        "peer_kernels": c["peer"]["kernels"]}


def bench_cycle(fns: dict[str, Callable[[], object]], rounds: int = 15, rep: int = 40) -> dict[str, dict]:
    """do_bench medians (ms) of several calls in short windows (`rep` ms each), every call once per round
    in an order that rotates every round: do_bench's own figure, paired in time as kernel_cycle is.
    Returns per call {"samples": each round's figure in ms}."""
    names = list(fns)
    out: dict[str, dict] = {name: {"samples": []} for name in names}
    for i in range(rounds):
        for name in rotation(names, i):
            out[name]["samples"].append(do_bench(fns[name], warmup=10, rep=rep, return_mode="median"))
    return out


def bench_pairs(ours: Callable[[], object], peer: Callable[[], object], rounds: int = 15, rep: int = 40) -> dict:
    """bench_cycle of ours and the peer (ABBA): medians (ms) and the median over rounds of peer / ours."""
    c = bench_cycle({"ours": ours, "peer": peer}, rounds, rep)
    return _pair_summary(c["ours"]["samples"], c["peer"]["samples"])
