"""Check agrees with the Triton compiler on a seeded grid of borderline configs (tests/differential.py):
no false accepts, false rejects under 2%, the plan's SMEM within 10% of the compiler's on at least
95% of the accepted cases, and REG001 warning wherever ptxas spills. CI compiles a few dozen cases; `nox -s diff` the full grid. Runs in a
subprocess: compiling needs the interpreter off, which the rest of the CPU suite keeps on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_SPECS = 12  # x 2 archs: 24 compiles


@pytest.mark.slow
def test_check_agrees_with_the_compiler_on_a_seeded_grid() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "differential.py"), str(CI_SPECS), "7"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1500)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    cases = [line["case"] for line in lines if "case" in line]
    (result,) = [line for line in lines if "summary" in line]
    summary = result["summary"]
    assert len(cases) == summary["cases"] == 2 * CI_SPECS, proc.stderr[-2000:]
    assert summary["compiled"] >= 0.9 * summary["cases"], [c for c in cases if c["compiler_smem"] is None]
    assert summary["false_accepts"] == []
    assert len(summary["false_rejects"]) < 0.02 * summary["cases"], summary["false_rejects"]
    assert summary["within_10pct"] >= 0.95, summary["off_by_more_than_10pct"]
    assert summary["spilled_without_warning"] == []  # REG001 warns wherever ptxas spills 1 KB or more
    assert result["problems"] == [] and proc.returncode == 0, proc.stderr[-2000:]
