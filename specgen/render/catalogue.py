"""Render a set of loaded specs: check them, plan each servable target, render each backend's module,
and write the lot through writer.py. Specs that fail check are refused and their old outputs kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specgen import __version__
from specgen.check import Diagnostic, check_all, failing_targets
from specgen.designs.gemm_cute_sm90 import DESIGN as CUTE_SM90
from specgen.designs.gemm_cute_sm90 import render_cute_module
from specgen.plan.triton import plan_triton
from specgen.render.env import environment
from specgen.render.triton import triton_context
from specgen.render.writer import WriteReport, owned_files, write_outputs
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.spec.targets import Backend

PACKAGE_INIT = '"""The rendered specgen catalogue: `specgen render` writes this package; do not edit."""\n'


def render_triton_module(loaded: LoadedSpec, targets: list[Target]) -> str:
    return environment().get_template("triton/gemm.py.jinja").render(triton_context(plan_triton(loaded, targets)))


# backend -> (module renderer, output folder). A backend without an entry is checked but not rendered.
RENDERERS: dict[Backend, Callable[[LoadedSpec, list[Target]], str]] = {
    Backend.triton: render_triton_module,
    Backend.cute: render_cute_module,
}
# backend -> which of its targets it renders today (the others stay checked only).
SERVES: dict[Backend, Callable[[Target], bool]] = {Backend.cute: CUTE_SM90.serves}


@dataclass
class RenderResult:
    diagnostics: list[Diagnostic]
    refused: list[str] = field(default_factory=list)  # spec names that failed check
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (spec, target, reason)
    report: WriteReport = field(default_factory=WriteReport)


def module_path(backend: Backend, name: str) -> str:
    return f"{backend.value}/{name}.py"


def render_catalogue(specs: list[LoadedSpec], out_dir: Path, check: bool = False) -> RenderResult:
    diags = check_all(specs)
    failing = failing_targets(diags)
    result = RenderResult(diags)
    files: dict[str, str] = {"__init__.py": PACKAGE_INIT}
    kernels: dict[str, object] = {}
    refused: set[str] = set()
    for ls in specs:
        if any(spec == ls.name for spec, _ in failing):
            refused.add(ls.name)
            continue
        by_backend: dict[Backend, list[Target]] = {}
        for t in ls.spec.targets:
            by_backend.setdefault(t.backend, []).append(t)
        entry: dict[str, str] = {}
        for backend, targets in by_backend.items():
            renderer = RENDERERS.get(backend)
            serves = SERVES.get(backend, lambda t: True)
            unserved = [t for t in targets if renderer is None or not serves(t)]
            reason = f"specgen {__version__} has no {backend} renderer for this arch yet (checked only)"
            for t in unserved:
                result.skipped.append((ls.name, str(t), reason))
                entry[str(t)] = f"skipped: {reason}"
            targets = [t for t in targets if t not in unserved]
            if renderer is None or not targets:
                continue
            rel = module_path(backend, ls.name)
            files[rel] = renderer(ls, targets)
            files.setdefault(f"{backend.value}/__init__.py", f'"""Rendered {backend.value} kernels."""\n')
            for t in targets:
                entry[str(t)] = rel
        kernels[ls.name] = {"spec_file": ls.file, "spec_hash": ls.spec_hash, "targets": entry}
    result.refused = sorted(refused)
    if refused:  # keep what the refused specs rendered before: losing it helps nobody
        for rel in owned_files(out_dir):
            if any(rel == module_path(b, name) for b in RENDERERS for name in refused) and (out_dir / rel).exists():
                files[rel] = (out_dir / rel).read_text()
    manifest = {"specgen_version": __version__, "kernels": dict(sorted(kernels.items()))}
    result.report = write_outputs(out_dir, files, manifest, check)
    return result
