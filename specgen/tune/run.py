"""`specgen tune` from start to end: shapes grouped by the config slot that serves them (a size variant
or the target's default), candidates enumerated and pruned by check (space.py), compiled ahead of time
(compile_jobs.py), timed paired against the incumbent and the peer (measure.py), every result cached as
it lands (cache.py), winners chosen per slot (a candidate must beat the incumbent over the slot's shapes,
its ~95% interval clear of 1: a tune never makes a spec slower) and, with `write`, written back."""

from __future__ import annotations

import contextlib
import heapq
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgen.bench.problem import problem_of
from specgen.bench.shapes import ProblemShape, default_shapes, slot_for, slot_label
from specgen.bench.stats import geomean
from specgen.bench.timing import Flush
from specgen.check import check_spec
from specgen.settle import mode_from_environment
from specgen.spec.load import LoadedSpec, SpecError, load_text
from specgen.spec.models import Target
from specgen.tune.cache import Cache, Entry, Machine, compile_key, semantics, time_key
from specgen.tune.compile_jobs import CompileJob, Compiler
from specgen.tune.measure import WAIT, Measurer, TimeJob, Wait, runner
from specgen.tune.space import (
    Config,
    Edit,
    apply_edits,
    config_key,
    edits,
    enumerate_candidates,
    flattened,
    loaded_from,
    short_hash,
)
from specgen.tune.writeback import WriteError, new_text, read_spec, replace_file, tidy_tuner_comments


class TuneError(RuntimeError):
    pass


@dataclass
class Slot:
    target: Target
    slot: int | None
    label: str
    shapes: list[ProblemShape]
    incumbent: Config
    kept: list[Config]
    rejected: int
    sections: tuple[str, ...]  # the spec's configuration sections (its kind model's CONFIG_SECTIONS)
    flats: dict[str, dict] = field(default_factory=dict)  # config_key(knobs) -> flattened spec
    failed: dict[str, str] = field(default_factory=dict)  # config_key(knobs) -> compile error
    winner: Config | None = None
    score: float = 1.0  # geomean over shapes of incumbent / winner
    score_lo: float = 1.0
    peer_before: float | None = None  # geomean peer / incumbent
    peer_after: float | None = None
    timed: int = 0  # candidates with a time at every shape

    def full_key(self, flat: dict) -> str:
        """A flattened candidate's configuration, every section whole: what its compile and timings are keyed by."""
        return config_key({k: flat[k] for k in self.sections})


@dataclass
class TuneReport:
    slots: list[Slot]
    machine: Machine | None
    compiled: int = 0
    cached: int = 0
    measured: int = 0
    budget_stop: bool = False
    edits: list[Edit] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)


