"""Why the CuTe sm90 kernel's ratio to cuBLAS differs between the two timers (issue 9): the SM clock and
board power while each timer runs, for ours (the catalogue's gemm_bf16) and cuBLAS (`a @ w.t()`), same
process, same data, alternating, ROUNDS rounds.

Both timers flush L2 before every call (bench/timing.py's `kernel_us` writes 256 MB; `do_bench` zeroes
its own 256 MB buffer), so they differ in how long the GPU runs: CUPTI times 20 calls (tens of ms),
do_bench runs warmup + rep (350 ms) back to back. `nvidia-smi -lms 10` samples the clock and power in a
thread; each timer's window gets the mean of the samples that arrived inside it.

Usage (repo root on PYTHONPATH): python bench/clocks_cute.py --out DIR  -> DIR/clocks-cute.json, stdout
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from bench_cute import assert_matches, kernel_ms
from timing import ms

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 4096)]
ROUNDS = 3


class Sampler:
    """nvidia-smi's SM clock (MHz) and board power (W), stamped with this process's clock on arrival."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "10"],
            stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                clock, power = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), clock, power))

    def window(self, t0: float, t1: float) -> dict[str, float | int]:
        inside = [(c, p) for t, c, p in self.samples if t0 <= t <= t1]
        if not inside:
            return {"samples": 0}
        return {"samples": len(inside), "sm_mhz": sum(c for c, _ in inside) / len(inside),
                "watts": sum(p for _, p in inside) / len(inside)}

    def stop(self) -> None:
        self.proc.terminate()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from generated.cute.gemm_bf16 import gemm_bf16

    sampler = Sampler()
    time.sleep(1.0)
    rows = []
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        sides = {"ours": lambda: gemm_bf16(a, w.t(), out=out), "cublas": lambda: a @ w.t()}  # noqa: B023
        assert_matches(sides["ours"](), sides["cublas"](), f"gemm_bf16 {M}x{N}x{K}")
        for r in range(ROUNDS):
            for side, fn in sides.items():
                t0 = time.perf_counter()
                k = kernel_ms(fn)
                t1 = time.perf_counter()
                d = ms(fn)
                t2 = time.perf_counter()
                row = dict(shape=[M, N, K], round=r, side=side, cupti_us=k * 1e3, do_bench_us=d * 1e3,
                           cupti_window=sampler.window(t0, t1), do_bench_window=sampler.window(t1, t2))
                rows.append(row)
                cw, dw = row["cupti_window"], row["do_bench_window"]
                print(f"{M}x{N}x{K:<6} r{r} {side:6} CUPTI {k * 1e3:8.1f} us @ {cw.get('sm_mhz', 0):6.0f} MHz "
                      f"{cw.get('watts', 0):5.0f} W ({cw['samples']} samples) | do_bench {d * 1e3:8.1f} us @ "
                      f"{dw.get('sm_mhz', 0):6.0f} MHz {dw.get('watts', 0):5.0f} W ({dw['samples']})", flush=True)
    sampler.stop()
    (args.out / "clocks-cute.json").write_text(json.dumps(
        {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
