"""A fake compile that holds the compiles back until a timing has run (tests/tune/test_stream.py), in a module
of its own so that Ray's workers import it by name."""

from __future__ import annotations

import time
from pathlib import Path

from specgen.tune.compile_jobs import CompileJob
from tests.tune.fakes import failing_compile

GATE_S = 30.0  # how long a gated compile waits for the first timing before it gives up (a failing test)


def gated_compile(job: CompileJob) -> dict:
    """failing_compile's verdicts, but every compile after the first waits for a timing to have run (the
    file `timed` beside the job's folder, written by the timing side), and fails if none runs in GATE_S."""
    marker = Path(job.folder).parent / "timed"
    first = Path(job.folder).parent / "first-compile"
    first.parent.mkdir(parents=True, exist_ok=True)
    if first.exists():
        deadline = time.monotonic() + GATE_S
        while not marker.exists():
            if time.monotonic() > deadline:
                return {"key": job.key, "error": "gate: no timing ran while the candidates compiled", "seconds": 0.0,
                        "compiler_smem": 0}
            time.sleep(0.01)
    first.touch()
    return failing_compile(job)
