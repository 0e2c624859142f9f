"""One launch each of the grouped Mosaic GPU kernel (the catalogue's moe_bf16 module, its JAX entry) and of
torch._grouped_mm on chosen rows of gpu/bench_grouped.py, for Nsight Compute to read the hardware counters of (it
times nothing itself: gpu/bench_grouped_mgpu.py does, with the paired timer). Run it under ncu, e.g.

    ncu --clock-control none --target-processes all -k regex:"mosaic_gpu_kernel|device_kernel" \\
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section LaunchStats --csv --page details \\
        python3 gpu/ncu_grouped_mgpu.py --rows "Mixtral up:even,Mixtral up:skewed" > ncu.csv

Each row's kernels run in the order: ours, then torch._grouped_mm (`device_kernel` is CUTLASS's name; the regex
leaves out XLA's metadata fusions and torch's pointer-array setup kernel). The first call of ours traces and compiles
it; ncu profiles the launch that follows.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped_mgpu import row_problem  # noqa: E402  (the bench's rows, its data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="Mixtral up:even,Mixtral up:skewed",
                        help="WORKLOAD:DIST pairs of gpu/bench_grouped.py, comma-separated")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_bf16 as mod

    for label in args.rows.split(","):
        sizes, a, w, offs = row_problem(label)
        mod._call(a, w, offs, None).block_until_ready()  # trace and compile (its launch is profiled too)
        mod._call(a, w, offs, None).block_until_ready()
        ta, tw, toffs = torch.from_dlpack(a), torch.from_dlpack(w), torch.from_dlpack(offs)
        torch._grouped_mm(ta, tw.transpose(-2, -1), offs=toffs)
        torch.cuda.synchronize()
        print(label, "sizes", sizes, flush=True)


if __name__ == "__main__":
    main()
