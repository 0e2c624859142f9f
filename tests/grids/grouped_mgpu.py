"""The grouped GEMM's Mosaic GPU design against the Mosaic GPU lowering (issue 37: the compile grids extended to
the grouped designs): a seeded grid of borderline grouped `pallas:gpu_sm90` configs, each checked by specgen and
lowered for CUDA on this CPU machine by the design's compile hook (specgen/kinds/grouped/designs/pallas_mgpu/
compile.py: a ragged 3-group problem, both tail paths; the kernel body, layout inference, the SMEM allocation and
its 232448 B limit), as tests/grids/mgpu.py lowers the dense grid. Per spec the record keeps what its `runs`
reads: lowered, the traced program's wgmma accumulator within 255 registers a thread (`program_facts`), its
output stores covering the accumulator; and Mosaic GPU's own SMEM figure (`probe_smem`, also where the lowering
failed) beside the plan's.

The draw (`grid`): tiles of 64-256 rows and 32-256 columns (two consumer warpgroups split tile.n: PAL006,
the subtile row MGP002), tile.k 32-128, pipeline depths around the naive SMEM fit or `auto`, the shared grouped
fields (tests/grids/grouped_grid.py), now and then fp8 operands (rendered since session 23; MAJ001 refuses an
MN-major one) and what PAL004/PAL009/MGP003 refuse (f32 operands, the erf GELU, a cluster).

    python tests/grids/grouped_mgpu.py N SEED [RECORD]   # lower what the work file lacks, write RECORD

The work file is RECORD's name with `.work.jsonl` (resumable; delete it to lower everything again); RECORD is
tests/data/grid_grouped_mgpu.json by default; CI replays it (tests/grouped/test_grid_compilers.py). Measured figures: docs/grouped.md.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grouped_grid import ROOT, cli, common, drive, stages_near_fit, summary, write_record  # noqa: E402

TARGET = "pallas:gpu_sm90"
RECORD = ROOT / "tests" / "data" / "grid_grouped_mgpu.json"
GRID_SEED = 37


def grid(n: int, seed: int = GRID_SEED) -> list[dict]:
    """n seeded grouped pallas:gpu_sm90 specs near SMEM001's, REG001's and the warpgroup split's boundaries."""
    rng = random.Random(f"grouped-mgpu:{seed}")
    specs = []
    for i in range(n):
        spec = common(rng, f"gmgpu_{seed}_{i:03d}", TARGET)
        tile = {"m": rng.choice([64, 64, 128, 128, 192, 256]), "n": rng.choice([32, 64, 96, 128, 128, 192, 256, 256]),
                "k": rng.choice([32, 64, 64, 128])}
        spec.update(tile=tile, pipeline={"ab_stages": stages_near_fit(rng, tile)})
        if rng.random() < 0.04:
            spec["cluster"] = {"m": 2, "n": 1}
        specs.append(spec)
    return specs


def ladder_facts(jaxpr, cfg, tail_paths: int) -> dict[str, object]:
    """What the traced store ladder does (program_facts' `covered` counts every TMA store, and each subtile here
    is a ladder of power-of-two row boxes, once per store path: one after each K loop, the whole tile's and the
    split last wave's one per S, and `tail_paths` more, the zero tail's zeros):
    how many epi_m x epi_n subtiles a warpgroup stores (its top boxes over the paths) and whether they cover its
    accumulator; and the bytes of an SMEM staging row the boxes read from. A box starts on any row of its slot
    (a group's rows begin anywhere), and TMA reads SMEM from 128-byte aligned addresses (PTX ISA,
    cp.async.bulk.tensor), which the lowering does not check for a dynamic start: `runs` asks a row span of a
    multiple of 128 B (tests/grids/mgpu.py)."""
    from mgpu import all_eqns, all_jaxprs

    loops = sum(any(eqn.primitive.name == "wgmma_ref" for eqn in body.eqns) for body in all_jaxprs(jaxpr))
    paths = loops + tail_paths
    copies: list[tuple[int, int]] = []  # (rows of the box, bytes of its source's SMEM row)
    for eqn in all_eqns(jaxpr):
        if eqn.primitive.name == "copy_smem_to_gmem":
            src = eqn.invars[0].aval
            hit = re.search(r"Slice\[\(\w+, (\d+), 1\)\]", str(eqn.params["src_transforms_treedef"]))
            if hit:  # a ladder box (a whole subtile's one box, unsliced, beside it is not counted again)
                copies.append((int(hit.group(1)), src.shape[-1] * src.dtype.itemsize))
    top = max(rows for rows, _ in copies)
    subtiles = sum(rows == top for rows, _ in copies) // paths
    return {"subtiles": subtiles, "covered": subtiles * cfg.epi_m * cfg.epi_n >= cfg.tile_m * cfg.wg_n,
            "ladder_row_bytes": min(row for _, row in copies)}


