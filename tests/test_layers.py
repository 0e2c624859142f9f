"""The shape of specgen/: the shared core names no backend, arch or MMA family (designs do, in their
packages; the target table names its rows); imports run one way, with no cycle; no file is over 600
lines. Read from the source, as text and through `ast`: nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "specgen"

# The shared core: spec handling, resolve, check, render, compile, the CLI, the registry and the rules
# every design shares. The target table (targets.py) and the kinds' line-ups (kinds/<kind>/__init__.py) are
# where those names are allowed to stand; the spec models' per-backend option sections are the spec
# language itself (spec/models.py).
CORE = ["cli.py", "cli_common.py", "cli_perf.py", "check.py", "compile.py", "resolve.py", "resolved.py", "registry.py", "docs.py",
        "render/catalogue.py", "render/env.py", "render/writer.py", "design.py", "envelope/budget.py",
        "rules/base.py", "rules/table.py", "spec/file.py", "spec/load.py", "spec/names.py", "spec/positions.py",
        "spec/targets.py", "spec/epilogue.py"]
BACKEND_WORDS = re.compile(r"triton|cute|cutlass|pallas|wgmma|tcgen05|sm90|sm100|mosaic|mgpu", re.IGNORECASE)


def test_the_core_names_no_backend_arch_or_mma_family():
    for rel in CORE:
        for n, line in enumerate((PKG / rel).read_text().splitlines(), 1):
            assert not BACKEND_WORDS.search(line), f"specgen/{rel}:{n} names a backend: {line.strip()}"


def _imports(path: Path, everywhere: bool = False) -> set[str]:
    """The specgen modules a file imports at its top level (not under TYPE_CHECKING, not in functions), or
    `everywhere`: lazy imports in functions and TYPE_CHECKING blocks too."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in (ast.walk(tree) if everywhere else tree.body):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specgen"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("specgen"))
    return found


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@pytest.mark.parametrize("everywhere", [False, True], ids=["top-level imports", "lazy and TYPE_CHECKING too"])
def test_no_import_cycle_under_specgen(everywhere: bool):
    """Not even through a function's lazy import or a type annotation's: the layers hold as written."""
    modules = _modules()
    graph = {m: {i for i in _imports(p, everywhere) if i in modules and i != m} for m, p in modules.items()}
    for m in modules:  # a module imports its parent packages first
        parts = m.split(".")
        graph[m] |= {".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules} - {m}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(n):], n]))
            if n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])


def test_the_registry_list_and_design_packages_import_nothing():
    """Spec validation reads each design's names.py through specgen.kinds: those must stay leaves (the
    kinds' line-up imports the kind packages, and nothing else)."""
    kinds = PKG / "kinds"
    assert _imports(kinds / "lineup.py") <= {"specgen.kinds", *(f"specgen.kinds.{p.name}" for p in kinds.iterdir())}
    leaves = [kinds / "__init__.py", *kinds.glob("*/__init__.py"), *kinds.glob("*/designs/__init__.py"), *kinds.glob("*/designs/*/__init__.py"),
              *kinds.glob("*/designs/*/names.py")]
    assert len(leaves) >= 10
    for path in leaves:
        assert not _imports(path), f"{path.relative_to(ROOT)} imports {_imports(path)}"


def test_the_core_imports_no_design_module():
    for rel in CORE:
        designs = {i for i in _imports(PKG / rel) if re.match(r"specgen\.kinds\.\w+\.designs\.", i)}
        assert not designs, f"specgen/{rel} imports {designs}: ask the registry"


def test_no_source_file_is_over_600_lines():
    for path in [*PKG.rglob("*.py"), *(ROOT / "templates").rglob("*.jinja")]:
        lines = len(path.read_text().splitlines())
        assert lines <= 600, f"{path.relative_to(ROOT)} has {lines} lines"


# A string constant that is a backend, a target, an arch or an MMA family ("cute", "triton:sm90", "sm_90a",
# "tpu_v7x", "wgmma"): only the designs, the runtime their modules import, the target table and the spec
# schema (whose option sections are named for backends) may hold one; everything else asks the registry
# or reads the target's row.
LITERAL = re.compile(r"^((triton|cute|pallas)(:\w+)?|sm_?\d{2,3}a?|tpu\w*|gpu_sm\d+|wgmma|tcgen05|mxu)$")
MAY_NAME_BACKENDS = ("specgen.kinds", "specgen.runtime", "specgen.targets", "specgen.spec.models")


def test_no_backend_literal_outside_the_designs_runtime_and_tables():
    hits = []
    for m, path in _modules().items():
        if m.startswith(MAY_NAME_BACKENDS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LITERAL.match(node.value):
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert hits == []
