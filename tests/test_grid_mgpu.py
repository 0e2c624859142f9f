"""`specgen check` agrees with the Mosaic GPU lowering: replays check on every spec of the recorded grid
(tests/data/grid_mgpu.json, written by tests/grids/mgpu.py, which lowered each spec for CUDA with jax and
its CUDA plugin on a CPU machine) against the recorded lowering verdicts. No jax, no plugin: check only.

- no false accepts: every spec check passes lowered;
- false rejects (check refuses what lowered) at most 2%, and only by rules about what a lowering cannot
  see: PAL006 (epilogue subtiles that would leave part of a warpgroup's slice unwritten: wrong results,
  not a lowering error) and REG001 (an accumulator of more than 255 registers a thread: ptxas's
  problem, after the lowering);
- the SMEM check computes (the design's `memory`, the SMEM001 figure) equals Mosaic GPU's own
  allocation on every case whose figure was recorded.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "grid_mgpu.json"
BEYOND_LOWERING = {"PAL006", "REG001"}  # rules whose refusals no lowering error shows


def _grid_module():
    spec = importlib.util.spec_from_file_location("_grid_mgpu", ROOT / "tests" / "grids" / "mgpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def replay() -> tuple[dict, list[tuple[dict, list[str]]]]:
    record = json.loads(RECORD.read_text())
    grid = _grid_module()
    return record, [(case, grid.check(case["spec"])[0]) for case in record["cases"]]


def test_the_record_is_a_real_grid(replay) -> None:
    record, cases = replay
    assert record["target"] == "pallas:gpu_sm90" and len(cases) >= 300
    lowered = [c for c, _ in cases if c["lowered"]["ok"]]
    assert 0.25 * len(cases) < len(lowered) < 0.75 * len(cases)  # both verdicts, near the boundaries


def test_no_false_accepts(replay) -> None:
    _, cases = replay
    false_accepts = [(c["spec"]["name"], c["lowered"]["error_class"], c["lowered"]["error"])
                     for c, errors in cases if not errors and not c["lowered"]["ok"]]
    assert false_accepts == []


def test_false_rejects_are_few_and_beyond_the_lowering(replay) -> None:
    _, cases = replay
    false_rejects = [(c["spec"]["name"], errors) for c, errors in cases if errors and c["lowered"]["ok"]]
    assert len(false_rejects) <= 0.02 * len(cases), false_rejects
    assert all(set(errors) <= BEYOND_LOWERING for _, errors in false_rejects), false_rejects


def test_smem_model_equals_mosaic_gpus_figure(replay) -> None:
    from specgen.resolve import resolve
    from specgen.spec.models import GemmSpec, parse_target

    _, cases = replay
    target = parse_target("pallas:gpu_sm90")
    off = []
    for case, _ in cases:
        figure = case["lowered"]["smem"]
        if figure is None:  # the plan had no swizzle (PAL008): nothing was allocated
            continue
        ctx = resolve(GemmSpec.model_validate(case["spec"]), target)
        if ctx.budget.total != figure:
            off.append((case["spec"]["name"], ctx.budget.total, figure))
    assert off == []
    assert sum(c["lowered"]["smem"] is not None for c, _ in cases) >= 150
