"""The grouped Mosaic GPU design's ragged-K kernel (`groups.ragged = "k"`, templates/grouped/pallas/grouped_mgpu_k.py.jinja)
against its lowering for CUDA on this CPU machine (the design's compile hook, jax 0.10.2): a seeded draw of ragged-K
pallas:gpu_sm90 configs (both majors of A and B, bf16 / f16, bf16 / f16 / f32 out, tiles of 64-256 rows and columns,
tile.k 32-128, 2-6 stages or `auto`, a bias and SiLU now and then), each checked by specgen (its error rules) and
lowered. A false accept is a config check passes that does not lower; a false reject one refused that lowers and
whose stores cover its accumulator (PAL006's uneven warpgroup subtiles lower but store fewer columns than the tile:
a right refusal); SMEM001's figure is compared with Mosaic GPU's allocation where the lowering gets that far.
Not recorded for CI replay (the ragged-M grid's records are: tests/grids/grouped_mgpu.py).

    python tests/grids/grouped_mgpu_k.py N SEED [OUT.json]
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def grid(n: int, seed: int) -> list[dict]:
    from specgen.kinds.grouped.testing.mgpu_specs import mgpu_ragged_k_form

    rng = random.Random(f"ragged-k-mgpu:{seed}")
    specs = []
    for i in range(n):
        dt = rng.choice(["bf16", "bf16", "f16"])
        epilogue = rng.choice([(), (), ({"op": "bias", "dtype": "f32"},),
                               ({"op": "bias", "dtype": dt}, {"op": "activation", "fn": "silu"})])
        spec = mgpu_ragged_k_form(f"gkg_{seed}_{i:03d}", dtype=dt, out=rng.choice([dt, "f32"]),
                                  a=rng.choice(["mn", "mn", "k"]), b=rng.choice(["mn", "mn", "k"]),
                                  index=rng.choice(["sizes", "offs"]), epilogue=epilogue,
                                  tile={"m": rng.choice([64, 128, 128, 192, 256]),
                                        "n": rng.choice([64, 128, 128, 192, 256, 256]), "k": rng.choice([32, 64, 64, 128])})
        spec["pipeline"] = {"ab_stages": rng.choice(["auto", 2, 3, 4, 5, 6])}
        specs.append(spec)
    return specs


def verdict(spec: dict, folder: Path) -> dict:
    from backends.pallas.test_grouped_mgpu import loaded, render

    from specgen.check import check_all
    from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
    from specgen.targets import TARGETS

    errors = sorted({d.rule for d in check_all([loaded(spec)]) if d.severity == "error"})
    try:
        mod = render(spec, folder)
        r = compile_module(mod, TARGETS["pallas:gpu_sm90"])[0]
        lowered, error, smem, plan = r.error == "", r.error[:120], r.compiler_smem, r.plan_smem
        cfg = mod.CONFIG
        covered = cfg.wg_n % cfg.epi_n == 0 and cfg.tile_m % cfg.epi_m == 0
    except Exception as e:  # a render that check would have refused
        lowered, error, smem, plan, covered = False, f"render: {str(e)[:120]}", None, None, False
    return {"name": spec["name"], "spec": spec, "errors": errors, "lowered": lowered, "covered": covered,
            "compiler_smem": smem, "plan_smem": plan, "error": error}


def main() -> None:
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    folder = Path(tempfile.mkdtemp())
    rows = []
    for spec in grid(n, seed):
        rows.append(verdict(spec, folder))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "spec"}), flush=True)
    runs = [r for r in rows if r["lowered"] and r["covered"]]
    false_accepts = [r["name"] for r in rows if not r["errors"] and not (r["lowered"] and r["covered"])]
    false_rejects = [r["name"] for r in runs if set(r["errors"]) - {"REG001"}]  # REG001: spills, not a lowering fact
    summary = {"configs": len(rows), "accepted": sum(not r["errors"] for r in rows), "run": len(runs),
               "false_accepts": false_accepts, "false_rejects": false_rejects,
               "smem_equal": sum(r["compiler_smem"] == r["plan_smem"] for r in rows if r["lowered"]),
               "lowered": sum(r["lowered"] for r in rows)}
    print(json.dumps(summary))
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
