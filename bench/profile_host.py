"""Per-call host cost of a tiny GEMM (64^3, bf16, `out` given), in one process, alternating rounds: the
persistent TMA kernel (gemm_bf16) and the pointer kernel (gemm_small_bf16), each with its cached
launch and with the launch cache off (the path before it: the argument tuple, and for TMA the
descriptors and the tensordesc wrapper, built every call), `torch.add` and `torch.mm(out=)`. Each
figure is wall time per call with the GPU never the bottleneck (short batches, the GPU drained
between them); a round interleaves the batches of all six (timing.host_us_interleaved), each ratio
is the median over a round's side-by-side batch pairs, and the medians across rounds are reported
with the ratios the issue asks about. Then where the TMA call's time goes, layer by layer, and with
--profile a cProfile listing.

    python bench/profile_host.py [--rounds 5] [--calls 100] [--out FILE.json] [--profile]

Takes well under a minute on an H200 host (the two kernels compile on first use unless Triton's cache
has them)."""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from timing import host_us, host_us_interleaved, paired_ratio  # noqa: E402  (bench/ is on sys.path: run as a script)


class LaunchCacheOff:
    """While active, `launcher` takes the path it took before cached launches: launch_cached finds
    nothing and the compiled kernels have no expander (descriptors built, the wrapper run, per call)."""

    def __init__(self, launcher) -> None:
        self.launcher = launcher

    def __enter__(self):
        lc = self.launcher
        self.saved = dict(lc._compiled)
        lc._compiled.update({k: (*v[:4], None) for k, v in lc._compiled.items()})
        lc.launch_cached = lambda args_key, device: False
        return self

    def __exit__(self, *exc) -> None:
        lc = self.launcher
        del lc.launch_cached
        lc._compiled.clear()
        lc._compiled.update(self.saved)


def compare(rounds: int, calls: int) -> dict:
    from generated.triton import gemm_bf16 as tma_mod
    from generated.triton import gemm_small_bf16 as ptr_mod

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = w.t()
    ref = torch.mm(a, b)
    for fn in (tma_mod.gemm_bf16, ptr_mod.gemm_small_bf16):
        for _ in range(3):  # compile, build the direct launch, then the cached one
            o.fill_(float("nan"))
            fn(a, b, out=o)
        torch.cuda.synchronize()
        assert torch.allclose(o.float(), ref.float(), atol=0.05, rtol=0.02), f"{fn.__name__} is wrong"
    cached = {"tma": len(tma_mod._launcher._expanded), "pointer": len(ptr_mod._launcher._expanded)}
    print(f"launch cache entries after warm-up: {cached} (1 each: repeat calls take the cached launch)")

    calls_of = {
        "tma": lambda: tma_mod.gemm_bf16(a, b, out=o),
        "tma_no_launch_cache": lambda: tma_mod.gemm_bf16(a, b, out=o),
        "pointer": lambda: ptr_mod.gemm_small_bf16(a, b, out=o),
        "pointer_no_launch_cache": lambda: ptr_mod.gemm_small_bf16(a, b, out=o),
        "torch_add": lambda: torch.add(x, x, out=o),
        "torch_mm": lambda: torch.mm(a, b, out=o),
    }
    contexts = {"tma_no_launch_cache": lambda: LaunchCacheOff(tma_mod._launcher),
                "pointer_no_launch_cache": lambda: LaunchCacheOff(ptr_mod._launcher)}
    pairs = {"tma / pointer (target <= 1.2)": ("tma", "pointer"),
             "pointer / torch_add (target <= 1.3)": ("pointer", "torch_add"),
             "tma_no_launch_cache / tma": ("tma_no_launch_cache", "tma"),
             "pointer_no_launch_cache / pointer": ("pointer_no_launch_cache", "pointer"),
             "tma_no_launch_cache / pointer_no_launch_cache (before)": ("tma_no_launch_cache", "pointer_no_launch_cache"),
             "tma / torch_mm": ("tma", "torch_mm")}
    runs: dict[str, list[float]] = {k: [] for k in calls_of}
    round_ratios: dict[str, list[float]] = {k: [] for k in pairs}
    for r in range(rounds):
        samples = host_us_interleaved(calls_of, calls, contexts=contexts)
        for name, got in samples.items():
            runs[name].append(statistics.median(got))
        for what, (num, den) in pairs.items():
            round_ratios[what].append(paired_ratio(samples, num, den))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in runs.items()) + " us; "
              + ", ".join(f"{pairs[k][0]}/{pairs[k][1]} {v[-1]:.2f}" for k, v in round_ratios.items() if "target" in k))
    med = {k: statistics.median(v) for k, v in runs.items()}
    # each round's ratio is the median over its batch pairs (side by side within milliseconds); the
    # figure is the median of the rounds'
    ratios = {k: statistics.median(v) for k, v in round_ratios.items()}
    print("median us per call: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}")
    return dict(rounds=runs, median_us=med, ratios=ratios, round_ratios=round_ratios, launch_cache_entries=cached)


