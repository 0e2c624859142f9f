"""Timing a candidate: one paired cycle of the candidate, the incumbent and the peer at one shape (the
project's timer), giving candidate vs incumbent and candidate vs peer per round. `Measurer` is what
run.py calls: `local(...)` on this process's GPU, `ray_actors(...)` through one Ray actor per GPU, every GPU busy (`runner`);
the tests pass a fake timer and fake calls. A job stream may yield `WAIT` (nothing ready yet, more to come: the
candidates still compiling), which both runners wait out."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from specgen.bench.problem import ProblemShape, problem_of, shape_text
from specgen.bench.stats import paired
from specgen.bench.timing import Call, Flush, Timer
from specgen.spec.models import parse_target

Measurer = Callable[[dict, dict, str, ProblemShape, int], dict[str, float]]

# A runner with nothing ready to send looks again after this long (a timing takes 0.1-1 s, so the GPUs lose
# little; an event would save the polling but couple the runners to how the stream is fed).
POLL_S = 0.02


class Calls(Protocol):
    def __call__(self, cand: dict, inc: dict, target: str, shape: ProblemShape) -> tuple[Call, Call, Call]:
        """Candidate, incumbent and peer calls on one set of inputs."""
        ...


def measure(calls: Calls, timer: Timer, cand: dict, inc: dict, target: str, shape: ProblemShape,
            rounds: int) -> dict[str, float]:
    c, i, p = calls(cand, inc, target, shape)
    samples = timer.cycle({"cand": c, "inc": i, "peer": p}, rounds)
    vs_inc = paired(samples["cand"], samples["inc"])
    vs_peer = paired(samples["cand"], samples["peer"])
    return {"ours_us": vs_inc.ours_us, "incumbent_us": vs_inc.peer_us, "peer_us": vs_peer.peer_us,
            "ratio": vs_inc.ratio, "ratio_lo": vs_inc.ratio_lo, "ratio_hi": vs_inc.ratio_hi,
            "ratio_peer": vs_peer.ratio, "pairs": vs_inc.pairs}


# Input sets a GpuCalls keeps (one per (semantics, shape)): jobs come candidate by candidate, each at every
# shape of its slot, so one set would be rebuilt at every job.
INPUT_SETS = 4


class GpuCalls:
    """Calls on this machine's GPU: each flattened spec's module rendered once (its compile was done ahead
    of time: the JIT finds it in the disk cache), inputs per (spec semantics, shape) made once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.modules: dict[str, ModuleType] = {}
        self.inputs: dict[tuple, tuple[Any, ...]] = {}

    def _module(self, flat: dict, target: str) -> Any:
        from specgen.bench.workloads import build_module
        from specgen.tune.space import loaded_from

        loaded = loaded_from(flat)
        if loaded.spec_hash not in self.modules:
            self.modules[loaded.spec_hash] = build_module(loaded, parse_target(target), self.folder / loaded.spec_hash)
        return loaded, self.modules[loaded.spec_hash]

    def __call__(self, cand: dict, inc: dict, target: str, shape: ProblemShape) -> tuple[Call, Call, Call]:
        from specgen.bench.workloads import ours_call

        t = parse_target(target)
        (lc, mc), (li, mi) = self._module(cand, target), self._module(inc, target)
        problem = problem_of(li.spec)
        shape = problem.shape(tuple(shape))  # (a Ray job's shape arrives as its tuple)
        key = (li.spec_hash, shape)
        if key not in self.inputs:
            while len(self.inputs) >= INPUT_SETS:  # the oldest first: 8192^3 operands are 256 MB a set
                del self.inputs[next(iter(self.inputs))]
            self.inputs[key] = problem.inputs(li.spec, shape)
        args = self.inputs[key]
        return (Call(f"cand {lc.spec_hash}", ours_call(mc, lc.spec, t, args)),
                Call(f"inc {li.spec_hash}", ours_call(mi, li.spec, t, args)),
                Call(problem.peer_name(li.spec, t), problem.peer_call(li.spec, t, args)))


def local(calls: Calls, timer: Timer) -> Measurer:
    return lambda cand, inc, target, shape, rounds: measure(calls, timer, cand, inc, target, shape, rounds)


