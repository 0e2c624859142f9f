"""One `specgen tune` session as the CLI runs it: choose the compiler (process pool or Ray tasks) and the
measurer (this GPU or Ray actors), read the machine's identity, run the tune and say what it found;
`--compile-only` measures compile throughput, `--verify` times every candidate side by side."""

from __future__ import annotations

import datetime
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specgen.bench.problem import ProblemShape
from specgen.bench.timing import Flush
from specgen.registry import design_for
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import target_info
from specgen.tune import compile_jobs, measure
from specgen.tune.cache import Cache, Machine
from specgen.tune.run import (
    Progress,
    Timeline,
    TuneError,
    TuneReport,
    compile_all,
    plan_slots,
    tune,
    tune_many,
)
from specgen.tune.space import config_key, has_tune_space

__all__ = ["TuneError", "run"]


def _targets(loaded: LoadedSpec, wanted: set[str], gpu_cc: int | None,
             say: Callable[[str], None] = lambda _: None) -> list[Target]:
    """The spec's targets to tune: `wanted`, else those the GPU here runs (all GPU targets without a GPU);
    a target whose design has no tune space is skipped with a note (none left: TuneError)."""
    if wanted:
        unknown = wanted - {str(t) for t in loaded.spec.targets}
        if unknown:
            raise TuneError(f"{loaded.name} does not list {', '.join(sorted(unknown))}")
        found = [t for t in loaded.spec.targets if str(t) in wanted]
    else:
        found = [t for t in loaded.spec.targets if target_info(t).memory == "smem"
                 and (gpu_cc is None or target_info(t).compute_capability == gpu_cc)]
        if not found:
            raise TuneError(f"no target of {loaded.name} runs on this machine's GPU")
    spaceless = [t for t in found if not has_tune_space(loaded.spec, t)]
    for t in spaceless:
        say(f"{loaded.name} @ {t}: skipped: its design declares no tune space (nothing to tune there)")
    found = [t for t in found if t not in spaceless]
    if not found:
        raise TuneError(f"no target of {loaded.name} to tune: {', '.join(map(str, spaceless))} "
                        f"{'has' if len(spaceless) == 1 else 'have'} no tune space")
    return found


def _compile_only(loaded: LoadedSpec, targets: list[Target], shapes: list[ProblemShape] | None, overrides: dict,
                  compiler: compile_jobs.Compiler | None, workers: int, progress: Progress,
                  say: Callable[[str], None]) -> None:
    """Every candidate compiled afresh (a new cache and a new Triton cache dir): compiles per second, the
    clock started once every worker has imported its compilers (a pool's start-up is not throughput)."""
    designs = {design_for(loaded.spec.kind, t) for t in targets} - {None}
    caches = sorted({v for d in designs for v in d.compile_caches})
    saved = {var: os.environ.get(var) for var in caches}
    with tempfile.TemporaryDirectory(prefix="specgen-compile-", ignore_cleanup_errors=True) as name:  # gone after the run (1-4 MB each)
        tmp = Path(name)
        for var in caches:  # the compilers' own disk caches: spawned workers inherit them, so nothing is a hit
            os.environ[var] = str(tmp / var.lower())
        try:
            _compile_afresh(loaded, targets, shapes, overrides, compiler, workers, progress, say, designs, tmp)
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value


