"""check agrees with the CuTe DSL compiler on cute:sm100: `check` replayed over every spec of the recorded
compile grid (tests/data/grid_cute_sm100.json, written by `python tests/grids/cute_sm100.py N SEED OUT`),
against the compiler's recorded verdict (a cubin for sm_100a without LDL/STL within the SMEM limit, or
not): no false accepts, at most 2% false rejects. No compiler runs here. (No Blackwell GPU exists here:
the record is of compiles, not of runs.)"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RECORD = ROOT / "tests" / "data" / "grid_cute_sm100.json"
sys.path.insert(0, str(ROOT / "tests" / "grids"))

import cute_sm100 as grid  # noqa: E402  (tests/grids is no package)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


def replay(cases: list[dict]) -> dict:
    return grid.summarize([{"spec": c["spec"], "check": grid.check_case(c["spec"]), "compiler": c["compiler"]}
                           for c in cases])


def test_check_agrees_with_the_recorded_sm100_compiles(record, capsys):
    start = time.perf_counter()
    random = [c for c in record["cases"] if not c["spec"]["name"].startswith("bprobe_")]
    probes = [c for c in record["cases"] if c["spec"]["name"].startswith("bprobe_")]
    summary, named = replay(random), replay(probes)
    with capsys.disabled():
        print(f"\n{record['generator']} ({record['dsl']}): {summary['cases']} random specs, compiler "
              f"{summary['compiler']}, check {summary['check']}: {len(summary['false_accepts'])} false accepts, "
              f"{len(summary['false_rejects'])} false rejects ({len(summary['false_rejects']) / summary['cases']:.1%}); "
              f"{named['cases']} probes: {len(named['false_accepts'])} false accepts, "
              f"{len(named['false_rejects'])} false rejects; replayed in {time.perf_counter() - start:.1f} s")
    assert len(random) >= 300 and "4.8.1" in record["dsl"] and record["target"] == "cute:sm100"
    assert summary["false_accepts"] == [] and named["false_accepts"] == []
    assert len(summary["false_rejects"]) <= 0.02 * len(random), summary["false_rejects"]
    assert named["false_rejects"] == []
    # the grid reaches both sides of the lines: kernels that build, and each way of failing
    assert summary["compiler"]["ok"] >= 100 and summary["compiler"]["smem"] >= 10 and summary["compiler"]["error"] >= 10


def test_built_kernels_allocate_the_plans_smem_and_tmem(record):
    built = [c["compiler"] for c in record["cases"] if c["compiler"]["verdict"] in ("ok", "spill", "smem")]
    assert len(built) >= 150
    for c in built:
        assert c["compiler_smem"] == c["plan_smem"] and c["tmem_columns"] == c["plan_tmem_columns"], c
