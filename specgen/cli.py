"""The `specgen` command: check, render, schema, compile, rules.

Exit codes: 0 all good; 1 a spec failed (load error, rule error, stale output, compile failure);
2 usage errors (click's convention, also for paths that do not exist).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console

from specgen import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Declarative GEMM kernel specs -> checked, rendered kernels.")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

PathsArg = typer.Argument(None, help="Spec files or folders (default: specs/).", show_default=False)


def _paths(paths: list[Path] | None) -> list[Path]:
    chosen = paths or [Path("specs")]
    cwd = Path.cwd()
    resolved = []
    for p in chosen:
        if not p.exists():
            err.print(f"error: no such file or folder: {p}", markup=False)
            raise typer.Exit(2)
        # messages and generated headers name specs relative to where specgen runs
        inside = p.resolve().is_relative_to(cwd)
        resolved.append(p.resolve().relative_to(cwd) if inside else p)
    return resolved


def _load(paths: list[Path] | None):
    from rich.markup import escape

    from specgen.spec.load import SpecError, load_paths

    try:
        return load_paths(_paths(paths))
    except SpecError as e:
        for issue in e.issues:
            err.print(f"[red]error[/red] {escape(str(issue))}")  # spec text is not markup
        raise typer.Exit(1) from None


@app.command()
def check(
    paths: list[Path] | None = PathsArg,
    as_json: bool = typer.Option(False, "--json", help="Print diagnostics as a JSON list."),
    notes: bool = typer.Option(False, "--notes", help="Also say, for each target a spec does not list, why it cannot serve it."),
) -> None:
    """Prove every spec fits each of its targets' hardware envelopes."""
    from specgen.check import check_all

    start = time.perf_counter()
    specs = _load(paths)
    diags = check_all(specs)
    errors = [d for d in diags if d.severity == "error"]
    if as_json:
        out.print(json.dumps([d.as_dict() for d in diags], indent=2), markup=False)
    else:
        colors = {"error": "red", "warning": "yellow", "note": "dim"}
        for d in diags:
            if d.severity == "note" and not notes:
                continue
            out.print(f"{d.severity} {d.file}:{d.line}:{d.column} {d.rule} {d.spec} @ {d.target}: {d.message}",
                      style=colors[d.severity], markup=False)
            if d.hint:
                out.print(f"    hint: {d.hint}", markup=False)
        targets = sum(len(s.spec.targets) for s in specs)
        ms = (time.perf_counter() - start) * 1000
        warnings = sum(d.severity == "warning" for d in diags)
        out.print(f"{len(specs)} specs, {targets} targets: {len(errors)} errors, {warnings} warnings ({ms:.0f} ms)")
    raise typer.Exit(1 if errors else 0)


@app.command()
def render(
    paths: list[Path] | None = PathsArg,
    out_dir: Path = typer.Option(Path("generated"), "--out", help="Where the rendered package goes."),
    check_only: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if any file would change."),
) -> None:
    """Render every valid spec for every target whose backend has a renderer."""
    from specgen.render.catalogue import render_catalogue

    specs = _load(paths)
    result = render_catalogue(specs, out_dir, check=check_only)
    for d in result.diagnostics:
        if d.severity == "error":
            err.print(str(d), style="red", markup=False)
    for name in result.refused:
        err.print(f"refused {name}: it fails check (its previous outputs are kept)", markup=False)
    by_reason: dict[tuple[str, str], list[str]] = {}
    for spec, target, reason in result.skipped:
        by_reason.setdefault((spec, reason), []).append(target)
    for (spec, reason), targets in by_reason.items():
        out.print(f"skipped {spec} @ {', '.join(targets)}: {reason}", markup=False)
    rep = result.report
    if check_only:
        for rel in rep.written:
            err.print(f"stale: {out_dir / rel}", markup=False)
        for rel in rep.removed:
            err.print(f"stale (would be removed): {out_dir / rel}", markup=False)
        out.print(f"{len(rep.unchanged)} up to date, {len(rep.changed)} stale")
        raise typer.Exit(1 if rep.changed or result.refused else 0)
    for rel in rep.written:
        out.print(f"wrote {out_dir / rel}", markup=False)
    for rel in rep.removed:
        out.print(f"removed {out_dir / rel}", markup=False)
    out.print(f"{len(rep.written)} written, {len(rep.unchanged)} unchanged, {len(rep.removed)} removed")
    raise typer.Exit(1 if result.refused else 0)


