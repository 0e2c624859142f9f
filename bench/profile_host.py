"""Where a tiny GEMM's per-call host time goes: cProfile over many calls of a catalogue kernel."""

from __future__ import annotations

import cProfile
import importlib
import pstats
import sys
import time

import torch

name = sys.argv[1] if len(sys.argv) > 1 else "gemm_relu_f16"
mod = importlib.import_module(f"generated.triton.{name}")
fn = getattr(mod, name)
dtype = torch.float16 if "f16" in name and "bf16" not in name else torch.bfloat16
a = torch.randn(64, 64, device="cuda", dtype=dtype)
b = torch.randn(64, 64, device="cuda", dtype=dtype)
b = b if mod.SPEC["b"]["major"] == "mn" else b.t()
out = torch.empty(64, 64, device="cuda", dtype=dtype)
for _ in range(100):
    fn(a, b, out=out)
torch.cuda.synchronize()
print("compiled entries:", list(mod._launcher._compiled))
n = 5000
t0 = time.perf_counter()
for _ in range(n):
    fn(a, b, out=out)
print(f"{name}: {(time.perf_counter() - t0) / n * 1e6:.2f} us/call")
prof = cProfile.Profile()
prof.enable()
for _ in range(n):
    fn(a, b, out=out)
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(14)
