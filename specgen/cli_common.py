"""What every `specgen` command module shares: the Typer app, the two consoles, and loading the spec
paths a command names (errors said on stderr, or as JSON rows for --json). specgen/cli.py holds the
check/render/compile commands, specgen/cli_perf.py bench and tune; both import this, not each other."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Declarative kernel specs -> checked, rendered kernels.")
out = Console(highlight=False, soft_wrap=True, emoji=False)  # a position `spec.toml:100:7` prints as written
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def _paths(paths: list[Path] | None) -> list[Path]:
    chosen = paths or [Path("specs")]
    cwd = Path.cwd()
    resolved = []
    from specgen.spec.load import inert, path_problem

    for p in chosen:
        problem = path_problem(p)  # missing, a symlink loop, a dangling link: each said as what it is
        if problem:
            err.print(f"error: {inert(problem)}", markup=False)
            raise typer.Exit(2)
        # messages and generated headers name specs relative to where specgen runs
        inside = p.resolve().is_relative_to(cwd)
        resolved.append(p.resolve().relative_to(cwd) if inside else p)
    return resolved


def _load(paths: list[Path] | None, as_json: bool = False):
    from rich.markup import escape

    from specgen.spec.load import SpecError, load_paths

    try:
        return load_paths(_paths(paths))
    except SpecError as e:
        if as_json:  # a reader of --json gets every failure on stdout, in the diagnostics' shape
            rows = [{"spec": None, "file": i.file, "line": i.line, "column": i.column, "target": None, "rule": "LOAD",
                     "severity": "error", "field": i.path, "message": i.message, "hint": ""} for i in e.issues]
            out.print(json.dumps(rows, indent=2), markup=False)
        for issue in e.issues:
            err.print(f"[red]error[/red] {escape(str(issue))}")  # spec text is not markup
        raise typer.Exit(1) from None
