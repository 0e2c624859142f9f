"""Test doubles for the GPU: a deterministic timing function keyed by config (a fake timer behind the real
paired statistics), fake calls that carry each candidate's config, and a fake compile that fails one
config. Not hard-coded results: the tuner has to find the fastest config the function defines."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from specgen.bench.timing import Call
from specgen.kinds.gemm.problem import Shape
from specgen.tune.compile_jobs import CompileJob

# the fastest config of the fake GPU for every shape: 128x128x64 tiles, 4 warps, 4 stages
BEST = {"m": 128, "n": 128, "k": 64, "num_warps": 4, "ab_stages": 4}


def fake_us(flat: dict, shape: Shape) -> float:
    """Microseconds of a flattened candidate at a shape: the work, slowed by each knob's distance from BEST."""
    t, p, w = flat["tile"], flat["pipeline"], flat["triton"]["num_warps"]
    stages = p["ab_stages"] if p["ab_stages"] != "auto" else 3
    penalty = (0.03 * abs(math.log2(t["m"] / BEST["m"])) + 0.05 * abs(math.log2(t["n"] / BEST["n"]))
               + 0.02 * abs(math.log2(t["k"] / BEST["k"])) + 0.04 * (w != BEST["num_warps"])
               + 0.01 * abs(stages - BEST["ab_stages"]))
    return 2 * shape.m * shape.n * shape.k / 7e8 * (1 + penalty)


def _jitter(key: str, i: int) -> float:
    h = int(hashlib.sha256(f"{key}/{i}".encode()).hexdigest()[:8], 16)
    return 1 + 0.002 * (h / 0xFFFFFFFF - 0.5)  # +-0.1%, deterministic


class FakeTimer:
    """A Timer: each call's key is a JSON {"us": ...}; every round returns it with a small fixed jitter."""

    def __init__(self) -> None:
        self.cycles = 0

    def cycle(self, calls: dict[str, Call], rounds: int) -> dict[str, list[float]]:
        self.cycles += 1
        return {name: [json.loads(c.key)["us"] * _jitter(c.key + name, i) for i in range(rounds)]
                for name, c in calls.items()}


def fake_calls(cand: dict, inc: dict, target: str, shape: Shape) -> tuple[Call, Call, Call]:
    def call(us: float, who: str) -> Call:
        return Call(json.dumps({"us": us, "who": who}), lambda: None)

    return (call(fake_us(cand, shape), "cand"), call(fake_us(inc, shape), "inc"),
            call(fake_us(inc, shape) * 1.1, "peer"))


def failing_compile(job: CompileJob) -> dict:
    """Every candidate compiles but 64x128 tiles with 4 warps at 3 or 4 stages (a failure check cannot foresee)."""
    t, w, stages = job.flat["tile"], job.flat["triton"]["num_warps"], job.flat["pipeline"]["ab_stages"]
    bad = (t["m"], t["n"], w) == (64, 128, 4) and stages in (3, 4)
    return {"key": job.key, "error": "CompilationError: fake" if bad else "", "seconds": 0.0, "compiler_smem": 0}


def copy_spec(src: Path, dst: Path) -> Path:
    dst.write_text(src.read_text())
    return dst
