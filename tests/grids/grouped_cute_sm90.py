"""The grouped GEMM's CuTe sm90 design against the CuTe DSL compiler (issue 37: the compile grids extended to the
grouped designs): a seeded grid of borderline grouped `cute:sm90` configs, each checked by specgen and compiled by
`cute.compile` for sm_90a on this CPU machine over fake tensors, through the design's compile hook (the dense
sm90 hook: the grouped module carries what it reads), its SASS read by nvdisasm, as tests/grids/cute_sm90.py
compiles the dense grid (its `compile_case`: verdict `ok` built spill-free within the block's SMEM, `spill` any
LDL/STL, `smem` past 232448 B, `error` render or compile failed or the DSL aborted the process).

The draw (`grid`): tiles of 64-256 rows (one or two consumer warpgroups) and 64-256 columns around 128/192/256
accumulator registers a thread, tile.k 32-128, pipeline depths around the naive SMEM fit or `auto`, the shared
grouped fields (tests/grids/grouped_grid.py: both B majors, index formats and tails, (G, N) bias and column
scales, router row scales, activations...), now and then what GRP301/GRP302 refuse (fp8 or f32 operands,
ping-pong, a cluster).

    python tests/grids/grouped_cute_sm90.py N SEED [RECORD]   # compile what the work file lacks, write RECORD

The work file is RECORD's name with `.work.jsonl` (resumable: re-run the same line; delete it to recompile
everything); RECORD is tests/data/grid_grouped_cute_sm90.json by default; CI replays it
(tests/grouped/test_grid_compilers.py).
Measured figures: docs/grouped.md, "Check against the compiler".
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grouped_grid import ROOT, cli, common, record_cute, stages_near_fit  # noqa: E402  (tests/grids is no package)

TARGET = "cute:sm90"
RECORD = ROOT / "tests" / "data" / "grid_grouped_cute_sm90.json"
GRID_SEED = 37
TILE_N = [64, 96, 128, 128, 160, 192, 192, 224, 256, 256]


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded grouped cute:sm90 specs near SMEM001's and REG001's boundaries (a number no model of specgen's
    enters: the grid must not move when the model does)."""
    rng = random.Random(f"grouped-cute-sm90:{seed}")
    return [with_config(rng, common(rng, f"gcute_{seed}_{i:03d}", TARGET)) for i in range(n)]


def with_config(rng: random.Random, spec: dict) -> dict:
    """`spec` with a drawn cute:sm90 config: warpgroups, a tile, stages near SMEM001's fit, now and then ping-pong or a
    2x1 cluster (the ragged-K grid, grouped_cute_sm90_k.py, draws its configs so too)."""
    wgs = rng.choice([None, None, 1, 2])
    tile = {"m": rng.choice([128, 256, 256] if wgs == 2 else [64, 128, 128, 192, 256]),
            "n": rng.choice(TILE_N), "k": rng.choice([32, 64, 64, 64, 128])}
    spec.update(tile=tile, pipeline={"ab_stages": stages_near_fit(rng, tile)}, cute={
        "schedule": "pingpong" if rng.random() < 0.04 else "cooperative", **({"mma_warpgroups": wgs} if wgs else {})})
    if rng.random() < 0.04:
        spec["cluster"] = {"m": 2, "n": 1}
    return spec


def compile_case(spec: dict) -> dict:
    """The compiler's verdict (tests/grids/cute_sm90.py's `compile_case`, whose hook is this design's)."""
    from cute_sm90 import compile_case as dense_compile_case

    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    return dense_compile_case(spec, Path(tempfile.mkdtemp(prefix="specgen-grouped-cute-grid-")))


def main(n: int, seed: int, out: Path = RECORD) -> int:
    return record_cute(__file__, grid(n, seed), TARGET, n, seed, out)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
