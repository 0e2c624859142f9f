"""Render a set of loaded specs: check them (resolving each (spec, target) once), let each target's
design render its modules from those resolutions, and write the lot through writer.py. A module whose
targets fail check is refused and its old output kept; the spec's other modules still render."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specgen import __version__
from specgen.check import Diagnostic, Settle, check_specs, failing_targets
from specgen.registry import designs_for, rendering
from specgen.render.specs import SPECS_INIT, check_layout, spec_module_path, spec_module_text
from specgen.render.writer import (
    GENERATED_MARK,
    RenderError,
    WriteReport,
    locked,
    read_manifest,
    write_outputs,
)
from specgen.resolve import resolve
from specgen.settle import SettleStats
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target

PACKAGE_INIT = (f"{GENERATED_MARK} {__version__}; do not edit.\n"
                '"""The rendered specgen catalogue: `specgen render` writes this package."""\n')
BACKEND_INIT = f"{GENERATED_MARK} {__version__}; do not edit.\n" + '"""Rendered {backend} kernels."""\n'
PROJECT_MARKERS = ("pyproject.toml", ".git", "setup.py", "setup.cfg")


def render_module(loaded: LoadedSpec, targets: list[Target]) -> str:
    """The one module of a spec's `targets` (tests and tools that render outside the catalogue), standalone:
    its SPEC inline, where the catalogue's modules import theirs from `specs/<kernel>.py`."""
    (text,) = render_modules(loaded, targets).values()
    return text


def render_modules(loaded: LoadedSpec, targets: list[Target]) -> dict[str, str]:
    """{path: text} of one spec's modules for `targets` (one design), resolved as check resolves them
    (tests and tools that render outside the catalogue), each standalone (SPEC inline)."""
    (design,) = designs_for(loaded.spec.kind, targets)
    return design.render(loaded, targets, {str(t): resolve(loaded.spec, t) for t in targets})


def rendered_backends() -> list[str]:
    """The backends some design renders: the folders an --out package gets."""
    return sorted({d.backend.value for d in rendering()})


@dataclass
class RenderResult:
    diagnostics: list[Diagnostic]
    refused: list[str] = field(default_factory=list)  # spec names that failed check
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (spec, target, reason)
    report: WriteReport = field(default_factory=WriteReport)
    settled: SettleStats = field(default_factory=SettleStats)  # check's settle step, for the CLI to say


def project_root(path: Path) -> Path | None:
    """The nearest folder at or above `path` that holds a project marker (pyproject.toml, .git, ...)."""
    for folder in [path, *path.parents]:
        if any((folder / m).exists() for m in PROJECT_MARKERS):
            return folder
    return None


def spec_ref(path: Path, out_dir: Path) -> str:
    """How headers and the manifest name a spec file or folder, the same from any working directory:
    relative to the project root of --out (else of the spec, else --out's parent), in / form."""
    out = out_dir.resolve()
    target = path.resolve()
    root = project_root(out) or project_root(target if target.is_dir() else target.parent) or out.parent
    return Path(os.path.relpath(target, root)).as_posix()


def _in_scope(ref: str | None, scopes: list[str] | None) -> bool:
    """Whether an output's spec file lies in what this render was given (None: everything, --prune)."""
    if scopes is None:
        return True
    if ref is None:
        return False
    return any(s == "." or ref == s or ref.startswith(s.rstrip("/") + "/") for s in scopes)


