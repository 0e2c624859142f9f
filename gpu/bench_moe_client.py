"""The MoE client (issue 37): a Mixtral-8x7B-shaped sparse MoE block (examples/moe/mixtral.py; one layer, random
weights) on the generated grouped kernels against transformers' eager block structure and against the same
grouped block on torch._grouped_mm, per phase (prefill: 4096 tokens, decode: 16), bf16.

Two measures per phase: the paired CUPTI kernel time (each call paired with the peers' in one rotation, L2
flushed before each, ratio per round, A/A beside: specgen/bench/timing.py), and the wall time of one call with
the host's part (CUDA events over 50 calls, median): the eager block syncs the host once per expert, and a decode
step of ours replays as one CUDA graph.

    python gpu/bench_moe_client.py --out out/gpu        (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "moe"))

from mixtral import GroupedKernels, MoEConfig, MoEWeights, eager_block, grouped_block, grouped_mm_block  # noqa: E402

from specgen.bench.record import environment  # noqa: E402
from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import kernel_cycle  # noqa: E402

MIXTRAL = MoEConfig(hidden=4096, intermediate=14336, experts=8, top_k=2)
PHASES = (("prefill", 4096), ("decode", 16))


def wall_us(fn, calls: int = 50) -> float:
    """Median wall time of one call, host included (CUDA events around each call, synchronized)."""
    times = []
    for _ in range(calls + 5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times[5:])


def graphed(fn, x_static: torch.Tensor):
    """fn over x_static captured once as a CUDA graph: a call copies nothing, replays, returns the static output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn(x_static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x_static)
    return graph, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg, k = MIXTRAL, MIXTRAL.top_k
    w = MoEWeights.random(cfg, torch.bfloat16, "cuda", torch.Generator().manual_seed(37))
    kernels = GroupedKernels.shipped()
    wk = kernels.prepare(w)  # the gate_up rows in the kernel's layout, once (as a model would at load)
    rows = []
    print("| phase | tokens | ours us | eager us | _grouped_mm block us | eager / ours (interval) | _grouped_mm / ours "
          "(interval) | A/A | wall us: ours, ours graphed, eager, _grouped_mm | max err vs eager |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for phase, tokens in PHASES:
        x = torch.randn(tokens, cfg.hidden, device="cuda", dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(tokens))
        fns = {"ours": lambda x=x: grouped_block(x, wk, k, kernels), "eager": lambda x=x: eager_block(x, w, k),
               "grouped_mm": lambda x=x: grouped_mm_block(x, w, k)}
        want = fns["eager"]().float()
        err = (fns["ours"]().float() - want).abs().max().item()
        cycle = kernel_cycle({**fns, "ours again": fns["ours"]}, args.rounds)
        s = {name: v["samples"] for name, v in cycle.items()}
        vs_eager, vs_gmm, aa = paired(s["ours"], s["eager"]), paired(s["ours"], s["grouped_mm"]), paired(s["ours"], s["ours again"])
        x_static = x.clone()
        graph, _ = graphed(lambda xs: grouped_block(xs, wk, k, kernels), x_static)
        walls = {"ours": wall_us(fns["ours"]), "ours graphed": wall_us(graph.replay), "eager": wall_us(fns["eager"]),
                 "grouped_mm": wall_us(fns["grouped_mm"])}
        row = {"phase": phase, "tokens": tokens, "ours_us": vs_eager.ours_us, "eager_us": vs_eager.peer_us,
               "grouped_mm_us": vs_gmm.peer_us, "vs_eager": vs_eager.ratio, "vs_eager_lo": vs_eager.ratio_lo,
               "vs_eager_hi": vs_eager.ratio_hi, "vs_grouped_mm": vs_gmm.ratio, "vs_grouped_mm_lo": vs_gmm.ratio_lo,
               "vs_grouped_mm_hi": vs_gmm.ratio_hi, "aa": aa.ratio, "wall_us": walls, "max_err": err,
               "kernels": {name: v["kernels"] for name, v in cycle.items()}}
        rows.append(row)
        print(f"| {phase} | {tokens} | {vs_eager.ours_us:.1f} | {vs_eager.peer_us:.1f} | {vs_gmm.peer_us:.1f} | "
              f"{vs_eager.ratio:.3f} ({vs_eager.ratio_lo:.3f}-{vs_eager.ratio_hi:.3f}) | {vs_gmm.ratio:.3f} "
              f"({vs_gmm.ratio_lo:.3f}-{vs_gmm.ratio_hi:.3f}) | {aa.ratio:.3f} | "
              f"{', '.join(f'{v:.0f}' for v in walls.values())} | {err:.3g} |", flush=True)
    record = {"environment": environment().model_dump(mode="json"), "config": dataclasses.asdict(cfg), "rows": rows}
    (args.out / "bench-moe-client.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
