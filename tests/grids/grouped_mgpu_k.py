"""The grouped Mosaic GPU design's ragged-K kernel (`groups.ragged = "k"`, the weight gradient: out (G, M, N);
templates/grouped/pallas/grouped_mgpu_k.py.jinja) against the Mosaic GPU lowering (issue 37: the compile grids
extended to the grouped designs): a seeded grid of borderline ragged-K `pallas:gpu_sm90` configs, each checked by
specgen and lowered for CUDA on this CPU machine by the design's compile hook (specgen/kinds/grouped/designs/
pallas_mgpu/compile.py: A (M, K) and B (K, N) in their stored majors, 3 groups over K past the pipeline's depth; the
kernel body, layout inference, the SMEM allocation and its 232448 B limit), recorded in tests/grids/mgpu.py's
layout, so its `runs` reads it (tests/grids/verdicts.py): lowered, the traced program's wgmma accumulator within
255 registers a thread, its output subtiles covering each warpgroup's tile_m x wg_n slice (`ragged_k_facts`); and
Mosaic GPU's own SMEM figure (`probe_smem` where the lowering failed) beside the plan's.

The draw (`grid`): the ragged-K fields (tests/grids/grouped_grid.py `common_k`: both majors of A and of B, bf16 / f16
operands and now and then f32 or fp8 ones, bf16 / f16 / f32 out, both index formats, chains of a (G, N) bias,
scalars, activations (the erf GELU PAL009 refuses among them), clamp and cast), tiles of 64-256 rows and 32-256
columns (two consumer warpgroups split tile.n: PAL006, MGP001's K-major B half), tile.k 32-128 (MGP001's 64 with an
operand stored K-rows-first), pipeline depths around the naive SMEM fit or `auto`, now and then a cluster (MGP003).

    python tests/grids/grouped_mgpu_k.py N SEED [RECORD]   # lower what the work file lacks, write RECORD

RECORD is tests/data/grid_grouped_mgpu_k.json by default (its work file beside it, `.work.jsonl`: resumable); CI
replays it (tests/grouped/test_grid_compilers.py). Measured figures: docs/grouped.md, "Check against the compiler".
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grouped_grid import ROOT, cli, common_k, stages_near_fit  # noqa: E402
from grouped_mgpu import TARGET, lower_case, record  # noqa: E402

RECORD = ROOT / "tests" / "data" / "grid_grouped_mgpu_k.json"
GRID_SEED = 37


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded ragged-K pallas:gpu_sm90 specs near SMEM001's, REG001's, MGP001's and the warpgroup split's
    boundaries (seeded by a string no model of specgen's enters)."""
    rng = random.Random(f"grouped-mgpu-ragged-k:{seed}")
    specs = []
    for i in range(n):
        spec = common_k(rng, f"gmgpuk_{seed}_{i:03d}", TARGET)
        tile = {"m": rng.choice([64, 64, 128, 128, 192, 256]), "n": rng.choice([32, 64, 96, 128, 128, 192, 256, 256]),
                "k": rng.choice([32, 64, 64, 128])}
        spec.update(tile=tile, pipeline={"ab_stages": stages_near_fit(rng, tile)})
        if rng.random() < 0.04:
            spec["cluster"] = {"m": 2, "n": 1}
        specs.append(spec)
    return specs


def ragged_k_facts(jaxpr, cfg) -> dict[str, object]:
    """What the traced ragged-K kernel does: its wgmma accumulator (tile_m x wg_n f32 a consumer warpgroup; the deep
    and the shallow K loop each scope one, in exclusive branches, so one is held at a time), how many epi_m x epi_n
    subtiles one store of that accumulator writes (each accumulator's scope stores it once and an empty group's path
    once more: the TMA stores over those paths), and whether they cover it (PAL006's 96-column slices of 64-column
    subtiles leave 32 unwritten)."""
    from mgpu import WG_THREADS, all_eqns

    found = list(all_eqns(jaxpr))
    refs = {id(eqn.invars[0]): tuple(eqn.invars[0].aval.shape) for eqn in found if eqn.primitive.name == "wgmma_ref"}
    (acc,) = set(refs.values()) or {(0, 0)}
    stores = sum(eqn.primitive.name == "copy_smem_to_gmem" for eqn in found)
    per_path = stores // (len(refs) + 1)
    return {"acc_shape": list(acc), "acc_registers": acc[0] * acc[1] // WG_THREADS, "stores": per_path,
            "covered": per_path * cfg.epi_m * cfg.epi_n >= acc[0] * acc[1] > 0}


def compile_case(spec: dict) -> dict:
    """The lowering's side: {plan_smem, stages, lowered: {ok, smem, error_class, error, acc_shape, acc_registers,
    stores, covered}} (tests/grids/mgpu.py's `runs` reads `lowered`), as grouped_mgpu.py's `lower_case` gives it,
    over A (K, M) or (M, K) and dY (K, N) or (N, K) as the ragged-K entry takes them."""

    def problem(s, struct, args, m, n, k):
        return [struct((m, k) if s.a.major == "k" else (k, m), s.a.dtype),
                struct((n, k) if s.b.major == "k" else (k, n), s.b.dtype), *args[2:]]

    return lower_case(spec, "grouped_mgpu_k", problem, ragged_k_facts)


def main(n: int, seed: int, out: Path = RECORD) -> int:
    return record(__file__, [*grid(n, seed)], n, seed, out)

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
