"""The SM clock and board power while the grouped Mosaic GPU kernel (`moe_bf16`) and torch._grouped_mm each run
back to back (1500 calls) on gpu/bench_grouped.py's Mixtral rows: whether the card runs at its power cap there and
at which clock each kernel runs. nvidia-smi samples every 20 ms in the background (throttle reasons with them:
0x4 is the software power cap); each phase's samples are summarized by median and min clock, median and max power.

    python gpu/power_grouped_mgpu.py --out out/gpu [--rows "Mixtral down:even,Mixtral down:skewed"]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped_mgpu import row_problem  # noqa: E402  (the bench's rows, its data)

CALLS = 1500


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rows", default="Mixtral down:even,Mixtral down:skewed,Mixtral up:skewed")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_bf16 as mod

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    query = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    with open(out / "power-smi.csv", "w") as log:
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader", "-lms", "20"], stdout=log)
        phases = []
        try:
            for label in args.rows.split(","):
                _, a, w, offs = row_problem(label)
                ta, tw, to = torch.from_dlpack(a), torch.from_dlpack(w), torch.from_dlpack(offs)
                for who, fn, wait in (("ours", lambda a=a, w=w, offs=offs: mod._call(a, w, offs), jax.block_until_ready),
                                      ("torch", lambda ta=ta, tw=tw, to=to: torch._grouped_mm(ta, tw.transpose(-2, -1), offs=to),
                                       lambda _: torch.cuda.synchronize())):
                    wait(fn())  # compiled, warm
                    time.sleep(0.3)
                    start = time.time()
                    for _ in range(CALLS):
                        y = fn()
                    wait(y)
                    phases.append({"row": label, "who": who, "t0": start, "t1": time.time(),
                                   "us_per_call": (time.time() - start) / CALLS * 1e6})
                    time.sleep(0.3)
        finally:
            smi.terminate()
    samples = []
    with open(out / "power-smi.csv") as log:
        for r in csv.reader(log):
            try:
                t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local, as time()
                samples.append((t, float(r[1].split()[0]), float(r[2].split()[0]), r[4].strip()))
            except (ValueError, IndexError):
                continue
    for p in phases:  # the first 0.2 s of a phase ramps up
        s = [x for x in samples if p["t0"] + 0.2 < x[0] < p["t1"] - 0.05]
        clocks, power = sorted(x[1] for x in s), sorted(x[2] for x in s)
        if s:
            p.update(samples=len(s), clock_median=clocks[len(s) // 2], clock_min=clocks[0],
                     power_median=power[len(s) // 2], power_max=power[-1], reasons=sorted({x[3] for x in s}))
        print(json.dumps(p), flush=True)
    (out / "power-phases.json").write_text(json.dumps(phases, indent=1))


if __name__ == "__main__":
    main()
