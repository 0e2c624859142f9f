"""Names a spec gives to generated code: the kernel's name (a module, a function, a torch op) and each
epilogue argument's name (a launcher parameter, a kernel parameter and the locals derived from it).

A name is refused at load when it is not a plain identifier, starts with two underscores (dunders,
the package's `__init__`), is a Python keyword or soft keyword, is a name the generated code uses
itself (its imports, constants, private helpers, locals), or derives a name that collides with one
of those or with another argument's names. So every name that passes renders a module that compiles and computes
what the spec says: generated code never has to prefix its own identifiers.

`RESERVED` is checked mechanically: tests/test_hardening_names.py tokenizes every rendered catalogue
module (and variants with every epilogue op and schedule) and fails when a template emits an
identifier that is neither derived from a spec name nor listed here.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection, Iterable
from types import ModuleType

from specgen.kinds.lineup import parts

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 64



# The shared host code's own (templates/gemm/torch/, templates/gemm/jax/, the runtime imports and the builtins the
# launchers call); each design adds its modules' names (specgen/kinds/<kind>/designs/<design>/names.py).
_SHARED_MODULE_NAMES = frozenset({"annotations", "torch", "register_custom_op", "SPEC", "METADATA", "RUNTIME_ABI", "a", "b", "float", "range", "type", "AttributeError", "ImportError", "IndexError", "TypeError", "ValueError", "_validate", "_check", "_run", "_fake", "_op", "_launcher"})
_SHARED_RESERVED = frozenset({"specgen", "guards", "out", "device", "batch", "dtype", "result", "ok", "_", "key",
                              "stage"})  # stage: the guards' keyword in _validate (`matrix(..., stage=False)`)


def _design_names() -> list[ModuleType]:
    """Each design's names.py, in registry order (a design without one uses only shared names)."""
    return [m for _, m in parts("names", of="designs")]


_DESIGN_NAMES = _design_names()
# Names the generated modules bind or read at their top level: a kernel's name becomes a module-level
# function and must not replace one of them.
MODULE_NAMES: frozenset[str] = _SHARED_MODULE_NAMES.union(*(m.MODULE_NAMES for m in _DESIGN_NAMES))
# Every other identifier the generated code uses: kernel parameters and locals, launcher locals,
# keyword arguments of the calls it makes. An epilogue argument becomes a parameter of the kernel and
# of each launcher function, so its name (and each name derived from it) must avoid all of them.
RESERVED: frozenset[str] = MODULE_NAMES | _SHARED_RESERVED.union(*(m.RESERVED for m in _DESIGN_NAMES))
# The module-level names a design derives from a kernel's name beside `_<name>_kernel` (a backward's kernels).
KERNEL_DERIVED: tuple[str, ...] = tuple(dict.fromkeys(p for m in _DESIGN_NAMES for p in getattr(m, "KERNEL_DERIVED", ())))


OPERANDS = frozenset({"a", "b", "out"})

# How the templates derive names from an epilogue argument `x` (each design's, in registry order): every
# argument is held to all of them, whatever its role.
ARG_DERIVED: tuple[str, ...] = tuple(d for m in _DESIGN_NAMES for d in m.ARG_DERIVED)

# Windows device names: a module file named so cannot be created there.
_DEVICE_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})


def _common(name: str) -> str | None:
    if not IDENTIFIER.fullmatch(name):
        return f"{name!r} is not an identifier (a letter or '_', then letters, digits or '_')"
    if name.startswith("__"):
        return f"{name!r} starts with '__': such names (dunders like __init__) belong to Python and the package"
    if len(name) > MAX_NAME:
        return f"a name has at most {MAX_NAME} characters (got {len(name)})"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"{name!r} is a Python keyword"
    return None


def derived_names(name: str) -> list[str]:
    return [pattern.format(name) for pattern in ARG_DERIVED]


def check_argument_names(names: Iterable[str], operands: Collection[str], taken: str) -> None:
    """Refuse (ValueError) an epilogue argument named like one of the entry's `operands` (`taken` says so, with
    `{}` for the name), two arguments of one name (two ops bringing the same `bias` or `scale_a`), and two whose
    derived names collide: each kind's spec model runs it over its runtime arguments."""
    seen: set[str] = set()
    owner: dict[str, str] = {}  # every name an argument brings into the generated code -> that argument
    for name in names:
        if name in operands:
            raise ValueError(taken.format(name))
        if name in seen:
            raise ValueError(f"two epilogue arguments are named '{name}'; give one op a `name`")
        seen.add(name)
        for n in [name, *derived_names(name)]:
            if n in owner and owner[n] != name:
                raise ValueError(f"epilogue arguments '{owner[n]}' and '{name}' both bring the name '{n}' "
                                 "into the generated kernel; rename one (give its op a `name`)")
            owner[n] = name


def arg_name_problem(name: str) -> str | None:
    """Why an epilogue argument may not be called `name`, or None."""
    problem = _common(name)
    if problem:
        return problem
    if name in OPERANDS:
        return None  # the kind's spec model says that an operand has this name, with the way out
    if name in RESERVED:
        return f"{name!r} is a name the generated kernel or launcher uses itself"
    for derived in derived_names(name):
        if derived in RESERVED:
            return f"{name!r} derives {derived!r}, which the generated code uses itself"
    return None


def kernel_name_problem(name: str) -> str | None:
    """Why a kernel may not be called `name` (a module file, a function and a torch op), or None."""
    problem = _common(name)
    if problem:
        return problem
    derived = (f"_{name}_kernel", f"{name}_jax", f"{name}_jax_torch", *(p.format(name) for p in KERNEL_DERIVED))
    if any(n in MODULE_NAMES for n in (name, *derived)):
        return f"{name!r} is a name the generated module uses itself (an import, a constant or a builtin)"
    if name.lower() in _DEVICE_NAMES:
        return f"{name!r} is a device name on Windows: no file can be called {name}.py there"
    return None


def check_arg_name(name: str) -> str:
    problem = arg_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def check_kernel_name(name: str) -> str:
    problem = kernel_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name
