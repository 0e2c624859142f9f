"""REG001 on the training backward's recompute GEMM (G = dOut * act'(pre) in its epilogue) against the compilers, on
the CPU: a small grid of recompute configs (tile, warps, stages, EPI_SPLIT, activation, gated) compiled for sm_90
(and a few for sm_100) by triton.compile, and for sm_90a by cute.compile (ping-pong and cooperative tiles, the dOut
SMEM ring), each through check's own compile probe (specgen/probe.py: the module rendered, its recompute kernel
compiled, registers and spill stores read off the cubin).

`python tests/grids/recompute.py triton|cute [OUT]` compiles the design's CONFIGS one at a time (a few seconds each on
a quiet CPU), one JSON line each to stdout and OUT (tests/data/grid_recompute_triton.jsonl / grid_recompute_cute_sm90
.jsonl to refresh the record). tests/test_recompute_registers.py replays check's REG001 over the records (no
compiler). A Triton row's EPI_SPLIT is the plan's RECOMPUTE_KNOBS / GATED_RECOMPUTE_KNOBS entry, set for that
compile only (the shipped knobs: 4 plain, 2 gated).

Measured 2026-11-29 (triton 3.9.0, nvidia-cutlass-dsl 4.8.1): docs/training/checks.md, "REG001 on the recompute GEMM".
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
HOOKS = {"triton": "specgen.kinds.gemm.designs.triton.compile:compile_module",
         "cute": "specgen.kinds.gemm.designs.cute_sm90.compile:compile_module"}


def _triton_configs() -> list[dict]:
    rows = []
    for fn, gated in (("gelu", False), ("gelu_tanh", False), ("silu", True)):
        for tile in ((256, 128, 64), (128, 256, 64), (128, 128, 64)):
            for warps in (8, 4):
                rows += [{"tile": list(tile), "warps": warps, "stages": stages, "split": split, "gated": gated, "fn": fn}
                         for stages in (3, 4) for split in (4, 2, 1)]
    for fn in ("silu", "relu", "sigmoid"):
        rows += [{"tile": list(tile), "warps": warps, "stages": 3, "split": split, "gated": False, "fn": fn}
                 for tile, warps in (((256, 128, 64), 8), ((128, 128, 64), 4)) for split in (4, 2, 1)]
    sm100 = [((128, 128, 64), 8, 2, True, "silu"), ((128, 128, 64), 8, 1, True, "silu"),
             ((128, 256, 64), 8, 4, False, "gelu_tanh"), ((256, 128, 64), 8, 2, False, "gelu"),
             ((256, 128, 64), 8, 1, False, "gelu"), ((128, 128, 64), 4, 1, False, "gelu")]
    rows += [{"tile": list(t), "warps": w, "stages": 3, "split": s, "gated": g, "fn": f, "target": "triton:sm100"}
             for t, w, s, g, f in sm100]
    # held out: compiled after the weights were set (each as the model says: 3 spill-free, 1 spill)
    held = [((256, 64, 64), 4, 3, 2, "gelu"), ((256, 64, 64), 4, 3, 1, "gelu"), ((256, 128, 32), 8, 4, 2, "gelu"),
            ((128, 128, 128), 8, 3, 1, "gelu_tanh")]
    rows += [{"tile": list(t), "warps": w, "stages": st, "split": s, "gated": False, "fn": f} for t, w, st, s, f in held]
    return rows


CONFIGS = {
    "triton": _triton_configs(),
    "cute": [
        {"tile": list(t), "sched": sched, "fn": fn, **extra}
        for t, sched, fn, extra in (
            ((128, 192, 64), "pingpong", "gelu", {}), ((128, 192, 64), "pingpong", "gelu", {"role": "forward_pre"}),
            ((128, 192, 64), "pingpong", "gelu_tanh", {}), ((128, 192, 64), "pingpong", "silu", {}),
            ((128, 192, 64), "pingpong", "relu", {}), ((128, 224, 64), "pingpong", "gelu", {}),
            ((128, 160, 64), "pingpong", "gelu", {}), ((256, 192, 64), "cooperative", "gelu", {}),
            ((256, 224, 64), "cooperative", "gelu", {}), ((128, 96, 64), "pingpong", "silu", {"gated": True}),
            ((128, 112, 64), "pingpong", "gelu", {"gated": True}), ((256, 160, 64), "cooperative", "gelu", {}),
            ((128, 176, 64), "pingpong", "gelu", {}), ((256, 192, 64), "cooperative", "relu", {}),
            ((128, 192, 64), "pingpong", "sigmoid", {}), ((128, 80, 64), "pingpong", "gelu", {"gated": True}),
            ((128, 96, 64), "pingpong", "gelu", {"gated": True}), ((128, 128, 64), "pingpong", "gelu", {}),
            ((256, 128, 64), "cooperative", "gelu", {}), ((128, 208, 64), "pingpong", "gelu", {}),
            # held out: compiled after RECOMPUTE_GELU_ERF_FRAGMENTS was set (each as the model says: 3 spill-free, 1 spill)
            ((256, 176, 64), "cooperative", "gelu", {}), ((128, 144, 64), "pingpong", "gelu", {}),
            ((256, 208, 64), "cooperative", "gelu", {}), ((192, 128, 64), "pingpong", "gelu", {}))
    ],
}


def spec_of(design: str, cfg: dict) -> dict:
    """The training spec whose pre GEMM (the recompute, or forward_pre where cfg's role says) is the config: bf16
    operands, a bias along n and the activation (or the gated op alone), the config in `training.pre`."""
    m, n, k = cfg["tile"]
    epi = ([{"op": "gated", "fn": cfg["fn"], "layout": "halves"}] if cfg.get("gated") else
           [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": cfg["fn"]}])
    save = "preact" if cfg.get("role") == "forward_pre" else "recompute"
    spec = {"name": "recompute_grid", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"},
            "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}, "accumulator": "f32", "epilogue": epi}
    if design == "cute":
        pre = {"tile": {"m": m, "n": n, "k": k}, "schedule": cfg["sched"]}
        return {**spec, "tile": {"m": 128, "n": 64, "k": 64}, "targets": ["cute:sm90"],
                "training": {"save": save, "pre": pre}}
    pre = {"tile": {"m": m, "n": n, "k": k}, "num_warps": cfg["warps"], "ab_stages": cfg["stages"]}
    return {**spec, "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
            "targets": [cfg.get("target", "triton:sm90")], "triton": {"num_warps": 8},
            "training": {"save": save, "pre": pre}}


def companion(design: str, cfg: dict):
    """The config's pre GEMM as check resolves it (a Resolved companion)."""
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    (ls,) = load_text(json.dumps({"kernels": [spec_of(design, cfg)]}), "<recompute grid>", ".json")
    role = "forward_pre" if cfg.get("role") == "forward_pre" else "recompute"
    (c,) = [c for c in resolve(ls.spec, ls.spec.targets[0]).companions if c.companion == role]
    return c


@contextlib.contextmanager
def knobs_of(cfg: dict) -> Iterator[None]:
    """A Triton row's EPI_SPLIT in the plan's knobs (RECOMPUTE_KNOBS, or GATED_RECOMPUTE_KNOBS), the shipped one after;
    nothing for a CuTe row."""
    if "split" not in cfg:
        yield
        return
    from specgen.kinds.gemm.designs.triton import training

    knobs = training.GATED_RECOMPUTE_KNOBS if cfg["gated"] else training.RECOMPUTE_KNOBS
    shipped, knobs["EPI_SPLIT"] = knobs["EPI_SPLIT"], cfg["split"]
    try:
        yield
    finally:
        knobs["EPI_SPLIT"] = shipped


def compile_one(design: str, cfg: dict) -> dict:
    """Compile the config's pre GEMM kernel through check's probe: what it reported, and the seconds."""
    import specgen.probe as probe

    spec = {**spec_of(design, cfg), "name": "settle_probe"}
    role = "forward_pre" if cfg.get("role") == "forward_pre" else "recompute"
    start = time.perf_counter()
    with knobs_of(cfg):
        result = probe.probe({"spec": spec, "role": role, "target": spec["targets"][0], "hook": HOOKS[design]})
    return {**result, "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    import importlib.metadata
    import subprocess

    design = sys.argv[1]
    if sys.argv[2:3] == ["--one"]:  # the worker: one config a process (the knobs are module globals)
        print(json.dumps(compile_one(design, json.loads(sys.argv[3]))), flush=True)
        return
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    version = importlib.metadata.version("triton" if design == "triton" else "nvidia-cutlass-dsl")
    for cfg in CONFIGS[design]:
        proc = subprocess.run([sys.executable, __file__, design, "--one", json.dumps(cfg)], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        row = {"config": cfg, "compiler": json.loads(lines[-1]) if lines else {"error": proc.stderr[-300:]},
               "version": version}
        print(json.dumps(row), flush=True)
        if out is not None:
            with out.open("a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
