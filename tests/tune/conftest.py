"""Shared pieces of the tuner's tests: a copy of a catalogue spec in a temporary folder, and a tune run
with the fake GPU (tests/tune/fakes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.bench.shapes import parse_shapes
from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.cache import Cache, Machine
from specgen.tune.compile_jobs import inline
from specgen.tune.measure import local
from specgen.tune.run import tune
from tests.tune.fakes import FakeTimer, failing_compile, fake_calls

ROOT = Path(__file__).resolve().parents[2]
MACHINE = Machine(gpu="Fake H200", driver="0.0", versions={"triton": "x"})
# a 24-config space on one target and shape (the size the GPU run compares against timing all)
# (all 24 pass check on gemm_bf16's triton:sm90; the incumbent, 128x256 with `auto` stages, is the 25th)
SMALL = {"tile.m": (64, 128), "tile.n": (64, 128), "tile.k": (64,), "triton.num_warps": (4, 8),
         "pipeline.ab_stages": (2, 3, 4)}


@pytest.fixture
def spec_copy(tmp_path: Path):
    def copy(name: str = "gemm_bf16.toml") -> Path:
        dst = tmp_path / name
        dst.write_text((ROOT / "specs" / name).read_text())
        return dst
    return copy


def run_tune(path: Path, cache: Path, *, kernel: int = 0, targets=("triton:sm90",), shapes="8192x8192x8192",
             overrides=None, measurer=None, write=False, budget_s=None, clock=None, from_cache=False):
    loaded = load_file(path)[kernel]
    kwargs = {} if clock is None else {"clock": clock}
    shapes_of = parse_shapes(shapes, loaded.spec.kind)
    return tune(loaded, [parse_target(t) for t in targets], shapes_of, cache=Cache(cache),
                machine=None if from_cache else MACHINE, compiler=None if from_cache else inline(failing_compile),
                measurer=None if from_cache else (measurer or local(fake_calls, FakeTimer())), rounds=9,
                overrides=overrides, budget_s=budget_s, do_write=write, date="2026-11-25", **kwargs)
