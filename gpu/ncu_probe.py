"""Each backend's kernel and the peer's, once each inside a profiler range, for Nsight Compute to read
(issue 20: where a decode or large GEMM's last percent goes, in counters rather than guesses).

Everything compiles and warms up first; then `cudaProfilerStart`, one call per backend in the order
given (the peer first), `cudaProfilerStop`. Run under ncu with `--profile-from-start off` so that only
those calls are profiled, each replayed with the caches flushed (ncu's default cache control):

    ncu --clock-control none --profile-from-start off --set full -o $OUT/decode \\
        python3 gpu/ncu_probe.py --kernel gemm_bf16 --shape 16x8192x8192 --targets triton:sm90,cute:sm90

`--flush write` zeroes 256 MB before each profiled call (the paired timer's default flush; run ncu with
`--cache-control none` to keep what it leaves): the report then shows what the dirty L2 costs a kernel,
its write-back in dram__bytes_write.

The order of the profiled kernels is printed, so the report's rows can be told apart by their names
(cuBLAS's nvjet_*, Triton's `_<kernel>_kernel`, CuTe's kernel_cutlass_*, Mosaic GPU's *_mosaic_gpu_kernel).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax share the GPU here

from specgen.bench.timing import FLUSHES, flush_l2  # noqa: E402
from specgen.bench.workloads import (  # noqa: E402
    build_module,
    catalogue_kernel,
    inputs,
    max_error,
    ours_call,
    peer_call,
    peer_name,
)
from specgen.kinds.gemm.problem import Shape  # noqa: E402
from specgen.spec.models import parse_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="gemm_bf16")
    ap.add_argument("--shape", default="16x8192x8192", help="MxNxK")
    ap.add_argument("--targets", default="triton:sm90,cute:sm90,pallas:gpu_sm90")
    ap.add_argument("--no-peer", action="store_true", help="profile only our kernels")
    ap.add_argument("--flush", choices=FLUSHES, help="flush the L2 this way before each profiled call")
    args = ap.parse_args()
    import torch

    loaded = catalogue_kernel(args.kernel, ROOT / "specs")
    spec = loaded.spec
    m, n, k = (int(v) for v in args.shape.split("x"))
    x = inputs(spec, Shape(m, n, k))
    targets = [parse_target(t) for t in args.targets.split(",")]
    calls = {}
    if not args.no_peer:  # torch's peer (cuBLAS or `_scaled_mm`) for the torch-side targets
        calls[f"peer {peer_name(spec, targets[0])}"] = peer_call(spec, targets[0], x)
    for t in targets:
        calls[str(t)] = ours_call(build_module(loaded, t), spec, t, x)
    reference = next(iter(calls.values()))()
    for name, call in calls.items():  # compile, load and warm every call before the range
        for _ in range(3):
            out = call()
        torch.cuda.synchronize()
        print(f"{name}: max error vs the first call {max_error(out, reference):.2e}", flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls.values():
        if args.flush:
            flush_l2(how=args.flush)
            torch.cuda.synchronize()
        call()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled, in order: {', '.join(calls)} ({args.kernel} {args.shape})", flush=True)


if __name__ == "__main__":
    main()