class TimingActor:
    """One per GPU under Ray (`num_gpus=1`): the GPU calls and the CUPTI timer in the actor's process.
    `stats()` says where it runs and what it timed since its process started: a restarted actor counts
    from 0 again, so the busy time reported is the driver's (RayActors), and these counts only tell a
    restart apart (fewer jobs here than the driver sent this actor)."""

    def __init__(self, folder: str, flush: Flush = "write", warm: tuple[str, ...] = ()) -> None:
        from specgen.bench.timing import CuptiTimer

        self.calls, self.timer = GpuCalls(Path(folder)), CuptiTimer(flush)
        self.jobs, self.busy_s = 0, 0.0
        if warm:
            self.warm(warm)

    def warm(self, modules: tuple[str, ...]) -> None:
        """What every actor's first job would pay, paid at its start (while the driver plans and the CPUs
        compile): the compilers' imports, the CUDA context, cuBLAS, the profiler and the flush buffer.
        Measured on four H100s before this: the first timing landed ~16 s after the first compile, and each
        actor spent ~5 s more on its first jobs than a lone actor's share. A failure here is left to the
        first job to meet and report."""
        import importlib
        import importlib.util

        from specgen.bench.timing import Call

        try:
            for name in modules:
                if importlib.util.find_spec(name) is not None:
                    importlib.import_module(name)
            import torch

            x = torch.ones(256, 256, device="cuda", dtype=torch.bfloat16)
            self.timer.cycle({"mm": Call("warm mm", lambda: x @ x), "add": Call("warm add", lambda: x + x)}, 3)
        except Exception:  # noqa: BLE001, S110 (see the docstring)
            pass

    def measure(self, cand: dict, inc: dict, target: str, shape: tuple, rounds: int) -> dict[str, float]:
        start = time.perf_counter()
        try:
            return self.time_one(cand, inc, target, shape, rounds)
        finally:
            self.jobs += 1
            self.busy_s += time.perf_counter() - start

    def time_one(self, cand: dict, inc: dict, target: str, shape: tuple, rounds: int) -> dict[str, float]:
        return measure(self.calls, self.timer, cand, inc, target, tuple(shape), rounds)  # (GpuCalls: the kind's Shape)

    def ready(self) -> int:
        """Answers once the process is up (after a restart: once the constructor ran again)."""
        return os.getpid()

    def stats(self) -> dict[str, Any]:
        import ray

        gpu = ",".join(map(str, ray.get_gpu_ids())) or os.environ.get("CUDA_VISIBLE_DEVICES", "?")
        return {"gpu": gpu, "pid": os.getpid(), "jobs": self.jobs, "busy_s": self.busy_s}


@dataclass(frozen=True)
class GpuBusy:
    """One timing actor's share of a Ray tune, as the driver counted it: `busy_s` sums each of its jobs
    from submission to result (one job in flight per actor, so this is its GPU's busy time, and it
    survives a restart); `wall_s` is the timing phases' wall time; `own_jobs` is the actor's own count
    (None if it did not answer); `deaths`: jobs its process died under (counted in `jobs` and `busy_s`: the
    GPU was busy with them)."""
    gpu: str
    pid: int | str
    jobs: int
    busy_s: float
    wall_s: float
    own_jobs: int | None
    deaths: int = 0

    def line(self) -> str:
        pct = 100 * self.busy_s / self.wall_s if self.wall_s else 0.0
        restarted = (f", restarted (its process counted {self.own_jobs} of them)"
                     if self.own_jobs is not None and self.own_jobs < self.jobs else "")
        if self.deaths:
            restarted += f", its process died under {self.deaths} job{'s' * (self.deaths > 1)} (each sent to another actor)"
        return (f"GPU {self.gpu} (pid {self.pid}): {self.jobs} jobs, busy {self.busy_s:.1f} s of "
                f"{self.wall_s:.1f} s wall ({pct:.0f}%){restarted}")


@dataclass(frozen=True)
class TimeJob:
    """One timing: a candidate against the incumbent and the peer at one shape; `tag` is the caller's."""
    cand: dict
    inc: dict
    target: str
    shape: ProblemShape
    rounds: int
    tag: Any = None


class Wait:
    """What a job stream yields when no job is ready yet but more will come (a compile still running)."""

    def __repr__(self) -> str:
        return "WAIT"


