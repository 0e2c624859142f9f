"""`specgen compile`: compile rendered modules ahead of time, with no GPU, through each design's
compile hook (imported lazily: the hooks import their compilers, and the rendered modules import torch;
check/render never import this path).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from specgen.registry import design_for
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import target_info


@dataclass(frozen=True)
class Spills:
    """Local-memory spills read off a compiled kernel's SASS: STL / LDL instructions and their bytes
    (ptxas' "bytes spill stores / loads"). Any is a failed config: the reference kernels have none."""

    stores: int  # STL instructions
    loads: int  # LDL instructions
    store_bytes: int
    load_bytes: int

    @property
    def spilled(self) -> bool:
        return bool(self.stores or self.loads)

    def message(self, registers: int | None) -> str:
        at = "" if registers is None else f" at {registers} registers"
        return (f"spills {self.store_bytes} bytes ({self.stores} STL, {self.loads} LDL; "
                f"{self.load_bytes} bytes loaded){at}")


@dataclass(frozen=True)
class CompileResult:
    kernel: str
    target: str
    plan_smem: int
    compiler_smem: int | None
    seconds: float
    error: str = ""
    sass: dict[str, int] = field(default_factory=dict)  # opcode -> count (hooks that read SASS, with --sass)
    cache: str = ""  # the disk-cache entry the compile filled, where the backend keeps one
    cpu_seconds: float | None = None  # the compile's own CPU time, where the hook measures it
    variant: int | None = None  # which size-selected variant (None: the default config)
    # per-thread resources read off the cubin, where the hook reads them (with --sass): registers,
    # stack frame bytes, bytes of local-memory spill stores / loads (STL / LDL widths in the SASS)
    resources: dict[str, int] = field(default_factory=dict)
    # read off the compiled cubin by every hook that builds one (always, not only with --sass): the
    # registers per thread ptxas allocated and the local-memory spills; None where the compiler makes no
    # cubin here (a hook that lowers only). A spilling config carries its spills in `error` too (failed).
    registers: int | None = None
    spills: Spills | None = None

    @property
    def spilled(self) -> bool:
        return self.spills is not None and self.spills.spilled

    @property
    def ratio(self) -> float | None:
        return None if not self.compiler_smem else self.plan_smem / self.compiler_smem


class MissingModule(Exception):
    """A spec's rendered module is missing, or was rendered from another version of the spec."""


class ExportError(Exception):
    """An export hook refuses DIR or cannot write it: the message says why and what to do (no traceback).
    code 2: DIR itself is not a folder to export into (a usage error); 1: what DIR holds, or a write."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def compiler_message(e: BaseException) -> str:
    """One line from a compile failure: a CompilationError that reads "at 10:19:", the source lines,
    a caret, then what went wrong; keep the position and what went wrong (or the cause's message)."""
    lines = [line.rstrip() for line in str(e).splitlines()]
    caret = max((i for i, line in enumerate(lines) if line.strip() == "^"), default=0)
    detail = " ".join(line.strip() for line in lines[caret + 1 if caret else 1:] if line.strip())
    if not detail and e.__cause__ is not None:
        detail = f"{type(e.__cause__).__name__}: {e.__cause__}".splitlines()[0]
    head = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip()
    return f"{head} {detail}".strip()[:600]


def load_rendered(path: Path | str, name: str | None = None) -> ModuleType:
    """Import a rendered module from its file (any --out folder, importable as a package or not). A module
    inside a rendered package (folders holding `__init__.py`) is imported inside a fresh stand-in for that
    package, so that its relative import of SPEC (`specs/<kernel>.py`, render/specs.py) resolves."""
    path = Path(path)
    name = name or f"_specgen_rendered_{path.stem}"
    package = _stand_in_package(path, name)
    spec = importlib.util.spec_from_file_location(f"{package}.{name}" if package else name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _stand_in_package(path: Path, name: str) -> str | None:
    """The dotted package a module at `path` sits in, under a root named after `name` that stands for the
    topmost folder holding an `__init__.py` (its own `__init__.py` is not run); None outside a package."""
    folder, inner = path.absolute().parent, []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        inner.insert(0, folder.name)
        folder = folder.parent
    if not inner:
        return None
    root = f"_specgen_package_{name}"
    for key in [k for k in sys.modules if k == root or k.startswith(root + ".")]:
        del sys.modules[key]  # a fresh import each call, as for the module itself
    package = ModuleType(root)
    package.__path__ = [str(folder / inner[0])]
    package.__spec__ = importlib.machinery.ModuleSpec(root, None, is_package=True)
    package.__package__ = root
    sys.modules[root] = package
    return ".".join([root, *inner[1:]])


def _hook(ref: str) -> Callable:
    module, _, fn = ref.partition(":")
    return getattr(importlib.import_module(module), fn)


def compile_targets(ls: LoadedSpec, wanted: set[str]) -> list[Target]:
    """The spec's targets that some design renders a module for (only `wanted` ones, when given)."""
    found = []
    for t in ls.spec.targets:
        design = design_for(ls.spec.kind, t)
        if design is not None and design.renders and (not wanted or str(t) in wanted) and design.modules(ls.spec, [t]):
            found.append(t)
    return found


def compile_spec(ls: LoadedSpec, out_dir: Path, wanted: set[str], sass: bool = False,
                 backward: bool = True) -> Iterator[CompileResult]:
    """Compile each rendered module of a spec for each of its targets (only `wanted` ones, when given).
    `sass`: hooks that take a `sass` keyword count SASS opcodes too (the others ignore it). `backward` False: hooks
    that take a `backward` keyword compile a training module's forward only (no `<kernel>[role]` rows)."""
    for t in compile_targets(ls, wanted):
        design = design_for(ls.spec.kind, t)
        assert design is not None
        hook = _hook(design.compile_hook)
        takes = inspect.signature(hook).parameters
        options = ({"sass": True} if sass and "sass" in takes else {}) | ({"backward": False} if not backward and "backward" in takes else {})
        for rel in design.modules(ls.spec, [t]):
            path = out_dir / rel
            if not path.is_file():
                raise MissingModule(f"{path} is missing: run `specgen render` first")
            module = load_rendered(path)
            rendered = getattr(module, "METADATA", {}).get("spec_hash")
            if rendered != ls.spec_hash:  # compiling it would report a stale kernel under the current spec
                raise MissingModule(f"{path} was rendered from spec {rendered}, but {ls.file} is now spec "
                                    f"{ls.spec_hash}: run `specgen render` first")
            result = hook(module, target_info(t), **options)  # one result, or one per config (size-selected variants)
            yield from (result if isinstance(result, list) else [result])
