"""The `specgen` command: check, render, schema, compile, rules.

Exit codes: 0 all good; 1 a spec failed (load error, rule error, stale output, compile failure);
2 usage errors (click's convention, also for paths that do not exist).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import typer
from rich.console import Console

from specgen import __version__
from specgen.check_batch import (
    Emoji,
    check_files,
    diagnostic_lines,
    json_item,
    json_list,
    plain_console,
    variant_lines,
    workers_for,
    write_lines,
    write_segments,
)
from specgen.cli_common import _load, _paths, app, err, out  # noqa: F401  (the CLI's app and consoles)
from specgen.settle import mode_from_environment

# rich_markup_mode=None: click's plain help, where a flag reads `--json`, not `--json <bool>`
PathsArg = typer.Argument(None, help="Spec files or folders (default: specs/).", show_default=False, metavar="PATH")
NoCompileOpt = typer.Option(False, "--no-compile",
                            help="Keep verdicts near a modelled rule's boundary the model's (a warning saying how to "
                            "settle them): compile nothing. SPECGEN_NO_COMPILE=1 does the same for every command.")


def _version(value: bool) -> None:
    if value:
        out.print(f"specgen {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Declarative kernel specs -> checked, rendered kernels."""


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def print_diagnostic(d, console: Console | None = None) -> None:
    """The one diagnostic format check and render share: severity file:line:col RULE spec @ target:
    message, then the hint indented below."""
    for text, style in diagnostic_lines(d):
        (console or out).print(text, style=style, markup=False)


def print_settled(stats, console: Console) -> None:
    """What a check that compiled did (a warm cache or --no-compile compiles nothing, and says nothing)."""
    if stats.compiled:
        console.print(f"settled {plural(stats.near, 'near-boundary verdict')} with the compiler: compiled "
                      f"{plural(stats.compiled, 'config')} in {stats.seconds:.1f} s ({stats.cached} cached)", markup=False)


@app.command()
def check(
    paths: list[Path] | None = PathsArg,
    as_json: bool = typer.Option(False, "--json", help="Print diagnostics as a JSON list."),
    notes: bool = typer.Option(False, "--notes",
                               help="Also say, for each target a spec does not list, why it cannot serve it."),
    no_compile: bool = NoCompileOpt,
) -> None:
    """Prove every spec fits each of its targets' hardware envelopes.

    A verdict near a modelled rule's boundary (registers, spills) is settled by the backend's compiler where
    it is installed, in parallel, cached on disk ($SPECGEN_SETTLE_CACHE): the finding says `(compiler)`;
    `(model)` where none settled it."""
    start = time.perf_counter()
    settle = "analytic" if no_compile else mode_from_environment()
    many = workers_for(_paths(paths)) if plain_console(out) else None
    batch = check_files(*many, notes, settle, as_json, Emoji.of(out)) if many else None
    if batch is not None:  # many files: checked file by file over worker processes
        print_settled(batch.settled, err if as_json else out)
        if as_json:
            text = json_list([item for c in batch.chunks for item in c.json])
            write_segments(out, [(Emoji.of(out)(text) + "\n", None)])
        else:
            write_segments(out, [seg for c in batch.chunks for seg in c.diagnostics])
            write_segments(out, [seg for c in batch.chunks for seg in c.variants])
            _summary(batch.specs, batch.targets, batch.errors, batch.warnings, start)
        raise typer.Exit(1 if batch.errors else 0)

    from specgen.check import check_specs

    specs = _load(paths, as_json)
    # notes cost a pass over every unlisted target: only when asked
    report = check_specs(specs, notes=notes, settle=settle)
    diags = report.diagnostics
    errors = sum(d.severity == "error" for d in diags)
    print_settled(report.settled, err if as_json else out)
    if as_json:
        write_lines(out, [(json_list([json_item(d) for d in diags]), "")])
    else:
        write_lines(out, [line for d in diags for line in diagnostic_lines(d)])
        write_lines(out, [(text, "") for s in specs for text in variant_lines(s, report.resolved)])
        _summary(len(specs), sum(len(s.spec.targets) for s in specs), errors,
                 sum(d.severity == "warning" for d in diags), start)
    raise typer.Exit(1 if errors else 0)