class Progress:
    """What the CLI shows (rich bars with ETA there); the default shows nothing."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, text: str = "") -> None: ...


def plan_slots(loaded: LoadedSpec, targets: list[Target], shapes: list[ProblemShape] | None,
               overrides: dict[str, tuple[Any, ...]] | None) -> list[Slot]:
    errors = [d for d in check_spec(loaded, settle=mode_from_environment()) if d.severity == "error"]  # check's own verdicts
    if errors:
        raise TuneError(f"{loaded.file}: {loaded.name} fails check ({len(errors)} errors, first: {errors[0]}): "
                        "fix it before tuning")
    slots = []
    for t in targets:
        groups: dict[int | None, list[ProblemShape]] = {}
        for s in shapes or default_shapes(loaded.spec, t):
            if problem_of(loaded.spec).runs_at(loaded.spec, s):  # the kind's (a batched shape for a batched spec)
                groups.setdefault(slot_for(loaded.spec, t, s), []).append(s)
        for slot, shp in groups.items():
            c = enumerate_candidates(loaded, t, slot, overrides)
            s = Slot(t, slot, slot_label(loaded.spec, t, slot), shp, c.incumbent, c.kept, len(c.rejected),
                     type(loaded.spec).CONFIG_SECTIONS)
            s.flats = {config_key(k): flattened(loaded, t, slot, k) for k in c.kept}
            slots.append(s)
    return slots


def compile_all(loaded: LoadedSpec, slots: list[Slot], cache: Cache, compiler: Compiler, folder: Path,
                versions: dict[str, str], progress: Progress) -> tuple[int, int]:
    sem = semantics(loaded.spec)
    jobs: dict[str, tuple[CompileJob, Slot, str, Config]] = {}
    for s in slots:
        for c in s.kept:
            flat = s.flats[config_key(c)]
            key = compile_key(sem, str(s.target), s.full_key(flat), versions)
            if cache.get(key) is None and key not in jobs:
                jobs[key] = (CompileJob(key, flat, str(s.target), str(folder)), s, config_key(c), c)
    progress.phase("compile", len(jobs))
    done = 0
    for result in compiler([j for j, *_ in jobs.values()]):
        job, s, _, c = jobs[result["key"]]
        cache.put(Entry(kind="compile", key=job.key, semantics=sem, spec_hash=loaded.spec_hash, target=job.target,
                        config=c, config_key=s.full_key(job.flat), error=result["error"], seconds=result["seconds"]))
        done += 1
        progress.advance(f"{s.target} {c}")
    for s in slots:  # every candidate's verdict, this run's or a cached one
        for c in s.kept:
            e = cache.get(compile_key(sem, str(s.target), s.full_key(s.flats[config_key(c)]), versions))
            if e is not None and e.error:
                s.failed[config_key(c)] = e.error
    return done, len(jobs)


@dataclass
class Timeline:
    """Where a stream's wall time went (`tune_many`), in seconds from its start: when the first and the last
    compile and timing landed. The GPUs wait for compiles until the first compile; the compiles run on
    under the timings until the last."""
    compile_workers: int | None = None
    compiles: int = 0
    timings: int = 0
    first_compile_s: float | None = None
    last_compile_s: float | None = None
    first_timing_s: float | None = None
    last_timing_s: float | None = None
    end_s: float = 0.0

    def line(self) -> str:
        def at(t: float | None) -> str:
            return "-" if t is None else f"{t:.1f} s"
        workers = f" on {self.compile_workers} workers" if self.compile_workers else ""
        return (f"stream: {self.compiles} compiles{workers} landed from {at(self.first_compile_s)} to "
                f"{at(self.last_compile_s)}, {self.timings} timings from {at(self.first_timing_s)} to "
                f"{at(self.last_timing_s)}, {self.end_s:.1f} s in all")


@dataclass
class _SpecRun:
    """One spec's share of a stream."""
    loaded: LoadedSpec
    report: TuneReport
    sem: str
    folder: Path
    started: float | None = None  # the budget's clock at its first timing drawn


_Item = tuple[str, _SpecRun, Slot, Config, ProblemShape, dict]  # time key, spec, slot, candidate, shape, incumbent's flat
_DONE = object()  # the compile thread's last word


