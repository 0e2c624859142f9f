"""Does `specgen compile` fill the cache the launcher's first call reuses? In a fresh TRITON_CACHE_DIR:
AOT-compile gemm_relu_f16 for the local arch, then call the kernel (shapes multiples of 16, the
specialization `specgen compile` builds) in a new process and count the kernels Triton had to add."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALL = """
import time, torch
t0 = time.perf_counter()
from generated.triton.gemm_relu_f16 import gemm_relu_f16
a = torch.randn(256, 128, device="cuda", dtype=torch.float16); b = torch.randn(128, 512, device="cuda", dtype=torch.float16)
gemm_relu_f16(a, b); torch.cuda.synchronize()
print(f"first call {time.perf_counter() - t0:.2f} s")
"""


def kernels(cache: Path) -> set[str]:
    return {p.parent.name for p in cache.rglob("*.cubin")}


def main() -> None:
    cache = Path(tempfile.mkdtemp())
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "TRITON_INTERPRET": "0"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "specgen", "compile", "--target", "triton:sm90", "specs/catalogue.toml"],
                   env=env, check=True, capture_output=True)
    aot = kernels(cache)
    print(f"AOT compile: {len(aot)} kernels in {time.perf_counter() - t0:.1f} s")
    out = subprocess.run([sys.executable, "-c", CALL], env=env, check=True, capture_output=True, text=True)
    added = kernels(cache) - aot
    print(out.stdout.strip(), f"; kernels compiled by the first call: {len(added)}")
    cold = Path(tempfile.mkdtemp())
    out = subprocess.run([sys.executable, "-c", CALL], env={**env, "TRITON_CACHE_DIR": str(cold)}, check=True,
                         capture_output=True, text=True)
    print("without AOT:", out.stdout.strip(), f"; kernels compiled: {len(kernels(cold))}")


if __name__ == "__main__":
    main()
