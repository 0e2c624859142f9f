"""`specgen bench` and `specgen tune` (registered on cli.app): parse, call specgen.bench / specgen.tune,
print. Importing this module imports no GPU library: the commands import what they need when they run."""

from __future__ import annotations

import enum
import os
from pathlib import Path

import typer

from specgen.cli_common import app, err, out


def _specs(items: list[str] | None):
    """Spec files, or kernel names from specs/ (a name not found says which exist)."""
    from specgen.cli_common import _load

    items = items or []
    paths = [Path(i) for i in items if Path(i).exists()]
    names = [i for i in items if not Path(i).exists()]
    loaded = _load(paths) if paths or not names else []
    if names:
        catalogue = {ls.name: ls for ls in _load([Path("specs")])}
        missing = [n for n in names if n not in catalogue]
        if missing:
            err.print(f"error: {', '.join(missing)}: neither a file nor a kernel in specs/ "
                      f"(kernels: {', '.join(sorted(catalogue))})", markup=False)
            raise typer.Exit(2)
        loaded += [catalogue[n] for n in names]
    return loaded


def _targets(items: list[str] | None) -> set[str]:
    from specgen.spec.models import parse_target

    try:
        return {str(parse_target(t)) for t in items or []}
    except ValueError as e:
        err.print(f"error: --target: {e}", markup=False)
        raise typer.Exit(2) from None


def _shapes(text: str | None, loaded: list):
    """`--shapes` as the shapes of the specs' kind (one kind per run: each kind writes its shapes its way)."""
    from specgen.bench.shapes import ShapeError, parse_shapes

    kinds = list(dict.fromkeys(ls.spec.kind for ls in loaded))
    if text is not None and len(kinds) > 1:
        err.print(f"error: --shapes: these specs are of {len(kinds)} kinds ({', '.join(kinds)}), whose shapes read "
                  "differently: give the specs of one kind with --shapes", markup=False)
        raise typer.Exit(2)
    try:  # `--shapes ''` is an error, not the defaults
        return parse_shapes(text, kinds[0]) if text is not None and kinds else None
    except ShapeError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None


def _writable(flag: str, path: Path | None) -> None:
    """An output file the command will write: refused before any work where it cannot be (a folder, a link
    to nowhere, an unwritable folder)."""
    if path is None:
        return
    problem = ""
    if str(path) in ("", "."):
        problem = "is no file name"
    elif path.is_dir():
        problem = "is a folder: name a file"
    elif os.path.lexists(path) and not path.is_file():
        problem = "is not a regular file"
    elif os.path.lexists(path) and not os.access(path, os.W_OK):
        problem = "is read-only"
    else:
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            problem = f"cannot be created: {parent} is {'not a folder' if not parent.is_dir() else 'read-only'}"
    if problem:
        err.print(f"error: {flag} {path} {problem} (nothing was run)", markup=False)
        raise typer.Exit(2)


def _positive(value: float | None) -> float | None:
    if value is not None and not value > 0:  # (NaN too)
        raise typer.BadParameter(f"{value} is not a positive number of minutes")
    return value


def _need_gpu(what: str) -> None:
    try:
        import torch
    except ImportError:
        err.print(f"error: {what} needs torch with CUDA: pip install torch (a CUDA build)", markup=False)
        raise typer.Exit(2) from None
    if not torch.cuda.is_available():
        err.print(f"error: {what} times kernels on a CUDA GPU and this machine has none"
                  f"{' (use --from-cache to apply cached results)' if what == 'specgen tune' else ''}", markup=False)
        raise typer.Exit(2)


class RichProgress:
    """The tuner's Progress as rich bars: done / total, elapsed, ETA."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"), console=err)
        self.task = None

    def phase(self, name: str, total: int) -> None:
        if not self.bar.live.is_started:  # (again for a run's next spec, whose bars alone show: the last
            for task in list(self.bar.task_ids):  # spec's summary was printed between)
                self.bar.remove_task(task)
            self.bar.start()
        self.task = self.bar.add_task(name, total=total, last="")

    def advance(self, text: str = "") -> None:
        self.bar.update(self.task, advance=1, last=text[:70])

    def stop(self) -> None:
        if self.bar.live.is_started:
            self.bar.stop()


class L2Flush(str, enum.Enum):
    """timing.FLUSHES as the CLI's choice (spelled out: importing the timer's module here would slow every
    command's start; a test keeps the two equal)."""

    write = "write"
    read = "read"


