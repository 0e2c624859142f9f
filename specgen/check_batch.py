"""`specgen check`'s output, and check over many spec files at once (issue 36: 50,000 kernels in 30 s).

Output: a diagnostic's lines and a target's variants line as `check` prints them, and `write_lines`, which
prints (text, style) lines as rich's `console.print(text, style=style, markup=False)` does, but where the
console writes plain text to a file or a pipe (no terminal, no colors, no capture) the lines rich prints
unchanged (printable ASCII) go out in one write, with rich's emoji codes replaced as rich replaces them.

Many files: where the spec files named hold more than `BATCH_BYTES` of text, check runs file by file in
chunks of files, spread over worker processes (`workers`: one per core, or `$SPECGEN_CHECK_WORKERS`), each
loading, checking and formatting its files' lines, which the parent writes in file order: the same bytes as
checking them all at once (tests/test_check_batch.py). A file's models are dropped once its lines are made.
What the run as a whole decides stays whole: where a file fails to load or two kernels share a name, the
caller checks the serial way, which reports it; a near-boundary verdict (settle.py) is settled from the cache
in its chunk, and the configs no chunk found there are compiled once for the run, their chunks made again.
"""

from __future__ import annotations

import gc
import itertools
import json
import multiprocessing
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from specgen.check import Diagnostic, KernelMemo, Settle, check_unsettled, settled
from specgen.memo import IdentityMemo
from specgen.resolved import Resolved
from specgen.settle import SettleStats, compile_jobs, settle_known
from specgen.spec.load import LoadedSpec, SpecError, load_file, path_problem, spec_files

COLORS = {"error": "red", "warning": "yellow", "note": "dim"}
BATCH_BYTES = 1 << 20  # spec text (all files) from which check goes file by file, over worker processes
CHUNKS_PER_WORKER = 8  # chunks of files per worker: small enough to even out the workers' loads
WORKERS_ENV = "SPECGEN_CHECK_WORKERS"  # 0: check all at once, in-process; N: file by file, over N processes


def diagnostic_lines(d: Diagnostic) -> list[tuple[str, str]]:
    """The one diagnostic format check and render share: severity file:line:col RULE spec @ target: message,
    then the hint indented below; each line with its style."""
    where = f"{d.target} {d.variant}" if getattr(d, "variant", "") else d.target
    lines = [(f"{d.severity} {d.file}:{d.line}:{d.column} {d.label} {d.spec} @ {where}: {d.message}", COLORS[d.severity])]
    if d.hint:
        lines.append((f"    hint: {d.hint}", ""))
    return lines


def variant_lines(loaded: LoadedSpec, resolved: dict[tuple[str, str], Resolved] | None = None) -> list[str]:
    """One line per target with size-selected variants: the order the launcher tries them in. `resolved`:
    check's (spec, target) -> Resolved, whose effective configs these are (else they are made here)."""
    lines = []
    for t in loaded.spec.targets:
        variants = loaded.spec.variants_on(t)
        if not variants:
            continue
        r = None if resolved is None else resolved.get((loaded.name, str(t)))
        shown = []
        for i, v in enumerate(variants):
            spec = r.variants[i].spec if r is not None else loaded.spec.for_target(t, i)
            shown.append(f"{v.when}: {_label(spec, t)}")
        default = r.spec if r is not None else loaded.spec.for_target(t)
        lines.append(f"variants {loaded.name} @ {t}: {'; '.join(shown)}; else {_label(default, t)}")
    return lines


_LABELS: IdentityMemo[str] = IdentityMemo()  # config_label by effective spec object and target


def _label(spec, target) -> str:
    """`config_label`, made once per effective spec object: a kernel written again shares its resolutions
    (check.KernelMemo), so each copy's variant lines read the same specs."""
    found = _LABELS.get(spec, str(target))
    return found if found is not None else _LABELS.put(spec, config_label(spec, target), str(target))


def config_label(spec, target) -> str:
    """A config as `check` shows it: as the spec's kind reads it (its problem's `config_label`: a tile,
    split-K where it splits), and what the target's design adds (`swap_ab` where a config swaps the MMA's
    operands)."""
    from specgen.kinds.lineup import kind_part
    from specgen.registry import design_for

    problem = kind_part(spec.kind, "problem")  # the kind says how its config reads (its tile, its split)
    design = design_for(spec.kind, target)
    notes = design.config_notes(spec) if design is not None else ""
    return (problem.config_label(spec) if problem is not None else "") + notes


# Plain output ------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"[\x20-\x7e\n]*\Z")  # text rich prints as it is (no tabs, no control codes), emoji aside


def plain_console(console: Console) -> bool:
    """Whether `console` writes plain text (no terminal, no colors, no recording or capture, no wrapping)."""
    return not (console.is_terminal or console.color_system is not None or console.record
                or console._buffer_index or not console.soft_wrap)


_EMOJI_CODE = re.compile(r":(\S*?)(?:(?:\-)(?:emoji|text))?:")  # what rich's _emoji_replace matches, its name


