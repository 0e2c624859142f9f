"""The project's one timer: CUPTI kernel time (torch.profiler) of several calls alternated call by call
in one profiler window. Each round runs every call once, in an order that rotates every round, each
call preceded by an L2 flush and a device sync (so a call on another stream, jax's, cannot overlap the
flush); a round's ratio is baseline / candidate. The card runs at its power limit and its SM clock
moves 1390-1760 MHz between windows tens of ms apart: medians taken in separate windows compare clock
states, one round's calls run at (nearly) one clock (BASELINES.md, "paired kernel times").

torch is imported inside the functions: `specgen bench` imports this module, `check` and `render` never do.
A `Timer` is what run.py and the tuner call; `CuptiTimer` is the GPU's, tests inject a fake."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from specgen.bench.stats import rotation

FLUSH_BYTES = 256 << 20  # > 5x the H200's 50 MB L2, as do_bench flushes
# How the L2 is emptied before each call. `write` zeroes the buffer (do_bench's and nvbench's flush): the L2
# is left full of dirty lines, which the next call writes back to DRAM while it runs, so a kernel that
# streams DRAM pays that write-back and one that does not hardly notices it. `read` reduces over the buffer:
# the L2 is left holding clean lines, as ncu's cache control leaves it (bench/RESULTS.md, session 14).
Flush = Literal["write", "read"]
FLUSH_ROW = 4096  # int32 words per row of the read flush's reduction (16384 rows, a 64 KB result)
FLUSHES: tuple[Flush, ...] = ("write", "read")


@dataclass(frozen=True)
class Call:
    """One timed call: `key` names what it runs (a kernel and config, a peer), `fn` launches it."""

    key: str
    fn: Callable[[], object]


class Timer(Protocol):
    def cycle(self, calls: dict[str, Call], rounds: int) -> dict[str, list[float]]:
        """Per call name, each round's microseconds (rounds paired across the calls)."""
        ...


_FLUSH: dict[int, tuple[Any, Any, Any]] = {}  # per device: the buffer, its rows as int32, the rows' maxima


def flush_l2(device: int = 0, how: Flush = "write") -> None:
    """Evict the GPU's L2 through a 256 MB buffer: `write` zeroes it, `read` takes its max (see Flush)."""
    import torch

    if how not in FLUSHES:
        raise ValueError(f"flush_l2: how must be one of {', '.join(FLUSHES)}, not {how!r}")
    held = _FLUSH.get(device)
    if held is None:
        buf = torch.zeros(FLUSH_BYTES, dtype=torch.int8, device=f"cuda:{device}")
        rows = buf.view(torch.int32).view(-1, FLUSH_ROW)
        held = _FLUSH[device] = (buf, rows, torch.empty(rows.shape[0], dtype=torch.int32, device=f"cuda:{device}"))
    buf, rows, result = held
    if how == "write":
        buf.zero_()
    else:
        # each row's max: one reduction kernel. A whole-buffer max also launches a memset, a kernel name that
        # cuBLAS's calls launch too, and the timer tells calls apart by the flush's kernel names.
        torch.amax(rows, dim=1, out=result)


def _flush_kernel_names(how: Flush) -> set[str]:
    """The kernels flush_l2 launches (profiled alone, after a warm-up flush): the timer leaves them out of
    a call's time and uses them to tell calls apart."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush_l2(how=how)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as alone:
        flush_l2(how=how)
        torch.cuda.synchronize()
    return {e.key for e in alone.key_averages() if e.device_time_total > 0}


def kernel_cycle(fns: dict[str, Callable[[], object]], rounds: int = 40, flush: Flush = "write") -> dict[str, dict]:
    """CUPTI kernel time of each call, `rounds` rounds, every call once per round in a rotating order, L2
    flushed (`flush`) before each. Returns per call "samples" (each round's us: the sum of the kernels it
    launched) and "kernels" (its kernels by name with their median us: what cuBLAS or XLA picked for the
    shape, how an eager peer's time splits)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    names = list(fns)
    for fn in fns.values():
        fn()
    flush_names = _flush_kernel_names(flush)
    order: list[str] = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(rounds):
            for name in rotation(names, i):
                flush_l2(how=flush)
                torch.cuda.synchronize()
                fns[name]()
                torch.cuda.synchronize()
                order.append(name)
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    segments: list[list] = []
    for e in kernels:  # one segment per call: the kernels between two flushes
        if e.name in flush_names:
            if not segments or segments[-1]:
                segments.append([])
        elif segments:
            segments[-1].append(e)
    segments = [s for s in segments if s]
    if len(segments) != len(order):
        raise RuntimeError(f"kernel_cycle: {len(segments)} kernel segments for {len(order)} calls (a call launched "
                           f"no kernel, or a kernel shares the flush's name: {sorted(flush_names)})")
    out: dict[str, dict] = {name: {"samples": [], "kernels": {}} for name in names}
    for name, segment in zip(order, segments, strict=True):
        out[name]["samples"].append(sum(e.time_range.elapsed_us() for e in segment))
        for e in segment:
            out[name]["kernels"].setdefault(e.name, []).append(e.time_range.elapsed_us())
    for side in out.values():
        side["kernels"] = {k: statistics.median(v) for k, v in side["kernels"].items()}
    return out


def jax_call(f: Callable[..., object], *args: object) -> Callable[[], object]:
    """A JAX call for kernel_cycle: XLA's stream is not torch's, so the call waits for torch's work (the flush)
    first and is waited for (every array of its result) before the timer moves on."""
    import jax
    import torch

    return lambda: (torch.cuda.synchronize(), jax.block_until_ready(f(*args)))


def host_us_interleaved(fns: dict[str, Callable[[], object]], calls: int = 100,
                        batches: int = 41) -> dict[str, list[float]]:
    """Host microseconds per call of several calls, their batches interleaved: batch i of every call runs
    before batch i + 1 of any, in a rotating order, so that each batch of ours sits within milliseconds of
    the peer's (the host's speed moves by up to 1.5x over seconds; the ratio of batch i's figures does not).
    Returns each call's per-batch microseconds per call; `stats.paired` turns two of them into a ratio."""
    import torch

    names = list(fns)
    for name in names:
        for _ in range(200):
            fns[name]()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(batches):
        for name in rotation(names, i):
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return samples


class CuptiTimer:
    """The GPU's Timer: kernel_cycle under one L2 flush. `kernels` keeps the last cycle's kernel names per
    call key."""

    def __init__(self, flush: Flush = "write") -> None:
        self.flush = flush
        self.kernels: dict[str, dict[str, float]] = {}

    def cycle(self, calls: dict[str, Call], rounds: int) -> dict[str, list[float]]:
        c = kernel_cycle({name: call.fn for name, call in calls.items()}, rounds, self.flush)
        for name, call in calls.items():
            self.kernels[call.key] = c[name]["kernels"]
        return {name: c[name]["samples"] for name in calls}