def compile_case(spec: dict) -> dict:
    """The lowering's side: {plan_smem, stages, lowered: {ok, smem, error_class, error, subtiles, covered,
    ladder_row_bytes, ...}} (tests/grids/mgpu.py's `runs` reads `lowered`)."""
    from mgpu import program_facts

    def facts(jaxpr, cfg) -> dict[str, object]:
        return {**program_facts(jaxpr, (cfg.epi_m, cfg.epi_n)),
                **ladder_facts(jaxpr, cfg, tail_paths=1 if spec["groups"]["tail"] == "zero" else 0)}

    return lower_case(spec, "grouped_mgpu", lambda s, struct, args, m, n, k: args, facts)


def lower_case(spec: dict, prefix: str, problem, facts) -> dict:
    """One grid spec's verdict as `specgen compile` gives it (its module rendered, loaded, lowered by the design's
    compile hook) and, where it traces, `facts(jaxpr, cfg)` of its program over `problem(spec, args, m, n, k)`'s
    arguments (`struct` and `args` the hook's problem structs), SMEM probed where the hook reports none; a spec the design cannot
    render does not run. Shared by the ragged-M grid and the ragged-K one (grouped_mgpu_k.py)."""
    import jax
    from mgpu import _last_lines, error_class, probe_smem

    from specgen.compile import load_rendered
    from specgen.kinds.grouped.designs.pallas.compile import problem_structs
    from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
    from specgen.kinds.grouped.spec import GroupedSpec
    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text
    from specgen.targets import TARGETS

    folder = Path(tempfile.mkdtemp(prefix=f"specgen-{prefix.replace('_', '-')}-grid-"))
    try:
        (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<grid:{spec['name']}>", ".json")
        (text,) = [t for rel, t in render_modules(ls, ls.spec.targets).items() if not rel.endswith("__init__.py")]
        (folder / f"{spec['name']}.py").write_text(text)
        mod = load_rendered(folder / f"{spec['name']}.py", f"_grid_{prefix}_{spec['name']}")
    except Exception as e:  # noqa: BLE001 - a spec the design cannot render does not run
        return {"lowered": {"ok": False, "smem": None, "error_class": "render",
                            "error": _last_lines(f"{type(e).__name__}: {e}")}}
    cfg = mod.CONFIG
    (r,) = compile_module(mod, TARGETS[TARGET])  # what `specgen compile` runs: the verdict (a grid spec: one config)
    row: dict[str, object] = {"ok": not r.error, "smem": r.compiler_smem,
                              "error_class": error_class(r.error) if r.error else "", "error": _last_lines(r.error)}
    m, n, k = 2 * cfg.tile_m + 3, 2 * cfg.tile_n + 3, (cfg.stages + 1) * cfg.tile_k + 3  # the hook's problem
    s = GroupedSpec.model_validate(mod.SPEC)
    struct, args = problem_structs(s, m, n, k)
    args = problem(s, struct, args, m, n, k)
    with contextlib.suppress(Exception):  # where it does not trace, the lowering failed above, with its message
        row.update(facts(jax.jit(mod._launch).trace(*args).jaxpr.jaxpr, cfg))
    if row["smem"] is None:
        row["smem"] = probe_smem(mod._launch, args)
    return {"plan_smem": cfg.smem_bytes, "stages": cfg.stages, "lowered": row}


def record(script: str, specs: list[dict], n: int, seed: int, out: Path) -> int:
    """Lower `specs` (drive: one worker process a config, resumable) and write the record in tests/grids/mgpu.py's
    layout, made by `script`."""
    import jax

    work = out.with_suffix(".work.jsonl")
    rows = drive(script, [str(n), str(seed), str(work)], specs, work, lambda message: {
        "lowered": {"ok": False, "smem": None, "error_class": "died", "error": message}})
    cases = [{"spec": r["spec"], **r["compiler"]} for r in rows]  # tests/grids/mgpu.py's record layout
    write_record(out, {"made_by": f"python tests/grids/{Path(script).name} {n} {seed}", "jax": jax.__version__,
                       "target": TARGET, "seed": seed}, cases)
    return summary(out)


def main(n: int, seed: int, out: Path = RECORD) -> int:
    return record(__file__, [*grid(n, seed)], n, seed, out)

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:], grid, compile_case, main, RECORD))