def _compile_afresh(loaded: LoadedSpec, targets: list[Target], shapes: list[ProblemShape] | None, overrides: dict,
                    compiler: compile_jobs.Compiler | None, workers: int, progress: Progress,
                    say: Callable[[str], None], designs: set, tmp: Path) -> None:
    modules = tuple(sorted({m for d in designs for m in d.compiler_modules}))
    slots = plan_slots(loaded, targets, shapes, overrides)
    clock = [time.perf_counter()]

    def ready() -> None:
        clock[0] = time.perf_counter()

    if compiler is None:  # not Ray: this process (one worker) or a pool, each warmed before the clock
        if workers > 1:
            compiler = compile_jobs.pool(workers, ready=ready, warm=modules)
        else:
            compile_jobs.import_backends(modules)
            ready()
            compiler = compile_jobs.inline()
    last = [clock[0]]

    def stamped(jobs: list) -> Iterator[dict]:  # the clock stops at the last result, not after the pool's
        for result in compiler(jobs):             # shutdown (joining 16 workers that hold torch takes ~1-2 s)
            last[0] = time.perf_counter()
            yield result

    done, _ = compile_all(loaded, slots, Cache(tmp / "cache.jsonl"), stamped, tmp / "modules", {}, progress)
    wall, teardown = last[0] - clock[0], time.perf_counter() - last[0]
    entries = [e for e in Cache(tmp / "cache.jsonl").entries.values()]
    failed = sum(bool(e.error) for e in entries)
    cpu = sum(e.seconds for e in entries)
    say(f"compiled {done} candidates ({failed} failed) with {workers} workers in {wall:.1f} s: "
        f"{done / wall:.2f} compiles/s; {cpu:.1f} s of compile time in all ({cpu / max(done, 1):.2f} s each); "
        f"then {teardown:.1f} s to shut the workers down")
    for e in entries:
        if e.error:
            say(f"  failed {e.target} {e.config}: {e.error[:200]}")


