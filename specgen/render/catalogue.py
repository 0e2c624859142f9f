"""Render a set of loaded specs: check them (resolving each (spec, target) once), let each target's
design render its modules from those resolutions, and write the lot through writer.py. A module whose
targets fail check is refused and its old output kept; the spec's other modules still render."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specgen import __version__
from specgen.check import Diagnostic, check_specs, failing_targets
from specgen.designs import design_for
from specgen.render.writer import WriteReport, owned_files, write_outputs
from specgen.resolve import resolve
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import Backend

PACKAGE_INIT = '"""The rendered specgen catalogue: `specgen render` writes this package; do not edit."""\n'


def render_triton_module(loaded: LoadedSpec, targets: list[Target]) -> str:
    """The Triton module of one spec (tests and tools that render outside the catalogue)."""
    design = design_for(loaded.spec.kind, Backend.triton)
    assert design is not None
    resolved = {str(t): resolve(loaded.spec, t) for t in targets}
    (text,) = design.render(loaded, targets, resolved).values()
    return text


@dataclass
class RenderResult:
    diagnostics: list[Diagnostic]
    refused: list[str] = field(default_factory=list)  # specs with a module refused (its targets fail check)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (spec, target, reason)
    report: WriteReport = field(default_factory=WriteReport)


def render_catalogue(specs: list[LoadedSpec], out_dir: Path, check: bool = False) -> RenderResult:
    checked = check_specs(specs)
    failing = failing_targets(checked.diagnostics)
    result = RenderResult(checked.diagnostics)
    files: dict[str, str] = {"__init__.py": PACKAGE_INIT}
    kernels: dict[str, object] = {}
    refused: set[str] = set()
    refused_paths: set[str] = set()
    for ls in specs:
        by_backend: dict[Backend, list[Target]] = {}
        for t in ls.spec.targets:
            by_backend.setdefault(t.backend, []).append(t)
        entry: dict[str, str] = {}
        for backend, targets in by_backend.items():
            design = design_for(ls.spec.kind, backend)
            if design is None:
                reason = f"specgen {__version__} has no {backend} renderer yet (checked only)"
                for t in targets:
                    result.skipped.append((ls.name, str(t), reason))
                    entry[str(t)] = f"skipped: {reason}"
                continue
            for rel, module_targets in design.modules(ls.spec, targets).items():
                if any((ls.name, str(t)) in failing for t in module_targets):
                    refused.add(ls.name)  # this module only: the spec's other modules still render
                    refused_paths.add(rel)
                    continue
                resolved = {str(t): checked.resolved[(ls.name, str(t))] for t in module_targets}
                files.update(design.render(ls, module_targets, resolved))
                files.setdefault(f"{backend.value}/__init__.py", f'"""Rendered {backend.value} kernels."""\n')
                for t in module_targets:
                    entry[str(t)] = rel
        if ls.name not in refused:
            kernels[ls.name] = {"spec_file": ls.file, "spec_hash": ls.spec_hash, "targets": entry}
    result.refused = sorted(refused)
    # keep what the refused modules rendered before: losing it helps nobody
    for rel in owned_files(out_dir):
        if rel in refused_paths and (out_dir / rel).exists():
            files[rel] = (out_dir / rel).read_text()
    manifest = {"specgen_version": __version__, "kernels": dict(sorted(kernels.items()))}
    result.report = write_outputs(out_dir, files, manifest, check)
    return result