def layers(calls: int) -> dict[str, float]:
    """Where gemm_bf16's call goes on the cached path (and gemm_small_bf16's, for comparison)."""
    from generated.triton import gemm_bf16 as mod
    from generated.triton import gemm_small_bf16 as ptr_mod
    from specgen.runtime.triton import launch as L

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    mod._launcher._expanded.clear()  # only this function's tensors: the cached launches below are theirs
    ptr_mod._launcher._expanded.clear()
    for _ in range(3):
        mod.gemm_bf16(a, b, out=out)
        ptr_mod.gemm_small_bf16(a, b, out=out)
    got: dict[str, float] = {}
    got["gemm_bf16 whole call"] = host_us(lambda: mod.gemm_bf16(a, b, out=out), calls)
    got["  _run"] = host_us(lambda: mod._run(a, b, out), calls)
    got["  _check"] = host_us(lambda: mod._check(a, b, out), calls)
    (stream, args_key), (c_launch, launch_args) = next(iter(mod._launcher._expanded.items()))
    got["  launch_cached"] = host_us(lambda: mod._launcher.launch_cached(args_key, 0), calls)
    got["  C launch alone"] = host_us(lambda: c_launch(*launch_args), calls)
    got["  args key (3 data_ptr + tuple)"] = host_us(
        lambda: (0, (3, True), a.data_ptr(), 64, 64, 64, b.data_ptr(), 64, 64, out.data_ptr(), 64), calls)
    got["  hooks check"] = host_us(L._hooks_active, calls)
    got["  current device + stream"] = host_us(lambda: (L._current_device(), L._get_stream(0)), calls)
    got["gemm_small_bf16 whole call"] = host_us(lambda: ptr_mod.gemm_small_bf16(a, b, out=out), calls)
    (device, key), (launch, leading, slots, _, _) = next(iter(ptr_mod._launcher._compiled.items()))
    args = (a, b, out, 64, 64, 64, a.stride(-2), b.stride(-1), 64)
    got["  direct launch, tensors (grid 1)"] = host_us(
        lambda: launch(1, 1, 1, stream, *leading, *args, *slots), calls)
    (p_stream, p_key), (p_launch, p_args) = next(iter(ptr_mod._launcher._expanded.items()))
    got["  launch_cached"] = host_us(lambda: ptr_mod._launcher.launch_cached(p_key, 0), calls)
    got["  C launch alone, addresses"] = host_us(lambda: p_launch(*p_args), calls)
    got["torch.compiler.is_compiling"] = host_us(torch.compiler.is_compiling, calls)
    got["torch.empty 64x64"] = host_us(lambda: torch.empty((64, 64), device=a.device, dtype=a.dtype), calls)
    for k, v in got.items():
        print(f"{k} {v:.2f} us")
    return got


def profile(calls: int = 5000) -> None:
    from generated.triton import gemm_bf16 as mod

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    mod.gemm_bf16(a, b, out=out)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        mod.gemm_bf16(a, b, out=out)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100, help="calls per batch (timing.host_us: 41 batches per figure, the GPU drained between)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile listing of gemm_bf16")
    args = parser.parse_args()
    import triton

    result = dict(meta=dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, triton=triton.__version__,
                            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), shape="64x64x64 bf16, out given",
                            calls_per_batch=args.calls),
                  compare=compare(args.rounds, args.calls), layers=layers(args.calls))
    if args.profile:
        profile()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
