"""Where a tiny GEMM's per-call host time goes: each layer of the call timed on its own (mean of many
calls, the GPU never the bottleneck), then a cProfile listing. Diagnostic only; bench_triton.py
records the comparison with the peers."""

from __future__ import annotations

import cProfile
import importlib
import pstats
import sys
import time

import torch


def per_call_us(fn, n: int = 20000) -> float:
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def main(name: str) -> None:
    mod = importlib.import_module(f"generated.triton.{name}")
    fn = getattr(mod, name)
    dtype = torch.float16 if mod.SPEC["a"]["dtype"] == "f16" else torch.bfloat16
    a = torch.randn(64, 64, device="cuda", dtype=dtype)
    b = torch.randn(64, 64, device="cuda", dtype=dtype)
    b = b if mod.SPEC["b"]["major"] == "mn" else b.t()
    out = torch.empty(64, 64, device="cuda", dtype=dtype)
    fn(a, b, out=out)
    (device, key), entry = next(iter(mod._launcher._compiled.items()))
    launch, leading, slots, _ = entry
    stream = torch._C._cuda_getCurrentRawStream(0)
    print(f"{name}: whole call {per_call_us(lambda: fn(a, b, out=out)):.2f} us")
    print(f"  _run (no custom-op check) {per_call_us(lambda: mod._run(a, b, out)):.2f} us")
    print(f"  _check {per_call_us(lambda: mod._check(a, b, out)):.2f} us")
    if not mod._launcher.kernel.arg_names[0].endswith("desc"):
        args = (a, b, out, 64, 64, 64, a.stride(-2), b.stride(-2 if mod.SPEC["b"]["major"] == "mn" else -1), 64)
        grid = (1, 1, 1)
        print(f"  direct launch ({getattr(launch, '__name__', type(launch).__name__)}) "
              f"{per_call_us(lambda: launch(1, 1, 1, stream, *leading, *args, *slots)):.2f} us")
        print(f"  launcher call {per_call_us(lambda: mod._launcher(device, key, grid, args, mod._CONSTEXPRS)):.2f} us")
    print(f"  torch.compiler.is_compiling {per_call_us(torch.compiler.is_compiling):.2f} us")
    print(f"  torch.empty 64x64 {per_call_us(lambda: torch.empty((64, 64), device=a.device, dtype=dtype)):.2f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5000):
        fn(a, b, out=out)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["gemm_small_bf16"]:
        main(name)
