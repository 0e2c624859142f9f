"""The grouped Mosaic GPU design's gated epilogue (SwiGLU, GeGLU; issue 37) against the Mosaic GPU lowering: a
seeded grid of borderline gated `pallas:gpu_sm90` configs, checked by specgen and lowered for CUDA on this CPU
machine by tests/grids/grouped_mgpu.py's `compile_case` (the design's compile hook over a ragged 3-group problem
whose B holds 2N columns; the traced program's accumulators, both counted; the store ladder; Mosaic GPU's own SMEM
figure beside the plan's), into a record CI replays (tests/grouped/test_grid_compilers.py).

The draw (`grid`): the grouped grid's shared fields (tests/grids/grouped_grid.py: dtypes, B's major, the index and
tail, a chain of which at most two ops follow the gated one), the gated op first (SiLU and GELU-tanh; now and then
the erf GELU PAL009 refuses), halves or interleaved (an interleaved N-major B MGP003 refuses), tiles whose gate and
up accumulators sit around REG001's 255 registers a thread, pipeline depths around the naive SMEM fit of an A tile
and two B tiles a stage, or `auto`.

    python tests/grids/grouped_mgpu_gated.py N SEED [RECORD]   # default: tests/data/fresh/fresh_grouped_mgpu_gated_40.json
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grouped_grid import ROOT, cli, common, drive, stages_near_fit, summary, write_record  # noqa: E402
from grouped_mgpu import TARGET, compile_case  # noqa: E402

RECORD = ROOT / "tests" / "data" / "fresh" / "fresh_grouped_mgpu_gated_40.json"
GRID_SEED = 40


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded gated grouped pallas:gpu_sm90 specs near SMEM001's and REG001's boundaries (see the module)."""
    rng = random.Random(f"grouped-mgpu-gated:{seed}")
    specs = []
    for i in range(n):
        spec = common(rng, f"gmgpu_gated_{seed}_{i:03d}", TARGET)
        gated = {"op": "gated", "fn": rng.choice(["silu", "silu", "gelu_tanh", "gelu_tanh", "gelu"]),
                 "layout": rng.choice(["halves", "interleaved"])}
        spec["epilogue"] = [gated, *[op for op in spec["epilogue"] if op["op"] != "activation"][:2]]
        tile = {"m": rng.choice([64, 64, 128, 128, 192, 256]), "n": rng.choice([64, 128, 128, 192, 256]),
                "k": rng.choice([32, 64, 64, 128])}
        # the naive fit of a stage of A and of gate and up B tiles: B's columns counted twice
        spec.update(tile=tile, pipeline={"ab_stages": stages_near_fit(rng, {**tile, "n": 2 * tile["n"]})})
        specs.append(spec)
    return specs


def main(n: int, seed: int, out: Path = RECORD) -> int:
    import jax

    work = out.with_suffix(".work.jsonl")
    rows = drive(__file__, [str(n), str(seed), str(work)], [*grid(n, seed)], work, lambda message: {
        "lowered": {"ok": False, "smem": None, "error_class": "died", "error": message}})
    cases = [{"spec": r["spec"], **r["compiler"]} for r in rows]  # tests/grids/mgpu.py's record layout
    write_record(out, {"made_by": f"python tests/grids/grouped_mgpu_gated.py {n} {seed}", "jax": jax.__version__,
                       "target": TARGET, "seed": seed}, cases)
    return summary(out)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
