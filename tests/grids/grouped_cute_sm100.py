"""The grouped GEMM's CuTe sm100 design against the CuTe DSL compiler (issue 37: the compile grids extended to the
grouped designs): a seeded grid of borderline grouped `cute:sm100` configs, each checked by specgen and compiled by
`cute.compile` for sm_100a on this CPU machine over fake tensors (no Blackwell GPU anywhere: compile and SASS are
the whole verification) through the design's compile hook (the dense sm100 hook: the grouped module carries what
it reads), as tests/grids/cute_sm100.py compiles the dense grid (its `compile_case`: verdict `ok` built spill-free
within the block's SMEM, `spill` any LDL/STL, `smem` past 232448 B, `error` render or compile failed or the DSL
aborted the process).

The draw (`grid`): 1-CTA tiles of 64 or 128 rows (now and then 32 or 256: MMA002) and 16-256 columns (mostly
multiples of 32; odd multiples of 8 and 16 on CUTE101's line), tile.k 32-128 (fp8: 64-256), A/B stages around the
naive SMEM fit or `auto`, accumulator stages around TMEM's 512 columns, one or two epilogue stages, the shared
grouped fields (tests/grids/grouped_grid.py: both B majors, index formats and tails, (G, N) bias and column scales,
router row scales, activations...), fp8 operands (the formats mixed, with and without the rowwise scales), now and
then what GRP402 refuses (a CTA pair, a cluster). The grouped sm100 design has no register model (the accumulator
lives in TMEM; its epilogue reads it back a subtile at a time): a spill here would be a false accept.

    python tests/grids/grouped_cute_sm100.py N SEED [RECORD]   # compile what the work file lacks, write RECORD

The work file is RECORD's name with `.work.jsonl` (resumable: re-run the same line; delete it to recompile
everything); RECORD is tests/data/grid_grouped_cute_sm100.json by default; CI replays it
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

TARGET = "cute:sm100"
RECORD = ROOT / "tests" / "data" / "grid_grouped_cute_sm100.json"
GRID_SEED = 37


def _tile_n(rng: random.Random) -> int:
    """Mostly multiples of 32 up to 256; now and then an odd multiple of 16 or 8 (CUTE101's line)."""
    r = rng.random()
    if r < 0.75:
        return rng.choice([32, 64, 64, 96, 128, 128, 160, 192, 224, 256, 256])
    if r < 0.9:
        return rng.choice([16, 48, 80, 112, 144, 176, 208, 240])
    return rng.choice([8, 24, 40, 56, 72, 104, 136, 200])


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded grouped cute:sm100 specs near SMEM001's and TMEM001's boundaries and the tile widths the DSL takes
    (a number no model of specgen's enters: the grid must not move when the model does)."""
    rng = random.Random(f"grouped-cute-sm100:{seed}")
    specs = []
    for i in range(n):
        spec = common(rng, f"gcute100_{seed}_{i:03d}", TARGET)
        fp8 = rng.random() < 0.3
        if fp8:  # tcgen05 kind::f8f6f4: the formats may mix, B either major
            a, b = rng.choice(["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"]), rng.choice(["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"])
            spec["a"]["dtype"], spec["b"]["dtype"] = a, b
            spec["out"]["dtype"] = rng.choice(["bf16", "bf16", "f16", "f32"])
            spec["epilogue"] = [op for op in spec["epilogue"] if op["op"] != "cast"]  # the chain drawn for 16-bit out
            if rng.random() < 0.7:
                spec["epilogue"].insert(0, {"op": "scale", "by": "rowcol"})
        elem = {"fp8_e4m3": 1, "fp8_e5m2": 1, "f32": 4}.get(spec["a"]["dtype"], 2)
        m = rng.choice([64, 128, 128, 128]) if rng.random() < 0.95 else rng.choice([32, 256])
        k = rng.choice([64, 128, 128, 256] if elem == 1 else [32, 64, 64, 128])
        tile = {"m": m, "n": _tile_n(rng), "k": k}
        spec.update(tile=tile, pipeline={"ab_stages": stages_near_fit(rng, tile, elem),
                                         "acc_stages": rng.choice(["auto", "auto", 1, 2, 2, 3, 4]),
                                         "epilogue_stages": rng.choice([1, 2, 2])})
        if rng.random() < 0.04:
            spec.update(cluster={"m": 2, "n": 1}, cute={"two_cta": True})
        specs.append(spec)
    return specs


def compile_case(spec: dict) -> dict:
    """The compiler's verdict (tests/grids/cute_sm100.py's `compile_case`, whose hook is this design's)."""
    from cute_sm100 import compile_case as dense_compile_case

    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    return dense_compile_case(spec, Path(tempfile.mkdtemp(prefix="specgen-grouped-cute100-grid-")))


def main(n: int, seed: int, out: Path = RECORD) -> int:
    return record_cute(__file__, grid(n, seed), TARGET, n, seed, out)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
