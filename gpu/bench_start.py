"""Cold start of each backend's generated module on the GPU (issue 20's last row): in fresh processes,
importing the backend alone, importing the generated module (which imports its backend), and the first
call (compile or load, launch, synchronize) with empty caches and again with the caches a first process
filled (Triton's `TRITON_CACHE_DIR`, the CuTe launcher's `SPECGEN_CUTE_CACHE`, jax's compilation cache).
Seconds, the median over `--runs` processes per row (min-max beside it); the processes alternate backends.
A Mosaic GPU module imports torch only at its first torch call, so its module import leaves torch out
where its backend's import counts it.

    python gpu/bench_start.py --out out/gpu --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# module, the entry it calls, the imports that are its backend
BACKENDS = {
    "triton": ("generated.triton.gemm_bf16", "gemm_bf16", "import torch, triton, triton.language"),
    "cute": ("generated.cute.gemm_bf16", "gemm_bf16", "import torch, cutlass, cutlass.cute, cutlass.pipeline"),
    "mosaic gpu": ("generated.pallas.gpu_sm90.gemm_bf16", "gemm_bf16_torch",
                   "import torch, jax, jax.experimental.pallas, jax.experimental.pallas.mosaic_gpu"),
}
CHILD = """
import sys, time
start = time.perf_counter()
{backend}
backend = time.perf_counter()
print(backend - start)
"""
CHILD_MODULE = """
import importlib, json, sys, time
start = time.perf_counter()
mod = importlib.import_module({module!r})
imported = time.perf_counter()
import torch
a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16).t()  # K-major, as the spec says
torch.cuda.synchronize()
ready = time.perf_counter()
out = getattr(mod, {entry!r})(a, b)
torch.cuda.synchronize()
called = time.perf_counter()
ok = torch.allclose(out.float(), a.float() @ b.float(), atol=0.5, rtol=0.05)
print(json.dumps({{"import": imported - start, "first_call": called - ready, "right": bool(ok)}}))
"""


def child(code: str, env: dict[str, str]) -> str:
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode:
        raise RuntimeError(f"child failed ({run.returncode}): {run.stderr[-2000:]}")
    return run.stdout.strip().splitlines()[-1]


def caches(root: str) -> dict[str, str]:
    return {"TRITON_CACHE_DIR": f"{root}/triton", "SPECGEN_CUTE_CACHE": f"{root}/cute",
            "JAX_COMPILATION_CACHE_DIR": f"{root}/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # no empty entry (the cwd)
    base = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONPATH=path)
    samples: dict[str, dict[str, list[float]]] = {b: {} for b in BACKENDS}
    right = {b: True for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="specgen-start-") as warm:
        for i in range(args.runs):
            for name, (module, entry, backend) in BACKENDS.items():
                s = samples[name]
                s.setdefault("backend import", []).append(float(child(CHILD.format(backend=backend), base)))
                with tempfile.TemporaryDirectory(prefix="specgen-cold-") as cold:  # empty caches
                    r = json.loads(child(CHILD_MODULE.format(module=module, entry=entry), base | caches(cold)))
                s.setdefault("module import", []).append(r["import"])
                s.setdefault("first call, empty caches", []).append(r["first_call"])
                if i == 0:  # fill the warm caches once
                    child(CHILD_MODULE.format(module=module, entry=entry), base | caches(warm))
                w = json.loads(child(CHILD_MODULE.format(module=module, entry=entry), base | caches(warm)))
                s.setdefault("first call, disk caches", []).append(w["first_call"])
                right[name] = right[name] and r["right"] and w["right"]
    rows = {name: {what: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for what, v in s.items()}
            for name, s in samples.items()}
    print("| backend | backend import | module import | module / backend | first call, empty caches | "
          "first call, disk caches | right |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        med = {k: v["median_s"] for k, v in r.items()}
        print(f"| {name} | {med['backend import']:.2f} s | {med['module import']:.2f} s | "
              f"{med['module import'] / med['backend import']:.2f} | {med['first call, empty caches']:.2f} s | "
              f"{med['first call, disk caches']:.2f} s | {right[name]} |")
    args.out.mkdir(parents=True, exist_ok=True)
    from specgen.bench.record import environment

    (args.out / "bench-start.json").write_text(json.dumps(
        {"environment": environment().model_dump(), "runs": args.runs, "rows": rows, "samples": samples,
         "right": right}, indent=1) + "\n")


if __name__ == "__main__":
    main()