def _finds(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def shadowed_module(out_dir: Path, backends: list[str]) -> str | None:
    """The module an --out package would shadow: `--out .` puts a backend's folder where `import <backend>` finds
    it first; `--out torch` makes a package named `torch`. Found with find_spec, which imports nothing."""
    out = out_dir.resolve()
    roots = {Path.cwd().resolve()} | {Path(p or ".").resolve() for p in sys.path}
    if out in roots:  # its backend folders become top-level packages: name one that is installed
        return next((b for b in backends if _finds(b)), backends[0])
    name = out.name
    if out.parent not in roots or not name.isidentifier():  # imported as a subpackage: no clash
        return None
    frameworks = {m for d in rendering() for m in d.compiler_modules}
    if name in {*backends, *frameworks, "numpy", "specgen"} or name in sys.stdlib_module_names:
        return name
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    # an installed distribution (not a source folder on the path, such as an editable checkout's)
    places = [spec.origin or "", *(spec.submodule_search_locations or [])]
    installed = any(part in ("site-packages", "dist-packages") for p in places for part in Path(p).parts)
    return name if installed and not any(Path(p).resolve() == out for p in places if p) else None


def render_catalogue(specs: list[LoadedSpec], out_dir: Path, check: bool = False,
                     scope: list[Path] | None = None, settle: Settle = "model") -> RenderResult:
    """Render `specs` into out_dir. Outputs the manifest owns that no spec produces anymore are removed
    when their spec file lies in `scope` (the files and folders render was given); scope None removes
    every such output (`--prune`). `settle`: who decides near-boundary verdicts (check.py's `check_specs`)."""
    check_layout(rendered_backends())
    shadow = shadowed_module(out_dir, rendered_backends())
    if shadow:
        raise RenderError(f"--out {out_dir} would make a package that shadows the `{shadow}` module "
                          f"(`import {shadow}` would find it); choose a folder like `generated` or `mypkg/kernels`")
    with locked(out_dir, create=not check):
        return _render_locked(specs, out_dir, check, scope, settle)


def _render_locked(specs: list[LoadedSpec], out_dir: Path, check: bool, scope: list[Path] | None,
                   settle: Settle) -> RenderResult:
    old = read_manifest(out_dir)  # validated before anything is written
    scopes = None if scope is None else [spec_ref(p, out_dir) for p in scope]
    if not specs:  # inputs that came out empty never remove what render wrote before
        scopes = []
    checked = check_specs(specs, settle=settle)  # resolves each (spec, target) once; designs render from those
    failing = failing_targets(checked.diagnostics)
    result = RenderResult(checked.diagnostics, settled=checked.settled)
    files: dict[str, str] = {"__init__.py": PACKAGE_INIT}
    sources: dict[str, str] = {}
    kernels: dict[str, dict] = {}
    refused: set[str] = set()
    refused_paths: set[str] = set()
    refs: dict[str, str] = {}  # one lookup per spec file, not per kernel
    # each kernel's modules: those rendered now, and those refused (their old text kept, below)
    fresh: dict[str, list[str]] = {}
    stale_kept: dict[str, list[str]] = {}
    for ls in specs:
        ref = refs.get(ls.file) or refs.setdefault(ls.file, spec_ref(Path(ls.file), out_dir))
        placed = dataclasses.replace(ls, file=ref)  # headers name the spec the same from any folder
        entry: dict[str, str] = {}
        for design, targets in designs_for(ls.spec.kind, ls.spec.targets).items():
            modules = design.modules(ls.spec, targets) if design.renders else {}
            served = {str(t) for ts in modules.values() for t in ts}
            for t in targets:  # checked-only designs, and targets a design leaves out, are not rendered
                if str(t) not in served:
                    reason = f"specgen {__version__} has no {t.backend} renderer for {t.arch} yet (checked only)"
                    result.skipped.append((ls.name, str(t), reason))
                    entry[str(t)] = f"skipped: {reason}"
            backend = design.backend
            for rel, module_targets in modules.items():
                if any((ls.name, str(t)) in failing for t in module_targets):
                    refused.add(ls.name)  # this module only: the spec's other modules still render
                    refused_paths.add(rel)
                    if rel in old.files and (out_dir / rel).is_file():
                        stale_kept.setdefault(ls.name, []).append(rel)
                    continue
                resolved = {str(t): checked.resolved[(ls.name, str(t))] for t in module_targets}
                fresh.setdefault(ls.name, []).append(rel)
                for path, text in design.render(placed, module_targets, resolved, shared_spec=True).items():
                    files[path] = text
                    sources[path] = ref
                files.setdefault(f"{backend.value}/__init__.py", BACKEND_INIT.format(backend=backend.value))
                for t in module_targets:
                    entry[str(t)] = rel
        if ls.name in refused and ls.name in old.kernels and not entry:
            kernels[ls.name] = old.kernels[ls.name]  # wholly refused: its old entry goes with its old files
        else:
            kernels[ls.name] = {"spec_file": ref, "spec_hash": ls.spec_hash, "targets": entry}
    result.refused = sorted(refused)
    for name, path in _share_specs(specs, out_dir, old.files, refs, fresh, stale_kept, files, sources).items():
        kernels[name] = {**kernels[name], "spec_module": path}
    # keep what the refused modules rendered before: losing it helps nobody
    for rel in old.files:
        if rel in refused_paths and (out_dir / rel).is_file():
            files[rel] = (out_dir / rel).read_text()
            if rel in old.sources:
                sources[rel] = old.sources[rel]
    # kernels of spec files outside this render's scope stay listed, as their files stay owned
    kept = {name: e for name, e in old.kernels.items()
            if name not in kernels and not _in_scope(e.get("spec_file"), scopes)}
    manifest = {"specgen_version": __version__, "kernels": dict(sorted((kept | kernels).items()))}
    result.report = write_outputs(out_dir, files, manifest, check, old=old, sources=sources,
                                  removable=lambda ref: _in_scope(ref, scopes))
    return result


def _share_specs(specs: list[LoadedSpec], out_dir: Path, old_files: list[str], refs: dict[str, str],
                 fresh: dict[str, list[str]], kept: dict[str, list[str]], files: dict[str, str],
                 sources: dict[str, str]) -> dict[str, str]:
    """Each kernel's spec module (`specs/<kernel>.py`), which its backends' modules import SPEC from: rendered
    from the spec when some module of the kernel rendered; when every one was refused (their old text kept),
    its old spec module is kept with them. Returns {kernel: its spec module's path}."""
    shared: dict[str, str] = {}
    for ls in specs:
        modules = fresh.get(ls.name, []) + kept.get(ls.name, [])
        if not modules:
            continue
        path = spec_module_path(ls.name)
        if path in files:
            raise RenderError(f"kernel {ls.name!r}: a design renders a module at {path}, the kernel's shared spec "
                              "module (nothing was written)")
        if fresh.get(ls.name):
            files[path] = spec_module_text(ls.name, refs[ls.file], ls.spec_hash, ls.spec.model_dump(mode="json"),
                                           modules)
        elif path in old_files and (out_dir / path).is_file():
            files[path] = (out_dir / path).read_text()
        else:
            continue  # modules rendered before shared spec modules carry their SPEC inline
        sources[path] = refs[ls.file]
        shared[ls.name] = path
        files.setdefault(f"{path.rsplit('/', 1)[0]}/__init__.py", SPECS_INIT)
    return shared
