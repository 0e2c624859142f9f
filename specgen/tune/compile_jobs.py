"""Ahead-of-time compiles of candidates, in parallel CPU processes (a process pool, or Ray CPU tasks with
`--ray`). A job is a flattened candidate (one kernel, one target, its slot's config as default):
rendered into its own folder and compiled through the design's compile hook (Triton: `triton.compile` for a
GPUTarget; CuTe: `cute.compile`), which fills the disk caches the timing process's first call reuses."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CompileJob:
    key: str
    flat: dict  # the flattened candidate spec (JSON-able)
    target: str
    folder: str


def compile_job(job: CompileJob) -> dict[str, Any]:
    """Render and compile one candidate; returns {"key", "error", "seconds", "compiler_smem"} (never raises:
    a compiler's failure is the candidate's verdict)."""
    from specgen import settle
    from specgen.bench.workloads import build_module
    from specgen.compile import _hook
    from specgen.probe import adapt
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.models import parse_target
    from specgen.targets import target_info
    from specgen.tune.space import loaded_from

    start = time.perf_counter()
    try:
        loaded = loaded_from(job.flat)
        target = parse_target(job.target)
        design = design_for(loaded.spec.kind, target)
        # what the design's compile needs before its module is imported (a test session's workers inherit
        # an environment made for the CPU), restored after: an inline compile runs in the caller's process,
        # whose later Triton calls would otherwise leave the interpreter
        with _environment(design.compile_environment):
            module = build_module(loaded, target, Path(job.folder) / job.key, f"_specgen_tune_{job.key}")
            result = _hook(design.compile_hook)(module, target_info(target))
        results = result if isinstance(result, list) else [result]
        if len(results) == 1 and results[0].spills is not None:  # read off its SASS: check's verdict on this config,
            # cached, so that a check of the tuned spec compiles nothing
            settle.remember(resolve(loaded.spec, target), adapt(results[0]))
        errors = [r.error for r in results if r.error]
        smem = max((r.compiler_smem or 0 for r in results), default=0)
        return {"key": job.key, "error": "; ".join(errors), "seconds": time.perf_counter() - start, "compiler_smem": smem}
    except Exception as e:  # a render or import failure is a verdict too, said in one line
        return {"key": job.key, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:600],
                "seconds": time.perf_counter() - start, "compiler_smem": 0}


Compiler = Callable[[list[CompileJob]], Iterator[dict[str, Any]]]


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set inside the block, each variable as it was after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def inline(fn: Callable[[CompileJob], dict[str, Any]] = compile_job) -> Compiler:
    """Compile in this process, one at a time (workers = 0; the tests' fake compiles)."""
    def run(jobs: list[CompileJob]) -> Iterator[dict[str, Any]]:
        for job in jobs:
            yield fn(job)
    return run


def import_backends(modules: tuple[str, ...], _: int = 0) -> None:
    """Import the compilers a job may need (the designs' `compiler_modules`), so that a worker's first job
    pays no import (`--compile-only` times compiles, not interpreter start-up); one not installed is
    simply not imported."""
    import importlib
    import importlib.util

    for name in modules:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    time.sleep(0.5)  # hold this worker so that each of the pool's first jobs lands on its own process


def one_thread_each() -> None:
    """A compile worker among several keeps to one core: MLIR's passes otherwise start a thread per core in
    every worker (16 workers x 16 threads on the 16-core GPU host), and the workers slow each other. A
    value the caller set stands."""
    os.environ.setdefault("MLIR_DISABLE_MULTITHREADING", "1")


def pool(workers: int, fn: Callable[[CompileJob], dict[str, Any]] = compile_job,
         ready: Callable[[], None] | None = None, warm: tuple[str, ...] = ()) -> Compiler:
    """A process pool of `workers` spawned processes (not forked: the parent may hold CUDA and threads);
    results come back as they finish. With `ready`, every worker first imports the compilers (`warm`), then
    `ready()` is called (where `--compile-only` starts its clock) and the jobs run."""
    def run(jobs: list[CompileJob]) -> Iterator[dict[str, Any]]:
        if not jobs:
            return
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 initializer=one_thread_each if workers > 1 else None)
        try:
            if ready is not None:
                list(ex.map(partial(import_backends, warm), range(workers)))
                ready()
            pending: set[Future] = {ex.submit(fn, job) for job in jobs}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()
        finally:  # a caller that stops early (a kill, an error) waits for the running jobs only
            ex.shutdown(wait=True, cancel_futures=True)
    return run


def _one_thread_then(fn: Callable[[CompileJob], dict[str, Any]], job: CompileJob) -> dict[str, Any]:
    """A Ray compile task: one core each (one_thread_each, set in the task rather than through a runtime_env,
    whose workers Ray starts afresh, ~1 s later than the pool it keeps started)."""
    one_thread_each()
    return fn(job)


def _warm_worker(modules: tuple[str, ...]) -> None:
    one_thread_each()
    import_backends(modules)


def ray_tasks(fn: Callable[[CompileJob], dict[str, Any]] = compile_job, slots: int | None = None,
              warm: tuple[str, ...] = ()) -> Compiler:
    """Each job a Ray task of one CPU (ray.init is the caller's: `--ray [ADDRESS]`), at most `slots` running at
    once (None: as many as Ray has CPUs). The tune compiles while the GPUs time, so it leaves a core to each
    timing actor's host thread (launches, CUPTI) rather than queue that thread behind a compile. With `warm`,
    `slots` workers import those compilers now, while the caller plans (Ray reuses the workers for the
    compiles: on four H100s the first compile landed ~8 s into the stream without)."""
    import ray

    remote = ray.remote(num_cpus=1)(_one_thread_then)
    warming = [ray.remote(num_cpus=1)(_warm_worker).remote(warm) for _ in range(slots or 0) if warm]

    def run(jobs: list[CompileJob]) -> Iterator[dict[str, Any]]:
        todo, running = iter(jobs), []
        try:
            while True:
                while slots is None or len(running) < slots:
                    job = next(todo, None)
                    if job is None:
                        break
                    running.append(remote.remote(fn, job))
                if not running:
                    return
                done, running = ray.wait(running, num_returns=1)
                for ref in done:
                    yield ray.get(ref)
        finally:  # a caller that stops early leaves no compile running
            for ref in running:
                ray.cancel(ref)
            warming.clear()  # (their refs held until now: the warm-up runs whatever the caller does first)
    return run
