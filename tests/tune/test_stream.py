"""One stream of compiles and timings for several specs (run.tune_many): timings start while candidates
still compile (the compile of every candidate but the first waits until a timing has run, so a stream that
timed only after the last compile would stall there), the picks and the cache are those of compiling
everything first, and on a local Ray cluster with two fake GPUs both actors time while Ray compiles. A
job whose actor dies twice is that candidate's failure, and the rest of the run completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.bench.shapes import parse_shapes
from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.cache import Cache
from specgen.tune.compile_jobs import inline
from specgen.tune.measure import local
from specgen.tune.run import Timeline, tune_many
from tests.tune.conftest import MACHINE, RAY_TESTS, ROOT, SMALL
from tests.tune.fakes import FakeTimer, failing_compile, fake_calls
from tests.tune.gate import gated_compile

SPECS = (("gemm_bf16.toml", 0), ("catalogue.toml", 0))  # gemm_bf16 and gemm_bias_gelu_bf16 on triton:sm90
SHAPES = "8192x8192x8192,4096x4096x4096"


def _specs(tmp_path: Path) -> list:
    out = []
    for name, index in SPECS:
        path = tmp_path / name
        path.write_text((ROOT / "specs" / name).read_text())
        out.append((load_file(path)[index], [parse_target("triton:sm90")]))
    return out


def _picks(reports: list) -> list:
    return [(r.slots[i].label, r.slots[i].winner, r.slots[i].timed) for r in reports for i in range(len(r.slots))]


def _timings(cache: Path) -> set[str]:
    return {e.key for e in Cache(cache).entries.values() if e.kind == "time" and not e.error}


def test_timings_start_while_candidates_compile_and_pick_as_compiling_first(tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    ref = tune_many(specs, parse_shapes(SHAPES, "gemm"), cache=Cache(tmp_path / "ref" / "c.jsonl"), machine=MACHINE,
                    compiler=inline(failing_compile), measurer=local(fake_calls, FakeTimer()), rounds=9,
                    overrides=SMALL, date="2026-11-27")
    stream = tmp_path / "stream" / "c.jsonl"
    inner, order = local(fake_calls, FakeTimer()), []

    def measurer(cand, inc, target, shape, rounds):
        (stream.parent / "modules").mkdir(parents=True, exist_ok=True)
        (stream.parent / "modules" / "timed").touch()  # the gate opens: the compiles after the first go on
        order.append((id(cand), shape))
        return inner(cand, inc, target, shape, rounds)

    timeline = Timeline()
    got = tune_many(specs, parse_shapes(SHAPES, "gemm"), cache=Cache(stream), machine=MACHINE, compiler=inline(gated_compile),
                    measurer=measurer, rounds=9, overrides=SMALL, date="2026-11-27", overlap=True, timeline=timeline)
    assert all(not e.startswith("gate") for r in got for s in r.slots for e in s.failed.values())
    assert timeline.first_timing_s is not None and timeline.last_compile_s is not None
    assert timeline.first_timing_s < timeline.last_compile_s  # a timing landed before the last compile
    assert timeline.compiles == sum(r.compiled for r in got) == sum(r.compiled for r in ref) == 50
    assert _picks(got) == _picks(ref) and all(r.slots[0].winner is not None for r in got)
    assert _timings(stream) == _timings(tmp_path / "ref" / "c.jsonl")
    assert [r.measured for r in got] == [r.measured for r in ref] == [46, 46]  # 23 candidates x 2 shapes each
    # a candidate's shapes are timed one after the other (what RayActors' affinity relies on)
    assert all(order[i][0] == order[i + 1][0] for i in range(0, len(order), 2))


def test_each_spec_of_a_stream_keeps_its_own_budget(tmp_path: Path) -> None:
    """--budget is each spec's, counted from its first timing: the first spec's spent budget does not stop
    the second's timings (which start after the first's here: the stream times in spec order)."""
    ticks = iter(range(10_000))
    reports = tune_many(_specs(tmp_path), parse_shapes("8192x8192x8192", "gemm"), cache=Cache(tmp_path / "c.jsonl"),
                        machine=MACHINE, compiler=inline(failing_compile), measurer=local(fake_calls, FakeTimer()),
                        rounds=9, overrides=SMALL, budget_s=5.5, clock=lambda: next(ticks))
    assert [(r.budget_stop, r.measured) for r in reports] == [(True, 5), (True, 5)]


ray = pytest.importorskip("ray")


@RAY_TESTS
def test_ray_stream_times_on_both_gpus_while_ray_compiles(tmp_path: Path, ray_cluster) -> None:
    from specgen.tune.compile_jobs import ray_tasks
    from specgen.tune.measure import RayActors, TimingActor

    class FakeGpuActor(TimingActor):  # defined here so Ray ships it by value to its workers
        """A timing actor without a GPU: fakes.py's timer and calls, and the gate's marker after each job."""

        def __init__(self, folder: str, flush: str = "write") -> None:
            from tests.tune.fakes import FakeTimer

            self.folder, self.jobs, self.busy_s, self.timer = Path(folder), 0, 0.0, FakeTimer()

        def time_one(self, cand, inc, target, shape, rounds):
            from specgen.kinds.gemm.problem import Shape
            from specgen.tune.measure import measure
            from tests.tune.fakes import fake_calls

            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "timed").touch()
            return measure(fake_calls, self.timer, cand, inc, target, Shape(*shape), rounds)

    specs = _specs(tmp_path)
    ref = tune_many(specs, parse_shapes(SHAPES, "gemm"), cache=Cache(tmp_path / "ref" / "c.jsonl"), machine=MACHINE,
                    compiler=inline(failing_compile), measurer=local(fake_calls, FakeTimer()), rounds=9,
                    overrides=SMALL, date="2026-11-27")
    cache = tmp_path / "ray" / "c.jsonl"
    actors = RayActors(cache.parent / "modules", actor_class=FakeGpuActor)
    timeline = Timeline()
    got = tune_many(specs, parse_shapes(SHAPES, "gemm"), cache=Cache(cache), machine=MACHINE,
                    compiler=ray_tasks(gated_compile, slots=1, warm=("json",)), measurer=actors, rounds=9,
                    overrides=SMALL,
                    date="2026-11-27", overlap=True, timeline=timeline)
    busy = actors.busy()
    assert all(not e.startswith("gate") for r in got for s in r.slots for e in s.failed.values())
    assert timeline.first_timing_s is not None and timeline.last_compile_s is not None
    assert timeline.first_timing_s < timeline.last_compile_s
    assert _picks(got) == _picks(ref) and _timings(cache) == _timings(tmp_path / "ref" / "c.jsonl")
    assert sum(b.jobs for b in busy) == 92 and all(b.jobs > 0 and b.busy_s <= b.wall_s for b in busy), busy


@RAY_TESTS
def test_a_job_that_kills_two_actors_is_its_candidates_failure(tmp_path: Path, ray_cluster) -> None:
    from specgen.tune.measure import RayActors, TimeJob, TimingActor

    class Crashes(TimingActor):
        """A timing actor whose process dies at every job with M = 13 (as a kernel that takes the process down
        would); every other job returns at once."""

        def __init__(self, folder: str, flush: str = "write") -> None:
            self.jobs, self.busy_s = 0, 0.0

        def time_one(self, cand, inc, target, shape, rounds):
            import os

            if shape[0] == 13:
                os._exit(1)
            return {"ratio": float(shape[0]), "pid": os.getpid()}

    actors = RayActors(tmp_path, actor_class=Crashes)
    jobs = [TimeJob({"c": m}, {}, "triton:sm90", (m, 64, 64), 3, tag=m) for m in (11, 12, 13, 14, 15, 16)]
    got = dict((job.tag, m) for job, m in actors.imap(jobs))
    busy = actors.busy()
    assert sorted(got) == [11, 12, 13, 14, 15, 16]
    assert isinstance(got[13], ray.exceptions.RayActorError)  # sent once more, to the other actor: the verdict
    assert all(got[m]["ratio"] == m for m in (11, 12, 14, 15, 16))
    assert sorted(b.deaths for b in busy) == [1, 1] and len(actors.events) == 1


def test_a_failed_warm_up_is_left_to_the_first_job(tmp_path: Path) -> None:
    """TimingActor's warm-up at start (imports, CUDA, the profiler) never keeps the actor from starting: on a
    machine without a GPU, or with a compiler missing, the first job meets the failure and reports it."""
    from specgen.tune.measure import TimingActor

    actor = TimingActor(str(tmp_path), "write", ("json", "no_such_compiler_module"))
    assert actor.jobs == 0 and actor.calls.folder == tmp_path