@dataclass(frozen=True)
class Emoji:
    """The console's emoji settings: rich replaces `:name:` codes in printed text, in a diagnostic's text too
    (a position `file:100:7` prints as file, the emoji for `100`, 7: check's output as it has always been)."""

    replace: bool = True
    variant: str | None = None

    @classmethod
    def of(cls, console: Console) -> Emoji:
        return cls(console._emoji, console._emoji_variant)

    def __call__(self, text: str) -> str:
        """`text` as rich prints it. A code never spans a line, so lines may come joined: one pass over them."""
        if not self.replace or ":" not in text:
            return text
        from rich._emoji_codes import EMOJI
        from rich._emoji_replace import _emoji_replace

        names = {name for name in set(_EMOJI_CODE.findall(text)) if name.lower() in EMOJI}
        if not names:
            return text  # the common case: codes that name no emoji (`file:12:7`, `backend:arch:`)
        # rich's pass, on the lines that may hold one (a line of 100 has `:100:`): the others read as written
        marks = tuple(f":{name}" for name in names)
        return "\n".join(_emoji_replace(line, default_variant=self.variant) if any(m in line for m in marks) else line
                         for line in text.split("\n"))


# (text, None): plain text, written as it is; (line, style): a line for console.print
Segment = tuple[str, "str | None"]


def segments(lines: Iterable[tuple[str, str]], emoji: Emoji) -> list[Segment]:
    """Lines as a plain console prints them: runs of plain lines joined into one text, other lines kept."""
    out: list[Segment] = []
    buf: list[str] = []
    for text, style in lines:
        if _PLAIN.match(text):
            buf.append(text)
            continue
        if buf:
            out.append((emoji("\n".join(buf)) + "\n", None))
            buf = []
        out.append((text, style))
    if buf:
        out.append((emoji("\n".join(buf)) + "\n", None))
    return out


def write_segments(console: Console, segs: Iterable[Segment]) -> None:
    for text, style in segs:
        if style is None:
            console.file.write(text)
        else:
            console.print(text, style=style, markup=False)
    console.file.flush()


def write_lines(console: Console, lines: list[tuple[str, str]]) -> None:
    """Print (text, style) lines as `console.print(text, style=style, markup=False)` would, one after the
    other; in one write where the console is plain (`plain_console`)."""
    if not plain_console(console):
        for text, style in lines:
            console.print(text, style=style, markup=False)
        return
    write_segments(console, segments(lines, Emoji.of(console)))


def json_item(d: Diagnostic) -> str:
    """A diagnostic as an item of `json.dumps(list, indent=2)`, without the list's own indent before it."""
    return json.dumps(d.as_dict(), indent=2).replace("\n", "\n  ")


def json_list(items: list[str]) -> str:
    """`json.dumps(list, indent=2)` of the dicts whose `json_item`s these are."""
    return "[\n  " + ",\n  ".join(items) + "\n]" if items else "[]"


# Many files --------------------------------------------------------------------------------------------


def workers_for(paths: list[Path]) -> tuple[list[Path], int] | None:
    """The spec files under `paths` and how many worker processes to check them with (1: in this process,
    file by file), or None where check goes the serial way: little text, or a path that names no spec file
    (which the serial way reports)."""
    forced = os.environ.get(WORKERS_ENV, "").strip()
    if forced == "0" or any(path_problem(p) is not None or (p.is_dir() and not spec_files([p])) for p in paths):
        return None
    files = spec_files(paths)
    if not forced:
        try:
            if sum(f.stat().st_size for f in files) < BATCH_BYTES:
                return None
        except OSError:
            return None
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    else:
        cores = max(1, int(forced)) if forced.isdigit() else 1
    return files, max(1, min(cores, len(files)))


