"""A/A check of the paired timers (bench/timing.py): cuBLAS against itself, at a large square shape and at
4096x14336x4096. A pair's ratio should read 1.000; how far its interval reaches is the resolution at which
kernel_pairs and bench_pairs can rank two kernels on this card. Also the unpaired figure: the ratio of two
medians taken in separate windows (kernel_us), which is what the clock's swings move.

Usage (repo root on PYTHONPATH): python bench/aa_check.py [--out DIR] -> DIR/aa-check.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from timing import bench_pairs, kernel_pairs, kernel_us

SHAPES = [(8192, 8192, 8192), (4096, 14336, 4096), (2048, 2048, 2048)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    rows = []
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

        def mm() -> None:
            torch.matmul(a, w.t(), out=out)  # noqa: B023

        k, d = kernel_pairs(mm, mm), bench_pairs(mm, mm)
        unpaired = [kernel_us(mm) / kernel_us(mm) for _ in range(5)]
        rows.append({"shape": [M, N, K], "paired_cupti": k, "paired_do_bench": d, "unpaired_cupti_ratios": unpaired})
        print(f"{M}x{N}x{K}: paired CUPTI {k['ratio']:.4f} ({k['ratio_lo']:.4f}-{k['ratio_hi']:.4f}), paired do_bench "
              f"{d['ratio']:.4f} ({d['ratio_lo']:.4f}-{d['ratio_hi']:.4f}); unpaired CUPTI ratios "
              f"{min(unpaired):.3f}-{max(unpaired):.3f} (median {statistics.median(unpaired):.3f}); "
              f"cuBLAS kernels {k['peer_kernels']}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "aa-check.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
