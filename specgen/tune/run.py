"""`specgen tune` from start to end: shapes grouped by the config slot that serves them (a size variant
or the target's default), candidates enumerated and pruned by check (space.py), compiled ahead of time
(compile_jobs.py), timed paired against the incumbent and the peer (measure.py), every result cached as
it lands (cache.py), winners chosen per slot (a candidate must beat the incumbent over the slot's shapes,
its ~95% interval clear of 1: a tune never makes a spec slower) and, with `write`, written back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgen.bench.shapes import Shape, default_shapes, slot_for, slot_label
from specgen.bench.stats import geomean
from specgen.bench.timing import Flush
from specgen.check import check_spec
from specgen.spec.load import LoadedSpec, SpecError, load_text
from specgen.spec.models import CONFIG_SECTIONS, Target
from specgen.tune.cache import Cache, Entry, Machine, compile_key, semantics, time_key
from specgen.tune.compile_jobs import CompileJob, Compiler
from specgen.tune.measure import Measurer, TimeJob, runner
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
    shapes: list[Shape]
    incumbent: Config
    kept: list[Config]
    rejected: int
    flats: dict[str, dict] = field(default_factory=dict)  # config_key(knobs) -> flattened spec
    failed: dict[str, str] = field(default_factory=dict)  # config_key(knobs) -> compile error
    winner: Config | None = None
    score: float = 1.0  # geomean over shapes of incumbent / winner
    score_lo: float = 1.0
    peer_before: float | None = None  # geomean peer / incumbent
    peer_after: float | None = None
    timed: int = 0  # candidates with a time at every shape


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


def _full_key(flat: dict) -> str:
    return config_key({k: flat[k] for k in CONFIG_SECTIONS})


def plan_slots(loaded: LoadedSpec, targets: list[Target], shapes: list[Shape] | None,
               overrides: dict[str, tuple[Any, ...]] | None) -> list[Slot]:
    errors = [d for d in check_spec(loaded) if d.severity == "error"]
    if errors:
        raise TuneError(f"{loaded.file}: {loaded.name} fails check ({len(errors)} errors, first: {errors[0]}): "
                        "fix it before tuning")
    slots = []
    for t in targets:
        groups: dict[int | None, list[Shape]] = {}
        for s in shapes or default_shapes(loaded.spec, t):
            if s.batch == 1 or loaded.spec.batch:
                groups.setdefault(slot_for(loaded.spec, t, s), []).append(s)
        for slot, shp in groups.items():
            c = enumerate_candidates(loaded, t, slot, overrides)
            s = Slot(t, slot, slot_label(loaded.spec, t, slot), shp, c.incumbent, c.kept, len(c.rejected))
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
            key = compile_key(sem, str(s.target), _full_key(flat), versions)
            if cache.get(key) is None and key not in jobs:
                jobs[key] = (CompileJob(key, flat, str(s.target), str(folder)), s, config_key(c), c)
    progress.phase("compile", len(jobs))
    done = 0
    for result in compiler([j for j, *_ in jobs.values()]):
        job, s, _, c = jobs[result["key"]]
        cache.put(Entry(kind="compile", key=job.key, semantics=sem, spec_hash=loaded.spec_hash, target=job.target,
                        config=c, config_key=_full_key(job.flat), error=result["error"], seconds=result["seconds"]))
        done += 1
        progress.advance(f"{s.target} {c}")
    for s in slots:  # every candidate's verdict, this run's or a cached one
        for c in s.kept:
            e = cache.get(compile_key(sem, str(s.target), _full_key(s.flats[config_key(c)]), versions))
            if e is not None and e.error:
                s.failed[config_key(c)] = e.error
    return done, len(jobs)


def time_all(loaded: LoadedSpec, slots: list[Slot], cache: Cache, machine: Machine, measurer: Measurer,
             rounds: int, budget_s: float | None, progress: Progress,
             clock: Callable[[], float] = time.monotonic) -> tuple[int, bool]:
    """Time every (slot, candidate, shape) the cache lacks, the incumbent first; stop when the budget is
    spent (what was measured stays, and selection reads it)."""
    sem = semantics(loaded.spec)
    todo = []
    for s in slots:
        inc_flat = s.flats[config_key(s.incumbent)]
        for c in s.kept:
            if config_key(c) in s.failed:
                continue
            for shape in s.shapes:
                key = time_key(sem, str(s.target), tuple(shape), _full_key(s.flats[config_key(c)]),
                               _full_key(inc_flat), machine)
                found = cache.get(key)
                if found is None:
                    todo.append((key, s, c, shape, inc_flat))
                elif found.error:  # it could not launch in an earlier run
                    s.failed[config_key(c)] = found.error
    progress.phase("time", len(todo))
    start, done, stopped = clock(), 0, False

    def jobs() -> Iterator[TimeJob]:  # drawn one at a time as a GPU frees up: budget and failures stay current
        nonlocal stopped
        for item in todo:
            key, s, c, shape, inc_flat = item
            if budget_s is not None and clock() - start > budget_s:
                stopped = True
                return
            if config_key(c) in s.failed:  # it failed at an earlier shape: no more of its shapes
                continue
            yield TimeJob(s.flats[config_key(c)], inc_flat, str(s.target), shape, rounds, tag=item)

    for job, m in runner(measurer)(jobs()):
        key, s, c, shape, inc_flat = job.tag
        if isinstance(m, Exception):  # a candidate that cannot launch (e.g. the driver's resource check): its verdict
            first = next((ln for ln in str(m).splitlines() if ln.strip()), "")
            m = {"error": f"{type(m).__name__}: {first}"[:600]}
            s.failed[config_key(c)] = m["error"]
        cache.put(Entry(kind="time", key=key, semantics=sem, spec_hash=loaded.spec_hash, target=str(s.target),
                        config=c, config_key=_full_key(job.cand), shape=tuple(shape), incumbent_key=_full_key(inc_flat),
                        machine=machine, **m))
        done += 1
        progress.advance(f"{s.target} {shape} {c}: " + (f"failed: {m['error']}" if "error" in m else
                                                           f"{m['ratio']:.3f}x incumbent"))
    if stopped:
        return done, True
    return done, False


def select(loaded: LoadedSpec, slots: list[Slot], cache: Cache, machine: Machine, min_gain: float = 0.0) -> None:
    """Per slot: the candidate with the best geomean over the slot's shapes of incumbent / candidate, among
    those timed at every shape whose interval's low end (geomean of the shapes' low ends) clears 1."""
    sem = semantics(loaded.spec)
    for s in slots:
        inc_key = _full_key(s.flats[config_key(s.incumbent)])
        best: tuple[float, float, Config, list[Entry]] | None = None
        inc_entries: list[Entry] = []
        for c in s.kept:
            found = [cache.get(time_key(sem, str(s.target), tuple(sh), _full_key(s.flats[config_key(c)]), inc_key,
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
    errors = [d for d in check_spec(after) if d.severity == "error"]
    if errors:
        raise TuneError(f"the written spec would fail check: {errors[0]}: nothing written")
    if after.spec_hash != cur.spec_hash:
        raise TuneError("the new text does not load as the tuned spec: nothing written")
    replace_file(spec, spec.encode(text))
    return all_edits


def folder_for(cache_path: Path, loaded: LoadedSpec) -> Path:
    return cache_path.parent / "modules" / short_hash(loaded.file + loaded.name)


def tune(loaded: LoadedSpec, targets: list[Target], shapes: list[Shape] | None, *, cache: Cache,
         machine: Machine | None, compiler: Compiler | None, measurer: Measurer | None, rounds: int = 40,
         budget_s: float | None = None, overrides: dict[str, tuple[Any, ...]] | None = None,
         versions: dict[str, str] | None = None, progress: Progress | None = None, min_gain: float = 0.0,
         do_write: bool = False, date: str = "", clock: Callable[[], float] = time.monotonic,
         l2_flush: Flush = "write") -> TuneReport:
    """The whole tune of one spec. `machine` None with `measurer` None: --from-cache (choose from what the
    cache holds for the most recent machine that timed this kernel under `l2_flush`; compile and time
    nothing)."""
    progress = progress or Progress()
    slots = plan_slots(loaded, targets, shapes, overrides)
    report = TuneReport(slots, machine)
    sem = semantics(loaded.spec)
    if measurer is None:  # --from-cache
        if machine is None:
            known = [m for t in targets for m in cache.machines(sem, str(t)) if m.l2_flush == l2_flush]
            if not known:
                raise TuneError(f"{cache.path} holds no timing of {loaded.name} on {', '.join(map(str, targets))} "
                                f"with the L2 flushed by {l2_flush} (it {cache.describe()})")
            machine = report.machine = known[-1]
        versions = machine.versions
    else:
        assert compiler is not None and machine is not None
        folder = folder_for(cache.path, loaded)
        report.compiled, _ = compile_all(loaded, slots, cache, compiler, folder, versions or {}, progress)
        report.measured, report.budget_stop = time_all(loaded, slots, cache, machine, measurer, rounds, budget_s,
                                                       progress, clock)
    if measurer is None:
        for s in slots:  # compile verdicts recorded with the timings' library versions
            for c in s.kept:
                e = cache.get(compile_key(sem, str(s.target), _full_key(s.flats[config_key(c)]), versions or {}))
                if e is not None and e.error:
                    s.failed[config_key(c)] = e.error
    select(loaded, slots, cache, machine, min_gain)
    report.summary = summarize(slots, machine, date)
    if do_write:
        report.edits = write(loaded, slots, report.summary)
    return report
