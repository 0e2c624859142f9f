"""Check agrees with the Triton compiler on the grouped design (issue 37's check: the compile grids extended to
the grouped designs). tests/grids/grouped_triton.py's seeded grid of borderline grouped configs, compiled by
`triton.compile` for sm_90 and sm_100 and recorded (spec, arch, the compiled depth, the compiler's SMEM or
error, ptxas' spills, the triton version); CI replays check over every recorded case: no false accept and at
most 2% false rejects per arch with the compiler (a near verdict is the compiler's), and no silent false accept
by the model alone (each failing config it accepts is near the boundary: a warning). The fresh record was
drawn (seed 38) after the grouped rules were final, and compiled beside seed 37's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "grids"))

from differential import ARCHS, compare, load_records, replay, verdict  # noqa: E402
from grouped_triton import GRID_SEED, GRID_SPECS, grid  # noqa: E402

RECORDS = {  # record: (seed, the grid's size per arch)
    "grid_grouped_triton_3.6.jsonl": (GRID_SEED, GRID_SPECS),  # triton 3.6.0 (torch 2.11's), compiled on the GPU machine's CPUs
    "fresh/fresh_grouped_triton36_38.jsonl": (38, 120),
    "grid_grouped_triton.jsonl": (GRID_SEED, GRID_SPECS),  # triton 3.9.0 (CI's), compiled on this CPU machine
}


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_check_agrees_with_the_recorded_grouped_grid(record: str) -> None:
    seed, n = RECORDS[record]
    records = load_records(ROOT / "tests" / "data" / record)
    cases, stale = replay(records)
    assert not stale, f"check now resolves other depths than were compiled: run `nox -s grid_grouped` ({stale[:5]})"
    assert all(r["triton"] and r["verdict"] == verdict(r) for r in records)
    for arch in ARCHS:
        mine = [c for c in cases if c.arch == arch]
        assert [c.name for c in mine] == [s["name"] for s in grid(n, seed, arch)]  # the record is the grid
        s = compare(mine)
        print(f"{record} {arch}: {s['cases']} cases, {s['runs']} run, {s['near']} near the boundary; with the "
              f"compiler {len(s['false_accepts'])} false accepts, {len(s['false_rejects'])} false rejects; the model "
              f"alone {s['model_false_accepts']} / {s['model_false_rejects']}")
        assert s["false_accepts"] == [] and s["silent_false_accepts"] == []
        assert len(s["false_rejects"]) <= 0.02 * s["cases"], s["false_rejects"]