@app.command("compile")
def compile_cmd(
    paths: list[Path] | None = PathsArg,
    out_dir: Path = typer.Option(Path("generated"), "--out", help="The rendered package to compile."),
    target: list[str] | None = typer.Option(None, "--target", help="Only these backend:arch targets (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per kernel and target."),
    sass: bool = typer.Option(False, "--sass", help="CuTe: count UTMALDG, UTMASTG, HGMMA/QGMMA and LDL/STL in the SASS."),
) -> None:
    """Compile rendered kernels ahead of time (no GPU needed); print compiler vs plan SMEM."""
    import importlib.util

    from specgen.spec.models import parse_target

    wanted = set()
    for t in target or []:
        try:
            wanted.add(str(parse_target(t)))
        except ValueError as e:
            err.print(f"error: {e}", markup=False)
            raise typer.Exit(2) from None
    specs = _load(paths)
    jobs = [(ls, t) for ls in specs for t in ls.spec.targets
            if (t.backend.value == "triton" or str(t) == "cute:sm90") and (not wanted or str(t) in wanted)]
    needs = {"triton": ("torch", "triton"), "cute": ("torch", "cutlass")}
    for backend in sorted({t.backend.value for _, t in jobs}):
        missing = [m for m in needs[backend] if importlib.util.find_spec(m) is None]
        if missing:
            err.print(f"error: specgen compile needs {' and '.join(missing)}: pip install 'specgen[{backend}]'", markup=False)
            raise typer.Exit(2)
    if not jobs and not wanted:  # nothing rendered to compile: still say what triton compile would need
        missing = [m for m in needs["triton"] if importlib.util.find_spec(m) is None]
        if missing:
            err.print(f"error: specgen compile needs {' and '.join(missing)}: pip install 'specgen[triton]'", markup=False)
            raise typer.Exit(2)
    from specgen.compile import compile_module, import_rendered

    failed = 0
    rows = []
    for ls, t in jobs:
        path = out_dir / t.backend.value / f"{ls.name}.py"
        if not path.is_file():
            err.print(f"error: {path} is missing: run `specgen render` first", markup=False)
            raise typer.Exit(1)
        if t.backend.value == "cute":
            from specgen.compile_cute import compile_module as compile_cute

            r = compile_cute(import_rendered(path), t.arch, sass=sass)
        else:
            r = compile_module(import_rendered(path), t.arch)
        failed += bool(r.error)
        rows.append(r)
        counts = getattr(r, "sass", {})
        if as_json:
            out.print(json.dumps({"kernel": r.kernel, "target": r.target, "plan_smem": r.plan_smem,
                                  "compiler_smem": r.compiler_smem, "seconds": round(r.seconds, 3),
                                  "error": r.error, **({"sass": counts} if counts else {}),
                                  **({"cpu_seconds": round(r.cpu_seconds, 3)} if hasattr(r, "cpu_seconds") else {})}),
                      markup=False)
        elif r.error:
            out.print(f"FAILED {r.kernel} @ {r.target}: {r.error}", style="red", markup=False)
        else:
            delta = (r.plan_smem - r.compiler_smem) / r.compiler_smem * 100
            line = (f"{r.kernel:28} {r.target:14} compiler SMEM {r.compiler_smem:7d} B   plan {r.plan_smem:7d} B "
                    f"({delta:+.1f}%)   {r.seconds:.1f} s")
            if counts:
                line += "   " + " ".join(f"{k} {v}" for k, v in counts.items())
            out.print(line, markup=False)
    if not rows:
        err.print("no Triton or cute:sm90 targets to compile", markup=False)
    if not as_json:
        out.print(f"{len(rows) - failed} compiled, {failed} failed")
    raise typer.Exit(1 if failed else 0)


@app.command()
def schema(markdown: bool = typer.Option(False, "--markdown", help="The spec reference as Markdown instead.")) -> None:
    """Print the JSON Schema of spec files (or the Markdown spec reference)."""
    if markdown:
        from specgen.docs import spec_reference

        out.print(spec_reference(), markup=False, end="")
        return
    from specgen.spec.models import SpecFile

    out.print(json.dumps(SpecFile.model_json_schema(), indent=2), markup=False)


@app.command()
def rules() -> None:
    """List the envelope rules: id, title, and where each applies."""
    from specgen.envelope.rules import RULES

    for r in RULES:
        out.print(f"{r.id:8} {r.title}", markup=False)


@app.command()
def version() -> None:
    """Print the specgen version."""
    out.print(__version__)


def main() -> None:
    app()
