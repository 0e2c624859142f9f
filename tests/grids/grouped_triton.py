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

from differential import SMEM_LIMIT, live, run_grid  # noqa: E402

RECORD = HERE.parent / "data" / "grid_grouped_triton.jsonl"
GRID_SPECS = 120  # per arch
GRID_SEED = 37
KMIN = {"tf32": 8, "f32": 8}  # tl.dot's K minimum (16-bit: 16)
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
        kmin = KMIN.get(dtype, 16)
        if swap:  # decode: a group's few rows on the MMA's column side
            tile = {"m": rng.choice([16, 32, 64]), "n": rng.choice([64, 128, 256]), "k": kmin * rng.choice([4, 8, 16])}
        elif dtype == "f32":  # FMA dots past 128 x 128 spill so much that ptxas runs for minutes
            tile = {"m": rng.choice([32, 64, 128]), "n": rng.choice([32, 64, 128]), "k": rng.choice([16, 32, 64])}
        else:
            tile = {"m": rng.choice([64, 128, 128, 256]), "n": rng.choice([64, 128, 256, 256]),
                    "k": kmin * rng.choice([2, 4, 8, 8, 16])}
        width = {"tf32": 4, "f32": 4}.get(dtype, 2)
        naive = SMEM_LIMIT // ((tile["m"] + tile["n"]) * tile["k"] * width)  # stages of A/B alone that fit
        if rng.random() < 0.4:
            stages: int | str = "auto"
        elif 2 <= naive <= 7:
            stages = max(2, naive + rng.choice([-1, 0, 0, 1]))
        else:
            stages = rng.choice([2, 3, 4])
        warps = rng.choice([4, 8, 8])
        if tile["m"] * tile["n"] > 128 * 256 or (dtype == "f32" and tile["m"] * tile["n"] > 64 * 64):
            warps = 8  # 256 x 256 over 4 warps (512 accumulator registers) keeps ptxas busy for minutes
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
