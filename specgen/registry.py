"""The design registry: every design of the kinds' line-ups (specgen/kinds/lineup.py), keyed by (kind,
backend, MMA family). Resolve, check, render, compile and the CLI find a target's design here and call its hooks:
none of them names a backend, an arch or an MMA family.

A target is served by the rendering design whose key it matches and that says `serves(target)`; a
checked-only design (memory layout and rules, no module) answers where no rendering design does.
"""

from __future__ import annotations

from specgen.design import DesignBase, DesignKey
from specgen.kinds.lineup import parts
from specgen.targets import TARGETS, TargetInfo, target_info

__all__ = ["DESIGNS", "DesignBase", "by_key", "design_for", "designs_for", "rendering"]

DESIGNS: tuple[DesignBase, ...] = tuple(m.DESIGN for _, m in parts("design", of="designs"))


def _build() -> dict[DesignKey, DesignBase]:
    keyed: dict[DesignKey, DesignBase] = {}
    for d in DESIGNS:
        for key in d.keys:
            held = keyed.get(key)
            if held is not None and held.renders and d.renders:
                raise ValueError(f"designs {held.name} and {d.name} both render {key}: one key, one design")
            if held is None or (d.renders and not held.renders):
                keyed[key] = d
    return keyed


_BY_KEY = _build()
_FOR: dict[tuple[str, str], DesignBase | None] = {}


def by_key() -> dict[DesignKey, DesignBase]:
    """(kind, backend, MMA family) -> the design that answers for it."""
    return dict(_BY_KEY)


def design_for(kind: str, target: object) -> DesignBase | None:
    """The design that serves `target` (a Target, its TargetInfo row or "backend:arch") for `kind`."""
    info = target if isinstance(target, TargetInfo) else target_info(target)
    cache = (kind, info.name)
    if cache not in _FOR:
        found = [d for d in DESIGNS if (kind, info.backend, info.mma) in d.keys and d.serves(info)]
        _FOR[cache] = next((d for d in found if d.renders), found[0] if found else None)
    return _FOR[cache]


def designs_for(kind: str, targets: list) -> dict[DesignBase, list]:
    """The targets grouped by the design that serves each, in the targets' order."""
    out: dict[DesignBase, list] = {}
    for t in targets:
        d = design_for(kind, t)
        if d is None:
            raise ValueError(f"no design serves {t} for kind {kind!r}")
        out.setdefault(d, []).append(t)
    return out


def rendering(kind: str | None = None) -> list[DesignBase]:
    """The designs that render modules (of `kind`, when given), in registry order."""
    return [d for d in DESIGNS if d.renders and (kind is None or d.kind == kind)]


def served_targets(design: DesignBase) -> list[str]:
    """The table's targets a design answers for."""
    return [name for name, info in TARGETS.items() if design_for(design.kind, info) is design]
