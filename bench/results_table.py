"""Turn a bench.json from bench_triton.py into the Markdown table bench/RESULTS.md records, with the
issue's targets beside the ratios (no hand-copied figures)."""

from __future__ import annotations

import json
import math
import sys

TARGETS = {"bf16": ">= 0.90x", "bias_gelu": ">= 1.05x", "fp8": ">= 0.85x"}


def geomean(rows: list[dict], group: str) -> float:
    ratios = [r["ratio"] for r in rows if r["group"] == group]
    return math.exp(sum(map(math.log, ratios)) / len(ratios))


def verdict(group: str, value: float) -> str:
    bound = float(TARGETS[group].split()[1].rstrip("x"))
    return f"{TARGETS[group]}: {'met' if value >= bound else '**not met**'}"


def table(data: dict) -> str:
    m, rows = data["meta"], data["rows"]
    out = [f"## {m['date']}, {m['gpu']} ({m['sms']} SMs), torch {m['torch']}, triton {m['triton']}, CUDA {m['cuda']}, "
           f"Python {m['python']}", "", "| workload | peer | specgen | peer | ratio | issue target |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["group"] == "info":
            out.append(f"| (the peer's parts) | addmm alone {r['ours_ms'] * 1e3:.1f} us, GELU pass alone "
                       f"{r['peer_ms'] * 1e3:.1f} us | | | eager / addmm = {r['ratio']:.3f}x | |")
        elif "ours_ms" in r:
            target = verdict("bias_gelu", r["ratio"]) if r["group"] == "bias_gelu" else ""
            out.append(f"| {r['workload']} | {r['peer']} | {r['ours_ms'] * 1e3:.1f} us ({r['ours_tflops']:.0f} TFLOP/s) | "
                       f"{r['peer_ms'] * 1e3:.1f} us ({r['peer_tflops']:.0f} TFLOP/s) | {r['ratio']:.3f}x | {target} |")
        else:
            out.append(f"| {r['workload']} | {r['peer']} | {r['ours_us']:.2f} us | {r['peer_us']:.2f} us | "
                       f"{r['ratio']:.3f}x | |")
        last_of_group = r["group"] in ("bf16", "fp8") and r is [x for x in rows if x["group"] == r["group"]][-1]
        if last_of_group:
            g = geomean(rows, r["group"])
            out.append(f"| **{r['group']} geomean** | | | | **{g:.3f}x** | {verdict(r['group'], g)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(json.load(f)), end="")