@app.command()
def bench(
    specs: list[str] | None = typer.Argument(None, help="Spec files or kernel names (default: all of specs/).",
                                             show_default=False, metavar="SPEC_OR_NAME"),
    target: list[str] | None = typer.Option(None, "--target", help="Only these backend:arch targets (repeatable)."),
    shapes: str | None = typer.Option(None, "--shapes", help="MxNxK[,...] (default: variants' ranges + model shapes)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the record (one JSON schema) here."),
    png: Path | None = typer.Option(None, "--png", help="Draw ratio per shape per target (the plot extra)."),
    compare: tuple[Path, Path] | None = typer.Option(None, "--compare", help="Compare two records: A.json B.json.",
                                                     metavar="A B"),
    rounds: int = typer.Option(40, "--rounds", min=3, help="Paired rounds per row."),
    flush: L2Flush = typer.Option("write", "--flush", case_sensitive=False,
                                  help="Empty the L2 before each call by writing 256 MB (leaves it dirty, as do_bench) "
                              "or by reading it (leaves it clean, as ncu)."),
) -> None:
    """Time rendered kernels against their peer (paired CUPTI, L2 flushed, an A/A row per table)."""
    from specgen.bench.record import BenchRecord, RecordError
    from specgen.bench.report import compare as compare_records
    from specgen.bench.report import plot, print_record

    if compare:
        try:
            a, b = (BenchRecord.read(p) for p in compare)
        except RecordError as e:
            err.print(f"error: --compare: {e}", markup=False)
            raise typer.Exit(1) from None
        table, notes = compare_records(a, b)
        out.print(table)
        for line in notes:
            out.print(line, markup=False)
        raise typer.Exit(0)
    loaded = _specs(specs)
    wanted, shape_list = _targets(target), _shapes(shapes, loaded)
    for flag, path in (("--json", json_out), ("--png", png)):
        _writable(flag, path)
    _need_gpu("specgen bench")
    from specgen.bench.record import environment
    from specgen.bench.run import plan, run_bench
    from specgen.bench.timing import CuptiTimer
    from specgen.bench.workloads import GpuWorkloads

    workloads = GpuWorkloads()
    jobs = plan(loaded, wanted, shape_list, workloads)
    if not jobs:
        err.print("error: no target of these specs runs on this GPU", markup=False)
        raise typer.Exit(1)
    record = run_bench(jobs, workloads, CuptiTimer(flush.value), environment(flush.value), rounds,
                       progress=lambda line: err.print(line, markup=False))
    print_record(record, out)
    if json_out:
        record.dump(json_out)
        out.print(f"wrote {json_out}", markup=False)
    if png:
        plot(record, png)
        out.print(f"wrote {png}", markup=False)
    for failure in record.failures:
        err.print(f"error: {failure}", markup=False)
    if record.failures:
        raise typer.Exit(1)


@app.command()
def tune(
    specs: list[str] = typer.Argument(..., help="Spec files (one kernel each) or kernel names in specs/; several are "
                                      "tuned in one run (with --ray, on one cluster and one set of timing actors).",
                                      metavar="SPEC"),
    kernel: str | None = typer.Option(None, "--kernel", help="Which kernel of a file that holds several."),
    target: list[str] | None = typer.Option(None, "--target", help="Targets to tune (default: those this GPU runs)."),
    shapes: str | None = typer.Option(None, "--shapes", help="MxNxK[,...] (default: variants' ranges + model shapes)."),
    budget: float | None = typer.Option(None, "--budget", help="Stop timing a spec after MIN minutes, with the best so far.",
                                        metavar="MIN", callback=_positive),
    write: bool = typer.Option(False, "--write", help="Write the winners into the spec file."),
    from_cache: bool = typer.Option(False, "--from-cache", help="Choose from cached timings only (no GPU)."),
    ray: bool = typer.Option(False, "--ray", help="Compile on Ray CPU tasks, time on one Ray actor per GPU "
                             "(a local Ray cluster, or --ray-address's)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Join this Ray cluster (implies --ray).",
                                           metavar="ADDRESS"),
    workers: int = typer.Option(max(1, (os.cpu_count() or 2) - 1), "--workers", min=1, max=1024,
                                help="Compile processes (no Ray)."),
    cache_path: Path = typer.Option(Path(".specgen/tune-cache.jsonl"), "--cache", help="The results cache."),
    knob: list[str] | None = typer.Option(None, "--knob", help="Replace a knob's range: tile.n=128,256 (repeatable)."),
    rounds: int = typer.Option(40, "--rounds", min=3, help="Paired rounds per timing."),
    compile_only: bool = typer.Option(False, "--compile-only",
                                      help="Compile every candidate afresh (no cache, no GPU) and report throughput."),
    verify: bool = typer.Option(False, "--verify", help="Then time every candidate in one cycle: is the pick the best?"),
    flush: L2Flush = typer.Option("write", "--flush", case_sensitive=False,
                                  help="The timer's L2 flush, as `bench --flush` (cached timings are kept per flush)."),
) -> None:
    """Find each target's best config for each SPEC's shapes; with --write, put it in the spec file."""
    from specgen.tune.cache import CacheError
    from specgen.tune.space import SpaceError, parse_knobs
    from specgen.tune.writeback import WriteError, read_spec

    loaded = []
    for spec in specs:
        candidates = [ls for ls in _specs([spec]) if kernel is None or ls.name == kernel]
        if len(candidates) != 1:
            err.print(f"error: {spec} holds {len(candidates)} kernels: name one with --kernel "
                      f"({', '.join(ls.name for ls in _specs([spec]))})", markup=False)
            raise typer.Exit(2)
        loaded += candidates
    models = {type(ls.spec) for ls in loaded}
    if knob and len(models) > 1:
        err.print("error: --knob names one kind's config sections, and these specs are of "
                  f"{len(models)} kinds: tune each kind on its own", markup=False)
        raise typer.Exit(2)
    try:
        overrides = parse_knobs(knob or [], type(loaded[0].spec)) if loaded else {}
    except SpaceError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None
    wanted, shape_list = _targets(target), _shapes(shapes, loaded)
    if write:  # a file --write cannot replace (read-only, a layout it would change) is refused before any work
        try:
            for ls in loaded:
                read_spec(Path(ls.file))
        except WriteError as e:
            err.print(f"error: --write: {e}", markup=False)
            raise typer.Exit(1) from None
    from specgen.tune import session

    progress = RichProgress()
    try:
        session.run(loaded, wanted, shape_list, overrides, cache_path=cache_path, budget_min=budget, write=write,
                    from_cache=from_cache,
                    ray=ray_address or ("local" if ray else None), workers=workers, rounds=rounds, compile_only=compile_only,
                    verify=verify, progress=progress, need_gpu=_need_gpu, say=lambda t: out.print(t, markup=False),
                    flush=flush.value)
    except (SpaceError, WriteError, CacheError, session.TuneError) as e:
        progress.stop()
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(1) from None
    progress.stop()
