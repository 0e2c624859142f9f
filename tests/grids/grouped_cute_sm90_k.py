"""The grouped CuTe sm90 design's ragged-K kernel (`groups.ragged = "k"`, the weight gradient: out (G, M, N);
templates/grouped/cute/ragged_k_sm90.jinja) against the CuTe DSL compiler (issue 37: the compile grids extended to
the grouped designs): a seeded grid of borderline ragged-K `cute:sm90` configs, each checked by specgen and compiled
by `cute.compile` for sm_90a on this CPU machine over fake tensors through the design's compile hook (the dense sm90
hook), its SASS read by nvdisasm, exactly as tests/grids/grouped_cute_sm90.py compiles the ragged-M grid (verdict
`ok` built spill-free within the block's SMEM, `spill` any LDL/STL, `smem` past 232448 B, `error` render or compile
failed or the DSL aborted the process).

The draw (`grid`): the ragged-K fields (tests/grids/grouped_grid.py `common_k`: both majors of A and of B, bf16 /
f16 operands and now and then f32 or fp8 ones, bf16 / f16 / f32 out, both index formats, chains of a (G, N) bias,
scalars, activations, clamp and cast), tiles of 64-256 rows (one or two consumer warpgroups) and 64-256 columns
around 128/192/256 accumulator registers a thread, tile.k 32-128, pipeline depths around the naive SMEM fit or
`auto`, now and then what GRP302 refuses (ping-pong, a cluster).

    python tests/grids/grouped_cute_sm90_k.py N SEED [RECORD]   # compile what the work file lacks, write RECORD

RECORD is tests/data/grid_grouped_cute_sm90_k.json by default (its work file beside it, `.work.jsonl`: resumable);
CI replays it (tests/grouped/test_grid_compilers.py). Measured figures: docs/grouped.md, "Check against the compiler".
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grouped_cute_sm90 import TARGET, compile_case, with_config  # noqa: E402  (tests/grids is no package)
from grouped_grid import ROOT, cli, common_k, record_cute  # noqa: E402

RECORD = ROOT / "tests" / "data" / "grid_grouped_cute_sm90_k.json"
GRID_SEED = 37


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded ragged-K cute:sm90 specs near SMEM001's and REG001's boundaries (seeded by a string no model of
    specgen's enters: the grid must not move when the model does)."""
    rng = random.Random(f"grouped-cute-sm90-ragged-k:{seed}")
    return [with_config(rng, common_k(rng, f"gcutek_{seed}_{i:03d}", TARGET)) for i in range(n)]


def main(n: int, seed: int, out: Path = RECORD) -> int:
    return record_cute(__file__, grid(n, seed), TARGET, n, seed, out)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