class _Stream:
    """Several specs' compiles and timings as one stream of timing jobs for the measurer's runner. A
    candidate's timings are ready once its compile is (cached, or landed: put in the cache here, in this
    thread, as it lands), and the earliest ready is drawn first in the order a one-spec tune times them (spec,
    slot, candidate with the incumbent first, shape). With `overlap` the compiles run in a thread that feeds a
    queue, so the GPUs time the first candidates while the CPUs compile the rest (session 9: the per-spec
    compile phases, no GPU busy, were ~35 s of a 196 s run); without it every compile lands before the first
    timing (a compiler in this process, `inline`, would share its core and the CUDA state with the timer)."""

    def __init__(self, runs: list[_SpecRun], cache: Cache, machine: Machine, versions: dict[str, str], rounds: int,
                 budget_s: float | None, progress: Progress, clock: Callable[[], float], timeline: Timeline) -> None:
        self.cache, self.machine, self.rounds, self.budget_s = cache, machine, rounds, budget_s
        self.progress, self.clock, self.timeline = progress, clock, timeline
        self.ready: list[tuple[int, _Item]] = []  # a heap by the one-spec order (unique: no tie reaches the item)
        self.waiting: dict[str, list[tuple[_SpecRun, Slot, Config, int]]] = {}  # compile key -> candidates it serves
        self.compiles: list[CompileJob] = []
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.landed, self.stop = threading.Event(), threading.Event()  # every compile landed; the stream stopped
        self.t0 = time.monotonic()
        order, planned = 0, 0
        for r in runs:
            for s in r.report.slots:
                for c in s.kept:
                    flat = s.flats[config_key(c)]
                    key = compile_key(r.sem, str(s.target), s.full_key(flat), versions)
                    found = cache.get(key)
                    if found is None:
                        if key not in self.waiting:
                            self.compiles.append(CompileJob(key, flat, str(s.target), str(r.folder)))
                        self.waiting.setdefault(key, []).append((r, s, c, order))
                        planned += len(s.shapes)
                    else:
                        self._compiled(r, s, c, order, found.error)
                    order += len(s.shapes)
        self.planned = planned + len(self.ready)  # timings, as far as known before the compiles land

    def _compiled(self, r: _SpecRun, s: Slot, c: Config, order: int, error: str) -> None:
        """A candidate's compile verdict: its uncached timings are ready (or it failed, now or before)."""
        if error:
            s.failed[config_key(c)] = error
            return
        inc_flat = s.flats[config_key(s.incumbent)]
        for j, shape in enumerate(s.shapes):
            key = time_key(r.sem, str(s.target), tuple(shape), s.full_key(s.flats[config_key(c)]), s.full_key(inc_flat),
                           self.machine)
            found = self.cache.get(key)
            if found is None:
                heapq.heappush(self.ready, (order + j, (key, r, s, c, shape, inc_flat)))
            elif found.error:  # it could not launch in an earlier run
                s.failed[config_key(c)] = found.error

    def _land(self, result: dict[str, Any]) -> None:
        waiters = self.waiting.pop(result["key"])
        r, s, c, _ = waiters[0]
        self.cache.put(Entry(kind="compile", key=result["key"], semantics=r.sem, spec_hash=r.loaded.spec_hash,
                             target=str(s.target), config=c, config_key=s.full_key(s.flats[config_key(c)]),
                             error=result["error"], seconds=result["seconds"]))
        r.report.compiled += 1
        tl, t = self.timeline, time.monotonic() - self.t0
        tl.compiles, tl.last_compile_s = tl.compiles + 1, t
        if tl.first_compile_s is None:
            tl.first_compile_s = t
        self.progress.advance(f"{s.target} {c}")
        for waiter in waiters:
            self._compiled(*waiter, result["error"])

    def _compile(self, compiler: Compiler) -> None:
        """The compile thread: each result into the queue (landed by the timing thread, the cache's one writer)."""
        results = compiler(self.compiles)
        try:
            for result in results:
                self.queue.put(result)
                if self.stop.is_set():  # the tune ended early: no more compiles (the compiler cancels the rest)
                    break
        except BaseException as e:  # noqa: BLE001 (raised again in the timing thread)
            self.queue.put(e)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
            self.queue.put(_DONE)

    def _drain(self) -> None:
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if item is _DONE:
                self.landed.set()
            elif isinstance(item, BaseException):
                raise item
            else:
                self._land(item)

    def jobs(self) -> Iterator[TimeJob | Wait]:
        """Drawn one at a time as a GPU frees up: budgets and failures stay current."""
        while True:
            self._drain()
            if not self.ready:
                if self.landed.is_set():
                    return
                yield WAIT
                continue
            item = heapq.heappop(self.ready)[1]
            _, r, s, c, shape, inc_flat = item
            if r.report.budget_stop:
                continue
            if self.budget_s is not None:  # each spec's budget counts from its first timing
                if r.started is None:
                    r.started = self.clock()
                if self.clock() - r.started > self.budget_s:
                    r.report.budget_stop = True
                    continue
            if config_key(c) in s.failed:  # it failed at an earlier shape: no more of its shapes
                continue
            yield TimeJob(s.flats[config_key(c)], inc_flat, str(s.target), shape, self.rounds, tag=item)

    def run(self, compiler: Compiler, measurer: Measurer, overlap: bool) -> None:
        thread = None
        if overlap:
            self.progress.phase("compile+time", len(self.compiles) + self.planned)
            thread = threading.Thread(target=self._compile, args=(compiler,), name="specgen-compile", daemon=True)
            thread.start()
        else:
            self.progress.phase("compile", len(self.compiles))
            for result in compiler(self.compiles):
                self._land(result)
            self.landed.set()
            self.progress.phase("time", len(self.ready))
        try:
            for job, m in runner(measurer)(self.jobs()):
                key, r, s, c, shape, inc_flat = job.tag
                if isinstance(m, Exception):  # a candidate that cannot launch (e.g. the driver's resource check): its verdict
                    first = next((ln for ln in str(m).splitlines() if ln.strip()), "")
                    m = {"error": f"{type(m).__name__}: {first}"[:600]}
                    s.failed[config_key(c)] = m["error"]
                self.cache.put(Entry(kind="time", key=key, semantics=r.sem, spec_hash=r.loaded.spec_hash,
                                     target=str(s.target), config=c, config_key=s.full_key(job.cand), shape=tuple(shape),
                                     incumbent_key=s.full_key(inc_flat), machine=self.machine, **m))
                r.report.measured += 1
                tl, t = self.timeline, time.monotonic() - self.t0
                tl.timings, tl.last_timing_s = tl.timings + 1, t
                if tl.first_timing_s is None:
                    tl.first_timing_s = t
                self.progress.advance(f"{s.target} {shape} {c}: " + (f"failed: {m['error']}" if "error" in m else
                                                                     f"{m['ratio']:.3f}x incumbent"))
        finally:
            self.stop.set()
            if thread is not None and self.landed.is_set():
                thread.join()
            self.timeline.end_s = time.monotonic() - self.t0


