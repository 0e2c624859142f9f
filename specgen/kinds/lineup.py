"""The kernel kinds' line-up and the one way the core finds their parts.

`KINDS` holds one line per kind package; `DESIGN_PACKAGES` every kind's designs in order. A kind or a
design is a package whose parts are modules of fixed names beside its `__init__.py`, and `parts` is the
only place the core looks them up:

    a kind's parts      spec (its spec model: SPEC_MODEL), rules (the rules all its designs share:
                        RULES), problem (shapes, inputs, flops and peers for bench and tune)
    a design's parts    design (its DESIGN), rules (its own RULES), names (its modules' identifiers)

This module and the kind packages import nothing of specgen but each other, so that spec validation can
read the designs' names without importing a design (designs import the spec models)."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from specgen.kinds import gemm, grouped

KINDS = (gemm, grouped)
DESIGN_PACKAGES: tuple[str, ...] = tuple(p for kind in KINDS for p in kind.DESIGN_PACKAGES)

KIND_PARTS = ("spec", "rules", "problem")
DESIGN_PARTS = ("design", "rules", "names")


def parts(part: str, *, of: str) -> list[tuple[str, ModuleType]]:
    """(kind, module) for each kind's (`of="kinds"`) or each design's (`of="designs"`) module named `part`,
    in line-up order; a package without that part is skipped."""
    if of not in ("kinds", "designs"):
        raise ValueError(f"parts of {of!r}: kinds or designs")
    wanted = KIND_PARTS if of == "kinds" else DESIGN_PARTS
    if part not in wanted:
        raise ValueError(f"{part!r} is not a part of {of} (they have {', '.join(wanted)})")
    packages = ([(k.KIND, k.__name__) for k in KINDS] if of == "kinds"
                else [(k.KIND, p) for k in KINDS for p in k.DESIGN_PACKAGES])
    return [(kind, m) for kind, p in packages if (m := part_of(p, part)) is not None]


_FOUND: dict[str, ModuleType] = {}  # parts found so far (check asks for them once per config)


def part_of(package: str, part: str) -> ModuleType | None:
    """A kind's or a design's part by its package's name, or None where it has none."""
    name = f"{package}.{part}"
    found = _FOUND.get(name)
    if found is not None:
        return found
    try:
        found = _FOUND[name] = import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:  # the part exists but imports something missing: that is its error, not absence
            raise
        return None
    return found


def kind_part(kind: str, part: str) -> ModuleType | None:
    """One kind's part (its `problem`, say), or None where it has none."""
    if part not in KIND_PARTS:
        raise ValueError(f"{part!r} is not a part of kinds (they have {', '.join(KIND_PARTS)})")
    package = next((k.__name__ for k in KINDS if kind == k.KIND), None)
    if package is None:
        raise ValueError(f"no kind {kind!r} (the kinds: {', '.join(k.KIND for k in KINDS)})")
    return part_of(package, part)
