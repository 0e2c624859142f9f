"""The grouped GEMM's Triton design against the Triton compiler (issue 37: "extend the compile grids to the
grouped designs"): a seeded grid of borderline grouped configs, compiled as tests/differential.py compiles
the dense grid (`triton.compile` for sm_90 / sm_100 on the CPU, ptxas' log for spills; the grouped module's
METADATA carries what the dense compile hook reads), recorded in tests/data/grid_grouped_triton*.jsonl and
replayed in CI by tests/grouped/test_grid.py.

`grid(n, seed, arch)`: n grouped specs for triton:<arch> near the SMEM and register boundaries: big tiles and
explicit pipeline depths around the naive fit (232448 B // one A/B stage) or `auto`; bf16, f16, tf32 and f32
operands with either B major (A is K-major: GRP001); TMA descriptor loads or masked pointer loads; decode's
swapped small tiles; both index formats and tails; the kind's epilogue chains (per-group bias, router-weight
row scales, activations, clamp, cast).

    python tests/grids/grouped_triton.py N SEED RECORD [JOBS]   # compile what RECORD lacks, then summarize
    python tests/grids/grouped_triton.py live N                 # N specs per arch compiled now, no record
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: differential.py

from differential import draw_depth_and_warps, draw_tile, live, run_grid  # noqa: E402

RECORD = HERE.parent / "data" / "grid_grouped_triton.jsonl"
GRID_SPECS = 120  # per arch
GRID_SEED = 37
EPILOGUES: list[list[dict]] = [
    [],
    [{"op": "bias", "dtype": "bf16"}],
    [{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}],
    [{"op": "scale", "by": "row"}],
    [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}, {"op": "scale", "by": "row"}],
    [{"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "bias", "dtype": "f32"},
     {"op": "activation", "fn": "gelu"}, {"op": "clamp", "min": -8.0, "max": 8.0}],
]


def grid(n: int, seed: int = GRID_SEED, arch: str = "sm90") -> list[dict]:
    """n seeded grouped specs for triton:<arch> (a number no model of specgen's enters: the grid must not move
    when the model does)."""
    rng = random.Random(f"grouped:{seed}:{arch}")
    specs = []
    for i in range(n):
        dtype = rng.choice(["bf16", "bf16", "f16", "tf32", "f32"])
        out = rng.choice(["f16", "f32"]) if dtype == "f16" else rng.choice(["bf16", "bf16", "f32"])
        swap = dtype in ("bf16", "f16") and rng.random() < 0.15
        tile = draw_tile(rng, dtype, swap)
        stages, warps = draw_depth_and_warps(rng, dtype, tile)
        epilogue = rng.choice(EPILOGUES)
        specs.append({
            "name": f"gg{arch}_{i:04d}", "kind": "grouped",
            "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": rng.choice(["k", "mn"])},
            "out": {"dtype": out}, "epilogue": epilogue, "tile": tile,
            "groups": {"index": rng.choice(["offs", "sizes"]), "tail": rng.choice(["untouched", "zero"])},
            "pipeline": {"ab_stages": stages},
            "triton": {"num_warps": warps, "tma": rng.random() < 0.7, "swap_ab": swap},
            "targets": [f"triton:{arch}"],
        })
    return specs


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["live"]:
        sys.exit(live(int(args[1]), GRID_SEED, make=grid))
    n, seed = (int(a) for a in args[:2]) if args[:2] else (GRID_SPECS, GRID_SEED)
    sys.exit(run_grid(n, seed, Path(args[2]) if args[2:3] else RECORD, jobs=int(args[3]) if args[3:] else 1, make=grid))