def _summary(specs: int, targets: int, errors: int, warnings: int, start: float) -> None:
    ms = (time.perf_counter() - start) * 1000
    out.print(f"{plural(specs, 'spec')}, {plural(targets, 'target')}: {plural(errors, 'error')}, "
              f"{plural(warnings, 'warning')} ({ms:.0f} ms)")


@app.command()
def render(
    paths: list[Path] | None = PathsArg,
    out_dir: Path = typer.Option(Path("generated"), "--out", help="Where the rendered package goes."),
    check_only: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if any file would change."),
    prune: bool = typer.Option(False, "--prune",
                               help="Also remove outputs whose spec is not among PATHS (by default only outputs of "
                                    "spec files in PATHS that no longer produce them are removed)."),
    no_compile: bool = NoCompileOpt,
) -> None:
    """Render every valid spec for every target whose backend has a renderer.

    Outputs of spec files you did not name are kept: `render specs/a.toml` touches only a.toml's
    modules; `render` (all of specs/) also removes modules whose spec left specs/."""
    from specgen.render.catalogue import render_catalogue
    from specgen.render.writer import RenderError

    specs = _load(paths)
    scope = None if prune else _paths(paths)
    try:
        result = render_catalogue(specs, out_dir, check=check_only, scope=scope,
                                  settle="analytic" if no_compile else mode_from_environment())
    except RenderError as e:
        err.print(f"error: {e}", style="red", markup=False)
        raise typer.Exit(1) from None
    print_settled(result.settled, out)
    for d in result.diagnostics:
        if d.severity == "error":
            print_diagnostic(d, err)
    for name in result.refused:
        err.print(f"refused {name}: it fails check (its previous outputs are kept)", markup=False)
    skipped_targets = sorted({target for _, target, _ in result.skipped})
    if skipped_targets:
        n_specs = len({spec for spec, _, _ in result.skipped})
        out.print(f"checked only, no renderer yet in specgen {__version__}: {', '.join(skipped_targets)} "
                  f"({plural(len(result.skipped), 'target')} of {plural(n_specs, 'spec')})", markup=False)
    rep = result.report
    for rel, why in rep.kept:
        out.print(f"kept {out_dir / rel}: {why}", markup=False)
    because = "no spec in the given paths produces it" if scope is not None else "--prune: no given spec produces it"
    if check_only:
        for rel in rep.written:
            err.print(f"stale: {out_dir / rel}", markup=False)
        for rel in rep.removed:
            err.print(f"stale (would be removed): {out_dir / rel} ({because})", markup=False)
        out.print(f"{len(rep.unchanged)} up to date, {len(rep.changed)} stale")
        raise typer.Exit(1 if rep.changed or result.refused else 0)
    for rel in rep.written:
        out.print(f"wrote {out_dir / rel}", markup=False)
    for rel in rep.removed:
        out.print(f"removed {out_dir / rel} ({because})", markup=False)
    out.print(f"{len(rep.written)} written, {len(rep.unchanged)} unchanged, {len(rep.removed)} removed")
    raise typer.Exit(1 if result.refused else 0)


