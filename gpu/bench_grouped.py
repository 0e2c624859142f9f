"""The grouped GEMM (issue 37) against torch._grouped_mm on MoE workloads, paired CUPTI (each call paired with
the peer's in one rotation, L2 flushed before each), with the A/A row (ours against itself) beside each.

Group sizes come from declared distributions: `even` (every expert the same rows), `skewed` (Dirichlet(0.3)
shares of the same total, seeded), `empty` (a quarter of the experts get no rows, the rest even). The plain
kernel (`moe_bf16`) is timed against plain torch._grouped_mm; the fused one (`moe_up_bias_silu_bf16`) against
torch._grouped_mm followed by the same bias and SiLU in eager torch (what a model runs without it); the fp8 one
(`moe_fp8_rowwise`: e4m3 A and B, scale_a per row, scale_b per expert and column, bf16 out) against
torch._scaled_grouped_mm on the same tensors (B the transposed (G, N, K) weight, column-major as it requires).

    python gpu/bench_grouped.py --out out/gpu        (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import random
from pathlib import Path

import torch

from specgen.bench.record import environment
from specgen.bench.stats import geomean, paired
from specgen.bench.timing import kernel_cycle

# (name, experts, rows per expert, N, K): the table (DeepSeek-V3, Mixtral, Qwen3-235B; decode)
WORKLOADS = [
    ("DeepSeek-V3 up", 32, 128, 4096, 7168),
    ("DeepSeek-V3 down", 32, 128, 7168, 2048),
    ("Mixtral up", 8, 1024, 14336, 4096),
    ("Mixtral down", 8, 1024, 4096, 14336),
    ("Qwen3-235B up", 128, 32, 3072, 4096),
    ("decode", 32, 2, 4096, 7168),
]
DISTRIBUTIONS = ("even", "skewed", "empty")


def group_sizes(dist: str, experts: int, rows: int, seed: int = 37) -> list[int]:
    total = experts * rows
    if dist == "even":
        return [rows] * experts
    if dist == "empty":
        live = experts - experts // 4
        sizes = [0] * (experts - live) + [total // live] * live
        sizes[-1] += total - sum(sizes)
        return sizes
    draw = random.Random(seed)
    share = torch.tensor([draw.gammavariate(0.3, 1.0) for _ in range(experts)])  # Dirichlet(0.3) shares
    share = share / share.sum()
    sizes = (share * total).floor().long().tolist()
    sizes[int(share.argmax())] += total - sum(sizes)
    return sizes


def time_ragged_k(fn, kernel: str, name: str, dist: str, sizes: list[int], n: int, k: int, gen: torch.Generator,
                  rounds: int) -> dict:
    """One weight-gradient row: ours against torch._grouped_mm's 2-D x 2-D form on the same tensors, paired."""
    m = sum(sizes)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen) / math.sqrt(max(max(sizes), 1))
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out = torch.empty(len(sizes), k, n, device="cuda", dtype=torch.bfloat16)

    def ours():
        return fn(x.t(), dy, offs, out=out)

    def peer():
        return torch._grouped_mm(x.t(), dy, offs=offs)

    err = (ours().float() - peer().float()).abs().max().item()
    cycle = kernel_cycle({"ours": ours, "ours again": ours, "peer": peer}, rounds)
    s = {kk: v["samples"] for kk, v in cycle.items()}
    speed, aa = paired(s["ours"], s["peer"]), paired(s["ours"], s["ours again"])
    print(f"| {kernel} | {name} (wgrad) | {dist} | {speed.ours_us:.1f} | {speed.peer_us:.1f} | {speed.ratio:.3f} "
          f"({speed.ratio_lo:.3f}-{speed.ratio_hi:.3f}) | {aa.ratio:.3f} | {err:.3g} |", flush=True)
    return {"kernel": kernel, "workload": f"{name} (wgrad)", "dist": dist, "sizes": sizes, "n": n, "k": k,
            "ours_us": speed.ours_us, "peer_us": speed.peer_us, "ratio": speed.ratio, "ratio_lo": speed.ratio_lo,
            "ratio_hi": speed.ratio_hi, "aa": aa.ratio, "max_err": err, "kernels": {kk: v["kernels"] for kk, v in cycle.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--kernels", default="moe_bf16,moe_up_bias_silu_bf16,moe_fp8_rowwise,moe_wgrad_bf16")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--dists", default="even,skewed")
    ap.add_argument("--workloads", default="", help="only these WORKLOADS rows (comma-separated names; default all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows_out = []
    print("| kernel | workload | sizes | ours us | peer us | peer / ours (interval) | A/A | max err |")
    print("|---|---|---|---|---|---|---|---|")
    for kernel in args.kernels.split(","):
        module = importlib.import_module(f"generated.{args.backend}.{kernel}")
        fn = getattr(module, kernel)
        params = list(inspect.signature(fn).parameters)
        fused, fp8 = "bias" in params, "scale_a" in params
        dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        ragged_k = module.METADATA["groups"].get("ragged") == "k"
        for name, experts, rows, n, k in WORKLOADS:
            if args.workloads and name not in args.workloads.split(","):
                continue
            if ragged_k and name == "decode":
                continue  # a weight gradient is a training step's: no decode
            for dist in args.dists.split(","):
                sizes = group_sizes(dist, experts, rows)
                m = sum(sizes)
                gen = torch.Generator(device="cuda").manual_seed(hash((kernel, name, dist)) % 2**31)
                if ragged_k:  # the layer's weight gradient: x (rows, K) passed as x.t(), dy (rows, N), out (G, K, N)
                    rows_out.append(time_ragged_k(fn, kernel, name, dist, sizes, n, k, gen, args.rounds))
                    continue
                a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
                w = (torch.randn(experts, n, k, device="cuda", generator=gen) / (1 if fp8 else math.sqrt(k))).to(dtype)
                b = w.transpose(-2, -1)  # (G, K, N), K-major: how torch._grouped_mm callers pass the weight
                offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
                bias = torch.randn(experts, n, device="cuda", dtype=torch.bfloat16, generator=gen)
                # fp8's rowwise scales: one per row of A (M,), one per expert and column of B (G, N)
                scale_a = torch.rand(m, device="cuda", generator=gen) * 0.5 + 0.5
                scale_b = (torch.rand(experts, n, device="cuda", generator=gen) * 0.5 + 0.5) / math.sqrt(k)
                out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                extra = (bias,) if fused else (scale_a, scale_b) if fp8 else ()
                group = torch.repeat_interleave(torch.arange(experts, device="cuda"), torch.tensor(sizes, device="cuda"),
                                                output_size=m)

                def ours(fn=fn, extra=extra, a=a, b=b, offs=offs, out=out):
                    return fn(a, b, offs, *extra, out=out)

                def peer(a=a, b=b, offs=offs, bias=bias, group=group, fused=fused, fp8=fp8, sa=scale_a, sb=scale_b):
                    if fp8:
                        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
                    y = torch._grouped_mm(a, b, offs=offs)
                    return torch.nn.functional.silu(y + bias[group]) if fused else y

                err = (ours().float() - peer().float()).abs().max().item()
                cycle = kernel_cycle({"ours": ours, "ours again": ours, "peer": peer}, args.rounds)
                s = {kk: v["samples"] for kk, v in cycle.items()}
                speed, aa = paired(s["ours"], s["peer"]), paired(s["ours"], s["ours again"])
                row = {"kernel": kernel, "workload": name, "dist": dist, "sizes": sizes, "n": n, "k": k,
                       "ours_us": speed.ours_us, "peer_us": speed.peer_us, "ratio": speed.ratio,
                       "ratio_lo": speed.ratio_lo, "ratio_hi": speed.ratio_hi, "aa": aa.ratio, "max_err": err,
                       "kernels": {kk: v["kernels"] for kk, v in cycle.items()}}
                rows_out.append(row)
                print(f"| {kernel} | {name} | {dist} | {speed.ours_us:.1f} | {speed.peer_us:.1f} | {speed.ratio:.3f} "
                      f"({speed.ratio_lo:.3f}-{speed.ratio_hi:.3f}) | {aa.ratio:.3f} | {err:.3g} |", flush=True)
        mine = [r["ratio"] for r in rows_out if r["kernel"] == kernel]
        print(f"| {kernel} | geomean | | | | {geomean(mine):.3f} | | |")
    record = {"environment": environment().model_dump(mode="json"), "rows": rows_out}
    (args.out / "bench-grouped.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