def _ray_init(address: str, say: Callable[[str], None]) -> int:
    """Join or start the Ray cluster; returns how many compile tasks run at once."""
    import ray as ray_lib

    # a local cluster without the dashboard: its processes' start is part of every tune's fixed cost
    local = {"include_dashboard": False} if address == "local" else {}
    ray_lib.init(address=None if address == "local" else address, ignore_reinit_error=True, log_to_driver=False,
                 **local)
    res = ray_lib.cluster_resources()
    cpus, gpus = int(res.get("CPU", 0)), int(res.get("GPU", 0))
    # the compiles run beside the timings: a core left to each timing actor where that keeps at least
    # as many for the compiles (on 2 CPUs and 2 GPUs, none is left: the actors share the compiles' cores)
    workers = cpus - gpus if gpus and cpus >= 2 * gpus else max(cpus, 1)
    say(f"Ray cluster: {cpus} CPUs ({workers} compile tasks at a time), {gpus} GPUs (a timing actor "
        f"each), CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
    return workers


def _identity(specs: list[LoadedSpec], wanted: set[str], flush: Flush,
              say: Callable[[str], None]) -> tuple[Any, list[list[Target]]]:
    """This GPU's identity (bench.record's environment) and each spec's targets on it (any refusal here)."""
    import torch

    from specgen.bench.record import environment

    env = environment(flush)
    major, minor = torch.cuda.get_device_capability()
    return env, [_targets(loaded, wanted, 10 * major + minor, say) for loaded in specs]


def run(specs: list[LoadedSpec], wanted: set[str], shapes: list[ProblemShape] | None, overrides: dict[str, tuple[Any, ...]],
        *, cache_path: Path, budget_min: float | None, write: bool, from_cache: bool, ray: str | None, workers: int,
        rounds: int, compile_only: bool, verify: bool, progress: Progress, need_gpu: Callable[[str], None],
        say: Callable[[str], None], flush: Flush = "write") -> None:
    """Tune the specs: from the cache one by one, else all in one stream of compiles and timings (one Ray
    cluster and one set of timing actors, or this GPU and one pool), compiling while the GPUs time wherever
    the compiles run outside this process (Ray tasks, a pool of several workers)."""
    if compile_only:
        compiler = (compile_jobs.ray_tasks(slots=_ray_init(ray, say)) if ray is not None else None)
        for loaded in specs:
            _compile_only(loaded, _targets(loaded, wanted, None, say), shapes, overrides, compiler, workers, progress,
                          say)
        return
    cache = Cache(cache_path)
    if from_cache:
        for loaded in specs:
            report = tune(loaded, _targets(loaded, wanted, None, say), shapes, cache=cache, machine=None,
                          compiler=None, measurer=None, overrides=overrides, do_write=write,
                          date=datetime.date.today().isoformat(), l2_flush=flush)
            _say_report(loaded, report, write, say)
        return
    need_gpu("specgen tune")
    from specgen.bench.timing import CuptiTimer

    with ThreadPoolExecutor(1, thread_name_prefix="specgen-plan") as ex:
        # the GPU's identity, the targets and every spec's plan (check over each candidate: ~5 s for 340) are
        # worked out in a thread while Ray starts (~6 s): both lie on the way to the first compile
        ident = ex.submit(_identity, specs, wanted, flush, say)
        planned = ex.submit(lambda: [plan_slots(loaded, t, shapes, overrides)
                                     for loaded, t in zip(specs, ident.result()[1], strict=True)])
        compile_workers = _ray_init(ray, say) if ray is not None else workers
        env, targets = ident.result()
        # what the compile workers and the timing actors import, imported as they start
        modules = tuple(sorted({m for loaded, ts in zip(specs, targets, strict=True) for t in ts
                                for m in getattr(design_for(loaded.spec.kind, t), "compiler_modules", ())}))
        actors = None
        if ray is not None:  # the actors start while the driver plans and the CPUs compile
            compiler = compile_jobs.ray_tasks(slots=compile_workers, warm=modules)
            actors = measure.ray_actors(cache_path.parent / "modules" / "timed", env.l2_flush, warm=modules)
        else:
            compiler = compile_jobs.pool(workers) if workers > 1 else compile_jobs.inline()
        plans = planned.result()
    machine = Machine(gpu=env.gpu, driver=env.driver, versions=env.versions, l2_flush=env.l2_flush)
    timer = CuptiTimer(env.l2_flush)
    calls = measure.GpuCalls(cache_path.parent / "modules" / "timed")  # a module's folder is its spec hash's
    timeline = Timeline(compile_workers=compile_workers)
    try:
        reports = tune_many(
            list(zip(specs, targets, strict=True)), shapes, cache=cache, machine=machine, compiler=compiler,
            measurer=actors if actors is not None else measure.local(calls, timer), rounds=rounds,
            budget_s=None if budget_min is None else 60 * budget_min, overrides=overrides, versions=env.versions,
            progress=progress, do_write=write, date=env.date, overlap=ray is not None or workers > 1,
            timeline=timeline, plans=plans)
    finally:
        if hasattr(progress, "stop"):
            progress.stop()
    for loaded, report in zip(specs, reports, strict=True):
        if verify:
            _verify(report.slots, calls, timer, rounds, say)
        _say_report(loaded, report, write, say)
    say(timeline.line())
    if actors is not None:  # each GPU's share of the timing (issue 22: every GPU busy)
        for busy in actors.busy():
            say(busy.line())
        for event in actors.events:
            say(event)


def _say_report(loaded: LoadedSpec, report: TuneReport, write: bool, say: Callable[[str], None]) -> None:
    say(f"{loaded.name}: {report.compiled} compiled, {report.measured} timed now, on {report.machine.gpu if report.machine else '?'}"
        + (" (budget spent: the best so far)" if report.budget_stop else ""))
    for s in report.slots:
        say(f"  {s.target} {s.label}: {len(s.kept)} candidates after check ({s.rejected} rejected), "
            f"{len(s.failed)} failed to compile, {s.timed} timed")
    for line in report.summary:
        say(line)
    if write:
        say(f"wrote {len(report.edits)} changes into {loaded.file}" if report.edits else "nothing to write: every incumbent stays")


def _verify(slots: list, calls: measure.GpuCalls, timer: Any, rounds: int, say: Callable[[str], None]) -> None:
    for s in slots:
        inc = s.flats[config_key(s.incumbent)]
        flats = {config_key(c): s.flats[config_key(c)] for c in s.kept if config_key(c) not in s.failed}
        pick = config_key(s.winner or s.incumbent)
        med = measure.one_cycle(calls, timer, flats, inc, str(s.target), s.shapes[0], rounds)
        best = min(med, key=med.get)
        say(f"verify {s.target} {s.label} at {s.shapes[0]}: all {len(med)} in one cycle: the pick {med[pick]:.1f} us, "
            f"the fastest {med[best]:.1f} us ({best == pick and 'the pick' or best}): pick within "
            f"{100 * (med[pick] / med[best] - 1):.2f}% of the best")
