"""Check agrees with the Triton compiler (tests/differential.py). The grid's compiles are recorded in
tests/data/grid_triton.jsonl (spec, arch, the compiled depth, the compiler's verdict and SMEM or
error, ptxas' spills, the triton version); CI replays `check` over every recorded case on the CPU in seconds: no
false accepts and at most 2% false rejects per arch. A few live `triton.compile` cases (marked
`slow`: `-m "not slow"` deselects them) keep the record honest against the installed compiler;
`nox -s diff` re-runs the whole grid (it compiles only what the record lacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from differential import ARCHS, GRID_SEED, GRID_SPECS, compare, grid, load_records, replay, verdict

ROOT = Path(__file__).resolve().parents[1]
LIVE_SPECS = 2  # per arch: 4 compiles, about 10 s with the interpreter's start


@pytest.mark.parametrize("record", ["grid_triton.jsonl", "grid_triton_3.6.jsonl"])  # triton 3.9.0 (CI), 3.6.0 (torch 2.11)
def test_check_agrees_with_the_recorded_grid(record: str) -> None:
    """With the compiler installed (a near verdict is the compiler's) no false accept and at most 2% false
    rejects; the model alone (`--no-compile`) accepts no failing config silently: each is near the boundary."""
    records = load_records(ROOT / "tests" / "data" / record)
    cases, stale = replay(records)
    assert not stale, f"check now resolves other depths than were compiled: run `nox -s diff` ({stale[:5]})"
    for arch in ARCHS:
        mine = [c for c in cases if c.arch == arch]
        # the record is the grid: every (spec, arch) of it, once, with the triton version that compiled it
        assert [c.name for c in mine] == [s["name"] for s in grid(GRID_SPECS, GRID_SEED, arch)]
        assert all(r["triton"] and r["verdict"] == verdict(r) for r in records)
        s = compare(mine)
        print(f"{record} {arch}: {s['cases']} cases, {s['runs']} run, {s['near']} near the boundary; with the "
              f"compiler {len(s['false_accepts'])} false accepts, {len(s['false_rejects'])} false rejects; the model "
              f"alone {s['model_false_accepts']} / {s['model_false_rejects']}; plan within 10% on "
              f"{s['within_10pct']:.1%} of the accepted")
        assert s["false_accepts"] == [] and s["silent_false_accepts"] == []
        assert len(s["false_rejects"]) <= 0.02 * s["cases"], s["false_rejects"]


@pytest.mark.slow
def test_check_agrees_with_the_compiler_live() -> None:
    """The grid's first specs per arch, compiled now (a subprocess: compiling needs the interpreter off,
    which the rest of the CPU suite keeps on), give the verdicts and SMEM the record holds."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "differential.py"), "live", str(LIVE_SPECS)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    cases = [line["case"] for line in lines if "case" in line]
    (result,) = [line for line in lines if "summary" in line]
    assert len(cases) == result["summary"]["cases"] == len(ARCHS) * LIVE_SPECS, proc.stderr[-2000:]
    assert result["problems"] == [] and proc.returncode == 0, proc.stderr[-2000:]
    # the record's compiler: the same SMEM to the byte; another triton: the same verdicts at least
    recorded = {(r["spec"]["name"], r["arch"]): r for r in load_records()}
    same = all(recorded[(c["name"], c["arch"])]["triton"] == version("triton") for c in cases)
    for c in cases:
        rec = recorded[(c["name"], c["arch"])]
        assert verdict(c) == rec["verdict"] and (not same or c["compiler_smem"] == rec["compiler_smem"]), (c, rec)