WAIT = Wait()
Jobs = Iterable["TimeJob | Wait"]
Outcome = Iterator[tuple[TimeJob, "dict[str, float] | Exception"]]


def serial(measurer: Measurer) -> Callable[[Jobs], Outcome]:
    """One job at a time on this process's GPU, each result yielded as it lands."""
    def imap(jobs: Jobs) -> Outcome:
        for job in jobs:
            if isinstance(job, Wait):
                time.sleep(POLL_S)
                continue
            try:
                yield job, measurer(job.cand, job.inc, job.target, job.shape, job.rounds)
            except Exception as e:  # noqa: BLE001 (the caller records it as the candidate's verdict)
                yield job, e
    return imap


class RayActors:
    """One TimingActor per GPU of the Ray cluster, every actor busy: `imap` keeps one job in flight per
    actor and yields each result as it lands (the caller writes it to the cache at once, so a killed run
    loses nothing finished). A job whose actor's process dies goes to another actor at once (Ray restarts
    the dead one meanwhile, which takes jobs again once it answers); a job that kills two actors is that
    candidate's failure. `busy()`: each GPU's share, counted here in the driver (a restart loses the actor's
    own counters, not these); `events`: each death and where its job went."""

    def __init__(self, folder: Path, actor_class: type | None = None, flush: Flush = "write",
                 warm: tuple[str, ...] = ()) -> None:
        import ray

        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise RuntimeError("--ray: the Ray cluster has no GPU to time on (ray.cluster_resources() lists none)")
        # num_cpus=0: an actor that names a GPU otherwise holds a CPU for its whole life (Ray's default), which
        # takes a core per GPU from the compile tasks (on a 2-core host with 2 GPUs, all of them: no compile
        # ever starts); the compile tasks leave the actors a core each instead where there are cores to spare
        # (compile_jobs.ray_tasks' `slots`). max_task_retries=0: a job whose actor died is sent to another
        # actor by imap, not queued for the dead one's restart (a new process: ~10 s of imports, its GPU idle)
        actor = ray.remote(num_gpus=1, num_cpus=0, max_restarts=4, max_task_retries=0)(actor_class or TimingActor)
        args = (str(folder), flush, warm) if warm else (str(folder), flush)  # (warm: TimingActor.warm's modules)
        self.actors = [actor.remote(*args) for _ in range(gpus)]
        self.jobs, self.busy_s, self.wall_s = [0] * gpus, [0.0] * gpus, 0.0  # per actor; wall over imap calls
        self.deaths = [0] * gpus
        self.events: list[str] = []

    def __call__(self, cand: dict, inc: dict, target: str, shape: ProblemShape, rounds: int) -> dict[str, float]:
        import ray

        return ray.get(self.actors[0].measure.remote(cand, inc, target, tuple(shape), rounds))

    def imap(self, jobs: Jobs) -> Outcome:
        import ray
        from ray.exceptions import RayActorError

        pending, free, lost = iter(jobs), list(range(len(self.actors))), set()
        flying: dict[Any, tuple[TimeJob, int, float, int]] = {}  # ref -> (job, actor, sent, deaths under it)
        probes: dict[Any, int] = {}  # a restarting actor's ready() -> the actor
        again: list[tuple[TimeJob, int, int]] = []  # (job, the actor that died under it, deaths so far)
        # Affinity: a candidate's later shapes go to the actor that timed its first (it has the module loaded;
        # another actor would render, import and load it again: measured on two H100s, that took per-job time
        # from 0.76 to 1.02 s). Such a job waits in `held` for its busy actor, at most one per actor.
        owner: dict[int, int] = {}  # id(job.cand) -> the actor that has its module
        held: dict[int, TimeJob] = {}
        start = last = time.monotonic()

        def send(job: TimeJob, i: int, deaths: int = 0) -> None:
            free.remove(i)
            owner[id(job.cand)] = i
            ref = self.actors[i].measure.remote(job.cand, job.inc, job.target, tuple(job.shape), job.rounds)
            flying[ref] = (job, i, time.monotonic(), deaths)

        def fill() -> Wait | None | bool:
            """A job to every free actor that can have one: held ones to their actors, retried ones to an actor
            other than the one that died under them, then the stream's next ones (drawn only when an actor is
            free, so the caller's checks stay current). WAIT when the stream said so, None when it ended."""
            for i in [i for i in free if i in held]:
                send(held.pop(i), i)
            for job, dead, deaths in list(again):
                to = [i for i in free if i != dead] or [i for i in free if len(lost) == len(self.actors) - 1]
                if to:
                    again.remove((job, dead, deaths))
                    if deaths:  # (not a job only held for the dead actor)
                        self.events.append(f"actor {dead}'s process died under {job.target} {shape_text(job.shape)}: "
                                           f"the job went to actor {to[0]}")
                    send(job, to[0], deaths)
            while free:
                job = next(pending, None)
                if job is None or isinstance(job, Wait):
                    return job
                j = owner.get(id(job.cand))
                if j is None or j in lost or (j not in free and j in held):
                    send(job, free[0])
                elif j in free:
                    send(job, j)
                else:
                    held[j] = job
            return True

        try:
            while True:
                said = fill()
                stalled = isinstance(said, Wait)
                if not flying and not again and (said is None or not probes and not stalled):
                    return  # held jobs belong to busy actors: none is held now (a restart under way goes on)
                if not flying and not probes:
                    time.sleep(POLL_S)
                    continue
                done, _ = ray.wait([*flying, *probes], num_returns=1, timeout=POLL_S if stalled else None)
                if not done:
                    continue
                ref = done[0]
                if ref in probes:  # a restarted actor answered (or is past its restarts)
                    i = probes.pop(ref)
                    try:
                        ray.get(ref)
                        free.append(i)
                    except RayActorError:
                        lost.add(i)
                        if len(lost) == len(self.actors):
                            raise RuntimeError("--ray: every timing actor died past its restarts") from None
                    continue
                job, i, sent, deaths = flying.pop(ref)
                last = time.monotonic()
                self.jobs[i] += 1
                self.busy_s[i] += last - sent
                try:
                    result: dict[str, float] | Exception = ray.get(ref)
                except RayActorError as e:  # its process died (killed, or this job crashed it)
                    self.deaths[i] += 1
                    for cand in [c for c, j in owner.items() if j == i]:  # its modules died with it
                        del owner[cand]
                    if i in held:
                        again.append((held.pop(i), i, 0))
                    probes[self.actors[i].ready.options(max_task_retries=-1).remote()] = i
                    if deaths == 0:
                        again.append((job, i, 1))
                        continue
                    result = e  # it killed two actors: the candidate's verdict
                except Exception as e:  # noqa: BLE001 (RayTaskError wraps the candidate's own error)
                    free.append(i)
                    result = getattr(e, "cause", None) or e
                else:
                    free.append(i)
                yield job, result
        finally:
            self.wall_s += last - start

    def busy(self) -> list[GpuBusy]:
        """Each actor's GPU and pid (asked of it now: after a restart, the new process's) with the driver's
        counts."""
        import ray

        out = []
        for i, actor in enumerate(self.actors):
            try:
                s = ray.get(actor.stats.options(max_task_retries=-1).remote(), timeout=120)  # (waits out a restart)
            except Exception:  # noqa: BLE001 (an actor past its restarts: its counts are still the driver's)
                s = {"gpu": f"? (actor {i})", "pid": "?", "jobs": None}
            out.append(GpuBusy(s["gpu"], s["pid"], self.jobs[i], self.busy_s[i], self.wall_s, s["jobs"], self.deaths[i]))
        return out


def ray_actors(folder: Path, flush: Flush = "write", warm: tuple[str, ...] = ()) -> RayActors:
    return RayActors(folder, flush=flush, warm=warm)


def runner(measurer: Measurer) -> Callable[[Jobs], Outcome]:
    """The measurer's own concurrent `imap` (Ray), else one job at a time."""
    return getattr(measurer, "imap", None) or serial(measurer)


def one_cycle(calls: Calls, timer: Timer, flats: dict[str, dict], inc: dict, target: str, shape: ProblemShape,
              rounds: int) -> dict[str, float]:
    """Every given candidate in one rotation (name -> median us): `specgen tune --verify`'s check that the
    pick is the fastest when all are timed side by side."""
    import statistics

    cycle = {name: calls(flat, inc, target, shape)[0] for name, flat in flats.items()}
    return {name: statistics.median(v) for name, v in timer.cycle(cycle, rounds).items()}