def select(loaded: LoadedSpec, slots: list[Slot], cache: Cache, machine: Machine, min_gain: float = 0.0) -> None:
    """Per slot: the candidate with the best geomean over the slot's shapes of incumbent / candidate, among
    those timed at every shape whose interval's low end (geomean of the shapes' low ends) clears 1."""
    sem = semantics(loaded.spec)
    for s in slots:
        inc_key = s.full_key(s.flats[config_key(s.incumbent)])
        best: tuple[float, float, Config, list[Entry]] | None = None
        inc_entries: list[Entry] = []
        for c in s.kept:
            found = [cache.get(time_key(sem, str(s.target), tuple(sh), s.full_key(s.flats[config_key(c)]), inc_key,
                                        machine)) for sh in s.shapes]
            if any(e is None or e.error for e in found):  # not timed at every shape, or could not launch
                continue
            s.timed += 1
            es = [e for e in found if e is not None]
            if c == s.incumbent:
                inc_entries = es
                continue
            score, lo = geomean(e.ratio for e in es), geomean(e.ratio_lo for e in es)
            if lo > 1.0 and score > 1.0 + min_gain and (best is None or score > best[0]):
                best = (score, lo, c, es)
        if inc_entries:
            s.peer_before = geomean(e.ratio_peer for e in inc_entries)
        if best is not None:
            s.score, s.score_lo, s.winner, es = best
            s.peer_after = geomean(e.ratio_peer for e in es)


def _fmt(c: Config) -> str:
    return ", ".join(f"{k} = {v}" for k, v in c.items())


def summarize(slots: list[Slot], machine: Machine | None, date: str) -> list[str]:
    lines = []
    gpu = machine.gpu if machine else "?"
    for s in slots:
        head = f"{s.target} {s.label}: specgen tune {date} on {gpu}, shapes {', '.join(map(str, s.shapes))}: "
        if s.winner is None:
            lines.append(head + f"kept the incumbent ({s.timed} of {len(s.kept)} candidates timed)")
        else:
            peer = f", {s.peer_before:.3f}x -> {s.peer_after:.3f}x the peer" if s.peer_before and s.peer_after else ""
            lines.append(head + f"{_fmt(s.winner)}: {s.score:.3f}x the incumbent (low end {s.score_lo:.3f}){peer}, "
                         f"best of {s.timed} timed")
    return lines


def write(loaded: LoadedSpec, slots: list[Slot], summary: list[str]) -> list[Edit]:
    """Apply each winner in turn (edits computed against the spec as the previous ones left it), check the
    new text (it loads, passes check and is the tuned spec), then replace the file atomically; on any
    error the file is untouched and TuneError (or WriteError) raised."""
    data = loaded.spec.model_dump(mode="json")
    cur = loaded
    all_edits: list[Edit] = []
    for s in slots:
        if s.winner is None:
            continue
        e = edits(cur.spec, s.target, s.slot, s.winner)
        apply_edits(data, e)
        cur = loaded_from(data, loaded.file)
        all_edits += e
    if not all_edits:
        return []
    spec = read_spec(Path(loaded.file))
    if [ls.spec_hash for ls in load_text(spec.text, loaded.file, spec.path.suffix) if ls.index == loaded.index] \
            != [loaded.spec_hash]:
        raise WriteError(f"{loaded.file} changed since the tune loaded it: nothing written (tune again, or copy the "
                         "summary's values into it by hand)")
    text = new_text(spec, loaded.index, all_edits, [line for line in summary if "kept the incumbent" not in line])
    with contextlib.suppress(SpecError):  # (a text that does not load is said below, with the loader's message)
        # the tuner's own comments for this kernel: one per slot that still exists, describing its config
        text = tidy_tuner_comments(text, spec.path.suffix, loaded.index)
    try:
        (after,) = [ls for ls in load_text(text, loaded.file, spec.path.suffix) if ls.index == loaded.index]
    except SpecError as e:
        raise TuneError(f"the new text of {loaded.file} would not load ({e.issues[0]}): nothing written") from None
    errors = [d for d in check_spec(after, settle=mode_from_environment()) if d.severity == "error"]
    if errors:
        raise TuneError(f"the written spec would fail check: {errors[0]}: nothing written")
    if after.spec_hash != cur.spec_hash:
        raise TuneError("the new text does not load as the tuned spec: nothing written")
    replace_file(spec, spec.encode(text))
    return all_edits


