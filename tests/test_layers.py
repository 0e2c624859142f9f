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
# where those names are allowed to stand. spec/models.py holds the generic parts only: the designs own their
# option sections (designs/<design>/options.py), a kind its own sections (kinds/<kind>/sections.py), and a
# kind's spec model lists them (tests/test_spec.py pins that).
CORE = ["cli.py", "cli_common.py", "cli_perf.py", "check.py", "check_batch.py", "compile.py", "resolve.py", "resolved.py", "registry.py", "docs.py",
        "spec/models.py",
        "render/catalogue.py", "render/env.py", "render/writer.py", "design.py", "envelope/budget.py",
        "rules/base.py", "rules/hooks.py", "rules/table.py", "kinds/lineup.py", "spec/file.py", "spec/load.py", "spec/names.py", "spec/positions.py",
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
    assert "import_module" not in (PKG / "registry.py").read_text() + (PKG / "rules" / "table.py").read_text() + (
        PKG / "spec" / "names.py").read_text() + (PKG / "design.py").read_text(), "parts are found by kinds/lineup.py's parts()"
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
# "tpu_v7x", "wgmma"): only the kinds (their designs, and the spec models that list the designs' option
# sections), the runtime their modules import and the target table may hold one; everything else asks the
# registry or reads the target's row.
LITERAL = re.compile(r"^((triton|cute|pallas)(:\w+)?|sm_?\d{2,3}a?|tpu\w*|gpu_sm\d+|wgmma|tcgen05|mxu)$")
MAY_NAME_BACKENDS = ("specgen.kinds", "specgen.runtime", "specgen.targets")


def test_no_backend_literal_outside_the_designs_runtime_and_tables():
    hits = []
    for m, path in _modules().items():
        if m.startswith(MAY_NAME_BACKENDS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LITERAL.match(node.value):
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert hits == []


def _code_words(path: Path) -> list[tuple[int, str]]:
    """The identifiers, import paths and string constants of a file's code (its docstrings left out)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    words: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            words.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            words.append((node.lineno, node.name))
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.append((node.lineno, node.module))
    return words


def test_the_core_names_no_kind():
    """A second kind is a folder: the core's code names no kind (the kinds' line-up lists their packages)."""
    kind_names = [p.name for p in (PKG / "kinds").iterdir() if (p / "__init__.py").exists() and p.name != "__pycache__"]
    assert "gemm" in kind_names
    word = re.compile("|".join(kind_names), re.IGNORECASE)
    hits = [f"{p.relative_to(ROOT)}:{n} {w!r}" for m, p in _core_modules().items() if m != "specgen.kinds.lineup"
            for n, w in _code_words(p) if word.search(w)]
    assert hits == []


def test_a_kinds_rules_concern_that_kind_only():
    """A kind's shared rules and its designs' rules are that kind's: a rule concerns exactly the kinds whose parts
    list it (one that a second kind reuses, the same `Rule`, concerns both); rules/hooks.py's concern every kind."""
    from specgen.kinds.lineup import parts
    from specgen.rules import hooks
    from specgen.rules.table import RULES

    listed: dict[str, set[str]] = {}
    for of in ("kinds", "designs"):
        for kind, module in parts("rules", of=of):
            ids = {r.id for r in module.RULES}
            assert ids
            for rule_id in ids:
                listed.setdefault(rule_id, set()).add(kind)
    assert all(set(r.kinds) == listed[r.id] for r in RULES if r.id in listed)
    assert all(r.kinds == () for r in RULES if r.id in {h.id for h in hooks.RULES})


def test_each_kind_names_its_spec_model_and_parts_are_asked_by_name():
    from typing import get_args

    from specgen.kinds.lineup import KINDS, kind_part, parts
    from specgen.kinds.models import SPEC_MODELS

    assert [k.KIND for k in KINDS] == [get_args(m.model_fields["kind"].annotation)[0] for m in SPEC_MODELS]
    assert kind_part("gemm", "rules") is not None
    with pytest.raises(ValueError, match="no kind 'attention'"):
        kind_part("attention", "rules")
    with pytest.raises(ValueError, match="'compile' is not a part of designs"):
        parts("compile", of="designs")
    with pytest.raises(ValueError, match="parts of 'design': kinds or designs"):
        parts("rules", of="design")


# Test-only code under specgen/: each kind's test kit (its float64 reference and shared test bases). It imports
# torch and pytest; nothing else under specgen/ may import it, lazily or not, so that check, render and
# compile never load a test dependency.
TESTING = re.compile(r"^specgen\.kinds\.\w+\.testing(\.|$)")


def test_only_tests_import_the_kinds_test_kits():
    modules = _modules()
    kits = [m for m in modules if TESTING.match(m)]
    assert "specgen.kinds.gemm.testing.numerics" in kits and "specgen.kinds.gemm.testing.reference" in kits
    for m, path in modules.items():
        if TESTING.match(m):
            continue
        found = {i for i in _imports(path, everywhere=True) if TESTING.match(i)}
        assert not found, f"{path.relative_to(ROOT)} imports the test kit {sorted(found)}"


def test_torch_and_pytest_stay_out_of_the_check_and_render_path():
    """pytest only in the test kits; torch at the top level only there and in the runtime the generated
    modules import (and the compile hooks, lazily)."""
    for m, path in _modules().items():
        tree = ast.parse(path.read_text())
        top = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                top.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                top.add(node.module.split(".")[0])
        everywhere = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        everywhere |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        if not TESTING.match(m):
            assert "pytest" not in everywhere, f"{path.relative_to(ROOT)} imports pytest"
        if "torch" in top:
            assert TESTING.match(m) or m.startswith("specgen.runtime"), f"{path.relative_to(ROOT)} imports torch"


# The core that resolves and layers a spec: it reads no field of a kind's spec (the GEMM's `tile`, `pipeline`,
# `when.m_max`, ...): the kind's model declares its sections (kinds/<kind>/sections.py) and its design base
# reads them behind the protocol's hooks (`stages`, `accumulator_registers`, `tune_space`'s `when`).
NO_KIND_FIELDS = ["spec/models.py", "resolve.py", "resolved.py", "design.py", "tune/space.py"]


def _kind_fields() -> set[str]:
    """Every field of each kind's spec model and of the sections it is built from, but those LayeredSpec's
    layering names for every kind (name, kind, targets, per_target, variants, a variant's `when`)."""
    from pydantic import BaseModel

    from specgen.kinds.models import SPEC_MODELS

    generic = {"name", "kind", "description", "targets", "per_target", "variants", "when"}
    fields: set[str] = set()
    todo: list[type[BaseModel]] = list(SPEC_MODELS)
    seen: set[type[BaseModel]] = set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, f in model.model_fields.items():
            fields.add(name)
            for t in (f.annotation, *getattr(f.annotation, "__args__", ())):
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
    return fields - generic


def test_the_core_reads_no_field_of_a_kinds_spec():
    fields = _kind_fields()
    assert {"tile", "pipeline", "cluster", "schedule", "ab_stages", "m_max", "accumulator"} <= fields
    hits = []
    for rel in NO_KIND_FIELDS:
        tree = ast.parse((PKG / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in fields:
                hits.append(f"specgen/{rel}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1:
                key = node.args[1]
                if isinstance(key, ast.Constant) and key.value in fields:
                    hits.append(f"specgen/{rel}:{node.lineno} getattr(..., {key.value!r})")
    assert hits == []


def _core_modules() -> dict[str, Path]:
    """Every module of the shared core: all of specgen/ but the kinds (their designs included), the runtime
    their generated modules import, and the target table."""
    return {m: p for m, p in _modules().items()
            if not m.startswith(("specgen.kinds.", "specgen.runtime")) and m not in ("specgen.targets", "specgen.spec.targets")}


def test_no_core_module_names_a_backend_in_its_code():
    """Beyond CORE's line check: in every core module's code (identifiers, imports, strings; docstrings and
    comments may cite a backend's source), no backend, compiler or MMA family."""
    hits = [f"{p.relative_to(ROOT)}:{n} {w!r}" for m, p in _core_modules().items()
            for n, w in _code_words(p) if BACKEND_WORDS.search(w)]
    assert hits == []
