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

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 64

# Names the generated module binds or reads at its top level (imports, constants, the builtins its
# functions call): a kernel's name becomes a module-level function and must not replace one of them.
MODULE_NAMES: frozenset[str] = frozenset({
    "annotations", "torch", "triton", "tl", "descriptor", "register_custom_op", "TritonLauncher",
    "SPEC", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "CONFIGS", "METADATA", "RUNTIME_ABI", "a", "b",
    "float", "range", "type", "AttributeError", "ImportError", "TypeError", "ValueError", "_g", "_tile_coords",
    "_tanh", "_validate", "_check", "_run", "_fake", "_op", "_launcher", "_CONSTEXPRS",
    "VARIANT_CONFIGS", "_VARIANT_CONSTEXPRS",
})

# Every other identifier the generated code uses: kernel parameters and locals, launcher locals,
# keyword arguments of the calls it makes. An epilogue argument becomes a parameter of the kernel and
# of each launcher function, so its name (and each name derived from it) must avoid all of them.
RESERVED: frozenset[str] = MODULE_NAMES | frozenset({
    "specgen", "guards", "FAST_MATH", "NUM_SMS", "BATCH", "M", "N", "K", "K_b", "out", "a_desc",
    "b_desc", "out_desc", "a_ptr", "b_ptr", "out_ptr", "a_base", "b_base", "out_base", "a_ptrs",
    "b_ptrs", "out_ptrs", "stride_a", "stride_b", "stride_ab", "stride_bb", "stride_ob", "stride_om",
    "sa", "sb", "so", "tile_id", "num_pid_m", "num_pid_n", "per_group", "first_m", "group_rows",
    "pid_m", "pid_n", "pid_b", "work", "tiles_per_batch", "offs_m", "offs_n", "offs_k", "mask_m",
    "mask_n", "k", "k_in", "off_m", "off_n", "off_k", "acc", "half", "halves", "x", "tiles", "key",
    "device", "batch", "batch_b", "ok", "result", "_", "mask", "other", "dtype", "input_precision",
    "out_dtype", "do_not_specialize", "flatten", "is_pure", "pack", "persistent", "tma",
    "variant", "block_m", "block_n", "constexprs", "a_box", "b_box", "out_box",
})

OPERANDS = frozenset({"a", "b", "out"})

# How the templates derive names from an epilogue argument `x`: its pointer, the vector loaded from it,
# a residual's batch-offset base, tile, strides and host stride tuple (templates/triton/*.jinja,
# specgen/render/triton.py). Every argument is held to all of them, whatever its role.
ARG_DERIVED: tuple[str, ...] = ("{}_ptr", "{}_v", "{}_base", "{}_tile", "stride_{}m", "stride_{}b", "s_{}")

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


def arg_name_problem(name: str) -> str | None:
    """Why an epilogue argument may not be called `name`, or None."""
    problem = _common(name)
    if problem:
        return problem
    if name in OPERANDS:
        return None  # GemmSpec says that an operand has this name, with the way out
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
    if name in MODULE_NAMES or f"_{name}_kernel" in MODULE_NAMES:
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
