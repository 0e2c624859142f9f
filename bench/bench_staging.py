"""What the launchers' copy fallback costs (issue 17: one behaviour per input). A legal view a kernel cannot
read in place (a base one element off 16 bytes, here) is copied once per call by the launcher; Mosaic GPU
pads an N below its CTA tile. Timed with the paired CUPTI timer (timing.kernel_cycle: every call of a
round in one profiler window, L2 flushed before each, order rotating), ratios per round against the same
kernel on aligned inputs, with cuBLAS against itself as the A/A row; host cost per call with interleaved
batches (timing.host_us_interleaved).

    python bench/bench_staging.py [--out DIR]       (CUDA; the CuTe rows need the CuTe DSL)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
from datetime import date
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import timing  # noqa: E402

SHAPES = [(16, 4096, 4096), (1024, 4096, 4096)]


def misaligned(x: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:]
    view = flat.view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 16
    return view


def entry(backend: str):
    if backend == "pallas-mgpu":
        mod = importlib.import_module("generated.pallas.gpu_sm90.gemm_bf16")
        return mod.gemm_bf16_torch
    mod = importlib.import_module(f"generated.{backend}.gemm_bf16")
    return mod.gemm_bf16


def summary(samples: list[float], base: list[float]) -> dict:
    ratios = [s / b for s, b in zip(samples, base, strict=True)]
    return {"us": statistics.median(samples), "ratio_vs_aligned": statistics.median(ratios),
            "ratio_lo": sorted(ratios)[len(ratios) // 4], "ratio_hi": sorted(ratios)[3 * len(ratios) // 4]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    parser.add_argument("--backends", default="triton,cute,pallas-mgpu")
    args = parser.parse_args()
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        b = w.t()  # K-major
        a_off, b_off = misaligned(a), misaligned(w).t()
        cublas = {"cublas": lambda a=a, b=b: a @ b, "cublas_again": lambda a=a, b=b: a @ b}
        aa = timing.kernel_cycle(cublas, rounds=20)
        rows.append({"shape": [M, N, K], "backend": "cuBLAS A/A", **summary(aa["cublas_again"]["samples"],
                                                                            aa["cublas"]["samples"])})
        for backend in args.backends.split(","):
            try:
                fn = entry(backend)
            except Exception as e:  # noqa: BLE001 - a backend missing here (the CuTe DSL): say so, go on
                rows.append({"shape": [M, N, K], "backend": backend, "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            calls = {"aligned": lambda fn=fn: fn(a, b), "a_staged": lambda fn=fn: fn(a_off, b),
                     "b_staged": lambda fn=fn: fn(a, b_off), "cublas": cublas["cublas"]}
            torch.testing.assert_close(calls["a_staged"]().float(), calls["aligned"]().float(), rtol=0, atol=0)
            cyc = timing.kernel_cycle(calls, rounds=20)
            host = timing.host_us_interleaved({k: v for k, v in calls.items() if k != "cublas"}, calls=20, batches=15)
            for name in ("aligned", "a_staged", "b_staged"):
                row = {"shape": [M, N, K], "backend": backend, "input": name,
                       **summary(cyc[name]["samples"], cyc["aligned"]["samples"]),
                       "vs_cublas": statistics.median(c / o for o, c in zip(cyc[name]["samples"], cyc["cublas"]["samples"],
                                                                             strict=True)),
                       "host_us": statistics.median(host[name]),
                       "kernels": sorted(cyc[name]["kernels"])}
                rows.append(row)
        # Mosaic GPU's N below its tile: padded B and output (N = 64 into the 256-wide tile)
    if "pallas-mgpu" in args.backends:
        fn = entry("pallas-mgpu")
        for M, N, K in [(1024, 64, 4096), (1024, 256, 4096)]:
            a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
            b = torch.randn(N, K, device="cuda", generator=g).bfloat16().t()
            cyc = timing.kernel_cycle({"mgpu": lambda a=a, b=b: fn(a, b), "cublas": lambda a=a, b=b: a @ b}, rounds=20)
            rows.append({"shape": [M, N, K], "backend": "pallas-mgpu", "input": "N below the tile (padded)" if N < 256 else "N = tile",
                         "us": statistics.median(cyc["mgpu"]["samples"]),
                         "vs_cublas": statistics.median(c / o for o, c in zip(cyc["mgpu"]["samples"], cyc["cublas"]["samples"],
                                                                               strict=True)),
                         "kernels": sorted(cyc["mgpu"]["kernels"])})
    record = {"date": str(date.today()), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "rows": rows}
    for r in rows:
        print(json.dumps(r))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "staging.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
