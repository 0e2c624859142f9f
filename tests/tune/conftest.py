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


# --- one local Ray cluster for the tests that need one ------------------------------------------------------
# Starting a cluster costs seconds of CPU (GCS, raylet, workers importing specgen): the tests that take the
# `ray_cluster` fixture share one (two CPUs, two fake GPUs), marked as one xdist group so they run back to back
# on one worker; it shuts down after the last of them (pytest_runtest_teardown below), not at the session's end.
RAY_TESTS = pytest.mark.xdist_group("ray")


@pytest.fixture
def ray_cluster():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if not ray.is_initialized():
        return
    # a test's actors hold the fake GPUs until their handles are collected: the next test starts from a
    # cluster with both free, or from a new one
    import gc
    import time

    gc.collect()
    deadline = time.monotonic() + 20
    while ray.available_resources().get("GPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    if ray.available_resources().get("GPU", 0) < 2:
        ray.shutdown()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures tore down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "ray_cluster" in getattr(item, "fixturenames", ()) and (
            nextitem is None or "ray_cluster" not in getattr(nextitem, "fixturenames", ())):
        import ray

        ray.shutdown()
