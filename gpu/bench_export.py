"""The C++ export on the GPU (issue 23): cold start (process start to first result) of a C++ program
calling the exported gemm_bf16 vs the Python torch launcher with an empty CuTe cache and from the disk
cache; host cost per call at 64^3 (asynchronous launches, `out` given) of the exported C entry (timed
inside the C++ program) vs the torch entry. Writes <out>/bench-export.json.

    python gpu/bench_export.py --out out/gpu      (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COLD = """
import sys, time
t0 = float(sys.argv[1])
import torch
from generated.cute.gemm_bf16 import gemm_bf16
y = gemm_bf16(torch.ones(256, 128, dtype=torch.bfloat16, device="cuda"),
              torch.ones(512, 128, dtype=torch.bfloat16, device="cuda").t())
torch.cuda.synchronize()
print(time.time() - t0)
"""
HOST = """
import time, torch
from generated.cute.gemm_bf16 import gemm_bf16
a, b = torch.ones(64, 64, dtype=torch.bfloat16, device="cuda"), torch.ones(64, 64, dtype=torch.bfloat16, device="cuda").t()
out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
for _ in range(100):
    gemm_bf16(a, b, out=out)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10000):
    gemm_bf16(a, b, out=out)
print((time.perf_counter() - t) / 10000 * 1e6)
torch.cuda.synchronize()
"""



def _pythonpath() -> str:
    """The repo first, then the caller's PYTHONPATH (where the GPU box's own packages live)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

def python_cold(cache: str) -> float:
    env = {**os.environ, "SPECGEN_CUTE_CACHE": cache, "PYTHONPATH": _pythonpath()}
    run = subprocess.run([sys.executable, "-c", COLD, repr(time.time())], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return float(run.stdout.strip().splitlines()[-1])


def cxx_cold(exe: Path) -> float:
    t0 = time.time()
    subprocess.run([str(exe), "256", "512", "128"], capture_output=True, text=True, check=True)
    return time.time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/gpu")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from specgen.kinds.gemm.designs.cute_export import toolkit

    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        kernels, build = Path(tmp) / "kernels", Path(tmp) / "build"
        subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(kernels), "--target", "cute:sm90"],
                       cwd=ROOT, check=True, capture_output=True)
        toolkit.cmake_build(ROOT / "examples" / "cute_export", build, (f"-DSPECGEN_EXPORT_DIR={kernels}",))
        exe = build / "specgen_example"
        cold = {"cxx_export": [cxx_cold(exe) for _ in range(args.repeats)]}
        cold["python_empty_cache"] = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as cache:
                cold["python_empty_cache"].append(python_cold(cache))
        with tempfile.TemporaryDirectory() as cache:
            python_cold(cache)  # fills the disk cache
            cold["python_disk_cache"] = [python_cold(cache) for _ in range(args.repeats)]
        result["cold_start_s"] = {k: {"median": statistics.median(v), "runs": v} for k, v in cold.items()}
        host_cxx = [float(subprocess.run([str(exe), "64", "64", "64", "--bench", "10000"], capture_output=True, text=True,
                                         check=True).stdout.split("host cost ")[1].split()[0]) for _ in range(args.repeats)]
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        host_py = [float(subprocess.run([sys.executable, "-c", HOST], env=env, cwd=ROOT, capture_output=True, text=True,
                                        check=True).stdout.split()[0]) for _ in range(args.repeats)]
        result["host_us_per_call_64cubed"] = {"cxx_export": statistics.median(host_cxx), "torch_entry": statistics.median(host_py),
                                              "runs": {"cxx_export": host_cxx, "torch_entry": host_py}}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-export.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