@app.command("compile")
def compile_cmd(
    paths: list[Path] | None = PathsArg,
    out_dir: Path = typer.Option(Path("generated"), "--out", help="The rendered package to compile."),
    target: list[str] | None = typer.Option(None, "--target", help="Only these backend:arch targets (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per kernel and target."),
    sass: bool = typer.Option(False, "--sass", help="Where the compile hook reads SASS: count TMA, MMA and local-memory (LDL/STL) opcodes."),
    forward_only: bool = typer.Option(False, "--forward-only", help="A training spec's forward kernels only, not its "
                                      "backward's (the `<kernel>[role]` rows)."),
    export_dir: str | None = typer.Option(None, "--export", help="Where the design exports: write objects, a C "
                                          "header, launchers and a CMake file for C++ programs into DIR (a folder "
                                          "of its own: files specgen did not write are never replaced; the export "
                                          "is written whole or not at all).", metavar="DIR"),
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
    if export_dir is not None:
        _export(specs, out_dir, export_dir, wanted)
    from specgen.compile import MissingModule, compile_spec, compile_targets
    from specgen.registry import design_for, rendering

    designs = {design_for(ls.spec.kind, t) for ls in specs for t in compile_targets(ls, wanted)}
    if not designs and not wanted:  # nothing to compile: still say what the first design's compile would need
        designs = {rendering()[0]}
    for design in sorted(designs, key=lambda d: d.extra):
        missing = [m for m in design.compiler_modules if importlib.util.find_spec(m) is None]
        if missing:
            err.print(f"error: specgen compile needs {' and '.join(missing)}: pip install 'specgen[{design.extra}]'",
                      markup=False)
            raise typer.Exit(2)
    failed = 0
    rows = []
    try:
        for r in (r for ls in specs for r in compile_spec(ls, out_dir, wanted, sass=sass, backward=not forward_only)):
            failed += bool(r.error)
            rows.append(r)
            if as_json:
                out.print(json.dumps({"kernel": r.kernel, "target": r.target, "variant": r.variant, "plan_smem": r.plan_smem,
                                      "compiler_smem": r.compiler_smem, "seconds": round(r.seconds, 3),
                                      "error": r.error, **({"registers": r.registers} if r.registers is not None else {}),
                                      **({"spills": dataclasses.asdict(r.spills)} if r.spills is not None else {}),
                                      **({"sass": r.sass} if r.sass else {}),
                                      **({"resources": r.resources} if r.resources else {}),
                                      **({"cpu_seconds": round(r.cpu_seconds, 3)} if r.cpu_seconds is not None else {})}),
                          markup=False)
            elif r.error:
                label = "" if r.variant is None else f" variant {r.variant}"
                out.print(f"FAILED {r.kernel}{label} @ {r.target}: {r.error}", style="red", markup=False)
            elif r.compiler_smem is None:  # lowered only (a hook whose compiler needs the device)
                out.print(f"{r.kernel:28} {r.target:14} lowered; plan {r.plan_smem:7d} B   {r.seconds:.1f} s", markup=False)
            else:
                # a backward's streaming kernel plans no SMEM (0), and may use none
                delta = f"({(r.plan_smem - r.compiler_smem) / r.compiler_smem * 100:+.1f}%)" if r.compiler_smem and r.plan_smem else "(none planned)"
                kernel = r.kernel if r.variant is None else f"{r.kernel}[{r.variant}]"
                line = (f"{kernel:28} {r.target:14} compiler SMEM {r.compiler_smem:7d} B   plan {r.plan_smem:7d} B "
                        f"{delta}   {r.seconds:.1f} s")
                if r.registers is not None:  # read off the cubin, with no spills (a spill is a failure above)
                    line += f"   {r.registers} registers, no spills"
                if r.sass:
                    line += "   " + " ".join(f"{k} {v}" for k, v in r.sass.items())
                if r.resources:
                    line += "   " + " ".join(f"{k} {v}" for k, v in r.resources.items())
                out.print(line, markup=False)
    except MissingModule as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(1) from None
    if not rows:
        err.print("no rendered targets to compile (only backends with a design compile)", markup=False)
    if not as_json:
        out.print(f"{len(rows) - failed} compiled, {failed} failed")
    raise typer.Exit(1 if failed else 0)


def _export(specs, rendered: Path, export_dir: str, wanted: set[str]) -> None:
    """`compile --export`: each wanted target's design exports through its `export_hook`; a target whose
    design has none (or renders nothing yet) is said, not exported. DIR is passed on as typed (a str:
    typer's Path would read '' as '.'), for the hook to refuse or lock (ExportError: exit 2 for DIR itself, 1
    for what it holds or a write)."""
    import importlib.util

    from specgen.compile import ExportError, MissingModule, _hook
    from specgen.registry import design_for

    # a target's designs, one per kind among the specs (two kinds may share a target)
    targets: dict[str, dict[str, object]] = {}
    for ls in specs:
        for t in ls.spec.targets:
            if not wanted or str(t) in wanted:
                targets.setdefault(str(t), {})[ls.spec.kind] = design_for(ls.spec.kind, t)
    unknown = sorted(set(wanted) - set(targets))
    none = sorted(t for t, ds in targets.items() if not any(d is not None and d.export_hook for d in ds.values()))
    if unknown or (wanted and none):
        err.print(f"error: --export: no design exports {', '.join(unknown + none)} for C++ programs", markup=False)
        raise typer.Exit(2)
    for t in none:
        out.print(f"{t}: its design exports nothing for C++ programs (yet): nothing exported", markup=False)
    for t, ds in targets.items():
        for kind, d in ds.items():
            if t not in none and (d is None or not d.export_hook):
                out.print(f"{t}: the {kind} kernels' design exports nothing for C++ programs (yet): not exported",
                          markup=False)
    hooks: dict[str, set[str]] = {}
    for t, ds in targets.items():
        for d in ds.values():
            if d is None or not d.export_hook:  # type: ignore[attr-defined]
                continue
            missing = [m for m in d.compiler_modules if importlib.util.find_spec(m) is None]  # type: ignore[attr-defined]
            if missing:
                err.print(f"error: specgen compile --export needs {' and '.join(missing)}: pip install "
                          f"'specgen[{d.extra}]'", markup=False)  # type: ignore[attr-defined]
                raise typer.Exit(2)
            hooks.setdefault(d.export_hook, set()).add(t)  # type: ignore[attr-defined]
    results = []
    try:
        for ref, served in hooks.items():
            results += _hook(ref)(specs, rendered, export_dir, served)
    except (MissingModule, ExportError) as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(getattr(e, "code", 1)) from None
    except OSError as e:  # what the hook did not expect: still one line
        err.print(f"error: --export {export_dir}: {e.strerror} ({e.filename})", markup=False)
        raise typer.Exit(1) from None
    failed = sum(bool(r.error) for r in results)
    for r in results:
        if r.error:
            out.print(f"FAILED {r.kernel} @ {r.target}: {r.error}", style="red", markup=False)
        else:
            out.print(f"{r.kernel:28} {r.target:14} {plural(r.configs, 'config')} {'compiled' if failed else 'exported'}"
                      f"   {r.seconds:.1f} s", markup=False)
    if not results:
        err.print("nothing to export: no rendered kernel among the specs has a design that exports", markup=False)
    elif failed:  # an export is whole or nothing: DIR keeps what it held
        out.print(f"{len(results) - failed} compiled, {failed} failed: nothing written to {export_dir}", markup=False)
    else:
        out.print(f"{len(results)} exported, 0 failed -> {export_dir}", markup=False)
    raise typer.Exit(1 if failed or not results else 0)


@app.command()
def schema(markdown: bool = typer.Option(False, "--markdown", help="The spec reference as Markdown instead.")) -> None:
    """Print the JSON Schema of spec files (or the Markdown spec reference)."""
    if markdown:
        from specgen.docs import spec_reference

        out.print(spec_reference(), markup=False, end="")
        return
    from specgen.spec.file import SpecFile

    out.print(json.dumps(SpecFile.model_json_schema(), indent=2), markup=False)


@app.command()
def rules() -> None:
    """List the envelope rules: id, title, and where each applies."""
    from specgen.rules.table import RULES
    from specgen.spec.models import parse_target
    from specgen.spec.targets import ALL_TARGETS

    targets = [parse_target(t) for t in ALL_TARGETS]
    for r in RULES:  # where a rule applies comes from the rule's own predicate, not a table
        by_backend: dict[str, list[str]] = {}
        for t in targets:
            if r.applies(t):
                by_backend.setdefault(t.backend.value, []).append(t.arch)
        where = "; ".join(f"{b} {', '.join(archs)}" for b, archs in by_backend.items()) or "no target"
        out.print(f"{r.id:8} {r.title}  [{where}]", markup=False)


@app.command()
def version() -> None:
    """Print the specgen version."""
    out.print(__version__)


def main() -> None:
    app()
from specgen import cli_perf  # noqa: E402,F401  (registers `bench` and `tune` on app)