def folder_for(cache_path: Path, loaded: LoadedSpec) -> Path:
    return cache_path.parent / "modules" / short_hash(loaded.file + loaded.name)


def tune(loaded: LoadedSpec, targets: list[Target], shapes: list[ProblemShape] | None, *, cache: Cache,
         machine: Machine | None, compiler: Compiler | None, measurer: Measurer | None, rounds: int = 40,
         budget_s: float | None = None, overrides: dict[str, tuple[Any, ...]] | None = None,
         versions: dict[str, str] | None = None, progress: Progress | None = None, min_gain: float = 0.0,
         do_write: bool = False, date: str = "", clock: Callable[[], float] = time.monotonic,
         l2_flush: Flush = "write", overlap: bool = False) -> TuneReport:
    """The whole tune of one spec. `machine` None with `measurer` None: --from-cache (choose from what the
    cache holds for the most recent machine that timed this kernel under `l2_flush`; compile and time
    nothing)."""
    if measurer is not None:
        return tune_many([(loaded, targets)], shapes, cache=cache, machine=machine, compiler=compiler,
                         measurer=measurer, rounds=rounds, budget_s=budget_s, overrides=overrides, versions=versions,
                         progress=progress, min_gain=min_gain, do_write=do_write, date=date, clock=clock,
                         overlap=overlap)[0]
    slots = plan_slots(loaded, targets, shapes, overrides)
    report = TuneReport(slots, machine)
    sem = semantics(loaded.spec)
    if machine is None:
        known = [m for t in targets for m in cache.machines(sem, str(t)) if m.l2_flush == l2_flush]
        if not known:
            raise TuneError(f"{cache.path} holds no timing of {loaded.name} on {', '.join(map(str, targets))} "
                            f"with the L2 flushed by {l2_flush} (it {cache.describe()})")
        machine = report.machine = known[-1]
    for s in slots:  # compile verdicts recorded with the timings' library versions
        for c in s.kept:
            e = cache.get(compile_key(sem, str(s.target), s.full_key(s.flats[config_key(c)]), machine.versions))
            if e is not None and e.error:
                s.failed[config_key(c)] = e.error
    _choose(loaded, report, cache, machine, min_gain, date, do_write)
    return report


def tune_many(specs: list[tuple[LoadedSpec, list[Target]]], shapes: list[ProblemShape] | None, *, cache: Cache,
              machine: Machine, compiler: Compiler | None, measurer: Measurer, rounds: int = 40,
              budget_s: float | None = None, overrides: dict[str, tuple[Any, ...]] | None = None,
              versions: dict[str, str] | None = None, progress: Progress | None = None, min_gain: float = 0.0,
              do_write: bool = False, date: str = "", clock: Callable[[], float] = time.monotonic,
              overlap: bool = False, timeline: Timeline | None = None,
              plans: list[list[Slot]] | None = None) -> list[TuneReport]:
    """Tune several specs (each with its targets) in one stream of compiles and timings (_Stream: one set of
    compile workers and GPUs for all, `overlap` compiling while the GPUs time); every spec is planned and
    checked before any work (`plans`: plan_slots' of each, done by the caller), and each one's winners are
    chosen (and, with `do_write`, written) once every timing has landed. `budget_s` is each spec's, from its
    first timing."""
    assert compiler is not None
    plans = plans or [plan_slots(loaded, targets, shapes, overrides) for loaded, targets in specs]
    runs = [_SpecRun(loaded, TuneReport(slots, machine), semantics(loaded.spec), folder_for(cache.path, loaded))
            for (loaded, _), slots in zip(specs, plans, strict=True)]
    _Stream(runs, cache, machine, versions or {}, rounds, budget_s, progress or Progress(), clock,
            timeline or Timeline()).run(compiler, measurer, overlap)
    for r in runs:
        _choose(r.loaded, r.report, cache, machine, min_gain, date, do_write)
    return [r.report for r in runs]


def _choose(loaded: LoadedSpec, report: TuneReport, cache: Cache, machine: Machine, min_gain: float, date: str,
            do_write: bool) -> None:
    select(loaded, report.slots, cache, machine, min_gain)
    report.summary = summarize(report.slots, machine, date)
    if do_write:
        report.edits = write(loaded, report.slots, report.summary)
