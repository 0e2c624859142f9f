"""The Ray path on a local Ray cluster (CPU only): compile tasks on Ray CPU workers, real Triton compiles
for sm_90 (no GPU needed), the same results a process pool gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.compile_jobs import CompileJob, pool, ray_tasks
from specgen.tune.space import config_key, enumerate_candidates, flattened
from tests.tune.conftest import RAY_TESTS

ROOT = Path(__file__).resolve().parents[2]
ray = pytest.importorskip("ray")


def _jobs(tmp_path: Path) -> list[CompileJob]:
    loaded = load_file(ROOT / "specs" / "gemm_bf16.toml")[0]
    t = parse_target("triton:sm90")
    c = enumerate_candidates(loaded, t, None, {"tile.m": (128,), "tile.n": (64, 128), "tile.k": (64,),
                                               "triton.num_warps": (4,), "pipeline.ab_stages": (3,)})
    return [CompileJob(f"j{i}", flattened(loaded, t, None, k), str(t), str(tmp_path)) for i, k in
            enumerate(c.kept) if config_key(k) != config_key(c.incumbent)]


# the process pool's compiler SMEM per job key, from the first test (the Ray test compares its own with these)
_POOL_SMEM: dict[str, int] = {}


@RAY_TESTS  # beside the Ray test (one worker), which reuses its compiles
def test_a_warmed_pool_starts_the_clock_after_every_worker_imported_its_compilers(tmp_path: Path) -> None:
    """--compile-only's clock: `ready` runs once, after the workers' imports and before the first job."""
    import time

    jobs, marks = _jobs(tmp_path), []
    results = list(pool(2, ready=lambda: marks.append(time.perf_counter()))(jobs))
    assert len(marks) == 1 and len(results) == 2 and all(not r["error"] for r in results)
    _POOL_SMEM.update({r["key"]: r["compiler_smem"] for r in results})


@RAY_TESTS
def test_ray_compile_tasks_on_a_local_cluster(tmp_path: Path, ray_cluster) -> None:
    jobs = _jobs(tmp_path)
    assert len(jobs) == 2
    results = {r["key"]: r for r in ray_tasks()(jobs)}
    assert set(results) == {j.key for j in jobs}
    assert all(not r["error"] for r in results.values()), results
    # the compiler's SMEM grows with the tile (64 -> 128 columns of B per stage)
    assert 0 < results["j1"]["compiler_smem"] < results["j2"]["compiler_smem"]
    # a process pool compiles the same kernels to the same figures (the test above's pool, where it ran first here)
    again = _POOL_SMEM or {r["key"]: r["compiler_smem"] for r in pool(2)(jobs)}
    assert again == {k: r["compiler_smem"] for k, r in results.items()}


@RAY_TESTS
def test_ray_timing_keeps_every_gpu_busy_and_survives_a_killed_actor(tmp_path: Path, ray_cluster) -> None:
    import time

    from specgen.tune.measure import RayActors, TimeJob, TimingActor

    class SlowActor(TimingActor):  # defined here so Ray ships it by value to its workers
        """A timing actor without a GPU (TimingActor's counting and stats, no CUDA): each job takes 0.4 s and
        names the process that ran it. The job whose shape has M = 13 kills its actor's process the first
        time it runs (a marker file says so)."""

        def __init__(self, folder: str, flush: str = "write") -> None:
            self.folder, self.jobs, self.busy_s = Path(folder), 0, 0.0

        def time_one(self, cand, inc, target, shape, rounds):
            import os
            import time

            marker = self.folder / "killed-once"
            if shape[0] == 13 and not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(1)  # as a crashed driver or `kill -9` would
            time.sleep(0.4)
            return {"ratio": float(shape[0]), "pid": os.getpid()}

    actors = RayActors(tmp_path, actor_class=SlowActor)
    assert len(actors.actors) == 2  # one per GPU the cluster lists
    jobs = [TimeJob({}, {}, "triton:sm90", (m, 64, 64), 3, tag=m) for m in (1, 2, 3, 4, 5, 6)]
    for a in actors.actors:  # both processes up before the clock starts (not counted: not through imap)
        ray.get(a.time_one.remote({}, {}, "t", (0, 1, 1), 3))
    start = time.monotonic()
    got = dict((job.tag, m) for job, m in actors.imap(jobs))
    wall = time.monotonic() - start
    assert sorted(got) == [1, 2, 3, 4, 5, 6] and all(got[t]["ratio"] == t for t in got)
    assert len({m["pid"] for m in got.values()}) == 2  # both actors timed
    # each GPU's busy time: both fake GPUs got jobs, each busy for about its jobs' 0.4 s, within the wall
    busy = actors.busy()
    assert sorted(b.gpu for b in busy) == ["0", "1"] and {b.pid for b in busy} == {m["pid"] for m in got.values()}
    assert sum(b.jobs for b in busy) == 6 and all(b.jobs >= 1 and b.own_jobs == b.jobs for b in busy)
    assert all(0.4 * b.jobs <= b.busy_s <= b.wall_s <= wall + 0.05 for b in busy), busy
    # two GPUs busy at once: each actor always holds a job in flight, so their send-to-result times add up
    # to about twice the phase's wall whatever the machine's load (no bound on the wall itself)
    assert sum(b.busy_s for b in busy) > 1.5 * busy[0].wall_s
    for b in busy:
        assert re.fullmatch(rf"GPU {b.gpu} \(pid {b.pid}\): {b.jobs} jobs, busy \d+\.\d s of \d+\.\d s wall "
                            r"\(\d+%\)", b.line()), b.line()
    # affinity: a candidate's shapes (sent candidate by candidate, as run.py sends them) run on the actor
    # that timed its first shape, which has its module loaded; both actors still busy
    cands = [{"c": i} for i in range(3)]
    paired_jobs = [TimeJob(c, {}, "triton:sm90", (m, 64, 64), 3, tag=(i, m)) for i, c in enumerate(cands)
                   for m in (21, 22)]
    ran = {job.tag: m["pid"] for job, m in actors.imap(paired_jobs)}
    assert all(ran[(i, 21)] == ran[(i, 22)] for i in range(3)), ran
    assert len(set(ran.values())) == 2
    # an actor killed mid-job: the job goes to the other actor at once (not to the dead one's restart),
    # nothing is lost, the run completes, and the restarted actor takes jobs again
    more = [TimeJob({}, {}, "triton:sm90", (m, 64, 64), 3, tag=m) for m in (11, 12, 13, 14)]
    done = dict((job.tag, m) for job, m in actors.imap(more))
    assert (tmp_path / "killed-once").exists()
    assert sorted(done) == [11, 12, 13, 14] and all(isinstance(m, dict) for m in done.values()), done
    killed = int((tmp_path / "killed-once").read_text())
    assert done[13]["pid"] != killed
    # the driver's counts survive the restart (16 results and the job the killed process died under); the
    # restarted process counted only its own
    after = actors.busy()
    assert sum(b.jobs for b in after) == 17 and all(b.busy_s <= b.wall_s for b in after)
    (hit,) = [b for b in after if b.own_jobs is not None and b.own_jobs < b.jobs]
    (other,) = [b for b in after if b is not hit]
    assert killed != hit.pid and hit.deaths == 1 and "restarted" in hit.line() and "died under 1 job" in hit.line()
    assert done[13]["pid"] == other.pid  # retried on the actor that did not die
    assert len(actors.events) == 1 and "the job went to actor" in actors.events[0]
    back = dict((job.tag, m["pid"]) for job, m in actors.imap(
        [TimeJob({}, {}, "triton:sm90", (m, 64, 64), 3, tag=m) for m in (31, 32, 33, 34)]))
    assert hit.pid in back.values()  # the restarted actor times again