@dataclass
class Chunk:
    """What one chunk of files gave: its counts and its output (segments, or JSON items), or where it
    fails to load (`loaded` False) or needs configs compiled first (`jobs`), what the run decides."""

    loaded: bool = True
    names: list[str] = field(default_factory=list)
    targets: int = 0
    errors: int = 0
    warnings: int = 0
    diagnostics: list[Segment] = field(default_factory=list)
    variants: list[Segment] = field(default_factory=list)
    json: list[str] = field(default_factory=list)
    near: int = 0
    unsettled: int = 0
    hits: set[str] = field(default_factory=set)
    jobs: dict[str, dict[str, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    files: tuple[str, ...]
    notes: bool
    settle: Settle
    as_json: bool
    emoji: Emoji
    known: dict | None = None  # compiled results by cache key (the second pass of a chunk that needed them)
    run: object = None  # which run of check_files (a worker's memo serves one)


_MEMO: dict[object, KernelMemo] = {}  # this process's, for one run: a kernel written again is checked once


def _memo(run: object) -> KernelMemo:
    if run not in _MEMO:
        _MEMO.clear()
        _MEMO[run] = KernelMemo()
    return _MEMO[run]


def check_chunk(task: Task) -> Chunk:
    """Load and check a chunk's files one after the other; settle its near-boundary verdicts from the cache
    (and `task.known`); format its output."""
    # Checking allocates many short-lived objects and makes next to no cycles: the cyclic collector, run as
    # often as those allocations ask, costs about a sixth of a check at its default threshold (700) and a few
    # percent at 100,000. A chunk runs without it; in this process it collects once at its end. A worker
    # does not: a collection there finds nothing (0 objects over 2,000 drawn kernels) but walks the chunk's
    # live memos, 6% of its CPU; it freezes them out of the collector's way, and its process ends with the run.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _check_chunk(task)
    finally:
        if enabled:
            gc.enable()
            if _IN_WORKER:
                gc.freeze()
            else:
                gc.collect()


def _check_chunk(task: Task) -> Chunk:
    chunk = Chunk()
    diags: list[Diagnostic] = []
    pending: list = []
    lines: list[str] = []
    for f in task.files:
        try:
            specs = load_file(Path(f))
        except SpecError:
            return Chunk(loaded=False)
        report = check_unsettled(specs, task.notes, near=task.settle != "model", memo=_memo(task.run))
        pending += [(len(diags) + i, *rest) for i, *rest in report.pending]
        diags += report.diagnostics
        for ls in specs:
            chunk.names.append(ls.name)
            chunk.targets += len(ls.spec.targets)
            if not task.as_json:
                lines += variant_lines(ls, report.resolved)
    if pending:
        verdicts, plan = settle_known([(one, f) for *_, one, _, f in pending], task.settle == "compile", task.known)
        chunk.near, chunk.hits = len(pending), plan.hits
        if verdicts is None:
            chunk.jobs = plan.jobs
            return chunk
        chunk.unsettled = sum(v.source == "model" for v in verdicts)
        diags = settled(diags, pending, verdicts)
    chunk.errors = sum(d.severity == "error" for d in diags)
    chunk.warnings = sum(d.severity == "warning" for d in diags)
    if task.as_json:
        chunk.json = [json_item(d) for d in diags]
    else:
        chunk.diagnostics = segments((line for d in diags for line in diagnostic_lines(d)), task.emoji)
        chunk.variants = segments(((text, "") for text in lines), task.emoji)
    return chunk


@dataclass
class Batch:
    chunks: list[Chunk]
    settled: SettleStats
    specs: int
    targets: int
    errors: int
    warnings: int


_RUNS = itertools.count()


def _split(files: list[Path], n: int) -> list[tuple[str, ...]]:
    """`files` in order, cut into at most `n` runs of about equal bytes."""
    sizes = [max(1, f.stat().st_size) for f in files]
    total, runs, cur, acc = sum(sizes), [], [], 0
    for f, size in zip(files, sizes, strict=True):
        cur.append(str(f))
        acc += size
        if acc >= total * (len(runs) + 1) / n:
            runs.append(tuple(cur))
            cur = []
    if cur:
        runs.append(tuple(cur))
    return runs


_IN_WORKER = False  # this process is a pool worker of one run (check_chunk's collector)


def _worker_init() -> None:
    global _IN_WORKER
    _IN_WORKER = True
    gc.freeze()  # what the worker inherited is never garbage: out of the collector's way


def _run(tasks: list[Task], workers: int) -> Iterator[Chunk]:
    if workers <= 1 or len(tasks) <= 1:
        yield from map(check_chunk, tasks)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(min(workers, len(tasks)), initializer=_worker_init) as pool:
        yield from pool.imap(check_chunk, tasks)


def check_files(files: list[Path], workers: int, notes: bool, settle: Settle, as_json: bool,
                emoji: Emoji) -> Batch | None:
    """Check `files` chunk by chunk over `workers` processes; None where the run goes the serial way (a file
    fails to load, two kernels share a name: the serial way reports both as it always has)."""
    try:
        return _check_files(files, workers, notes, settle, as_json, emoji)
    finally:
        _MEMO.clear()  # (where the chunks ran in this process) a run's memo serves that run only


def _check_files(files: list[Path], workers: int, notes: bool, settle: Settle, as_json: bool,
                 emoji: Emoji) -> Batch | None:
    run = (os.getpid(), next(_RUNS))
    tasks = [Task(part, notes, settle, as_json, emoji, run=run) for part in _split(files, workers * CHUNKS_PER_WORKER)]
    chunks = list(_run(tasks, workers))
    names: set[str] = set()
    for c in chunks:
        if not c.loaded:
            return None
        for name in c.names:
            if name.lower() in names:
                return None
            names.add(name.lower())
    stats = SettleStats(near=sum(c.near for c in chunks), cached=len(set().union(*(c.hits for c in chunks))))
    jobs = {k: job for c in chunks for k, job in c.jobs.items()}
    if jobs:  # compiled once for the run; the chunks that waited for them are made again
        known, stats.seconds = compile_jobs(jobs)
        stats.compiled = len(jobs)
        again = [i for i, c in enumerate(chunks) if c.jobs]
        for i, c in zip(again, _run([Task(tasks[i].files, notes, settle, as_json, emoji, known, run) for i in again],
                                    workers), strict=True):
            chunks[i] = c
    stats.unsettled = sum(c.unsettled for c in chunks)
    return Batch(chunks, stats, len(names), sum(c.targets for c in chunks), sum(c.errors for c in chunks),
                 sum(c.warnings for c in chunks))
