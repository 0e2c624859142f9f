"""Resolve once what check and the planners both need, per (spec, target).

`resolve(spec, target)` applies the target's `per_target` configuration, asks the registry for the
target's design, and takes from the design's hooks its pipeline depths (`stages`: the kind's design base
turns `auto` into numbers from the design's memory layout), the memory budget at that depth, the
accumulator's registers, its TMEM columns and the TMA boxes: it reads no field of any kind's sections.
`check` runs the rules over a `Resolved` and hands the same objects to render, whose designs plan from
them: nothing is resolved twice (tests/test_rules.py counts it).
"""

from __future__ import annotations

from specgen.design import DesignBase
from specgen.registry import design_for
from specgen.resolved import Resolved, TmaBox
from specgen.spec.models import Bounds, LayeredSpec, Target
from specgen.targets import TargetInfo, target_info

__all__ = ["Resolved", "TmaBox", "design_of", "resolve"]


def design_of(spec: LayeredSpec, info: TargetInfo) -> DesignBase:
    design = design_for(spec.kind, info)
    if design is None:
        raise ValueError(f"no design serves {info} for kind {spec.kind!r} (specgen/kinds/lineup.py's DESIGN_PACKAGES)")
    return design


def resolve(spec: LayeredSpec, target: Target) -> Resolved:
    """What `spec` resolves to on `target`, from the target's effective config (its `per_target` keys
    applied): `Resolved.spec` is that effective spec, which the rules and the designs read. Each of
    the target's size-selected variants resolves too, into `Resolved.variants`, and each companion kernel
    the effective spec names (a backward's GEMMs) into `Resolved.companions`."""
    default = spec.for_target(target)
    variants = tuple(_resolve(spec.for_target(target, i, base=default), target, i, v.when)
                     for i, v in enumerate(spec.variants_on(target)))
    # where the target's design renders no companions (a backward, or a gated epilogue's), TRN001 says so and none
    # is resolved
    renders = design_of(default, target_info(target)).renders_companions_of(default, target_info(target))
    companions = tuple(_resolve(c, target, companion=(label, field), parent=default)
                       for label, c, field in (default.companions() if renders else ()))
    return _resolve(default, target, variants=variants, companions=companions)


def _resolve(spec: LayeredSpec, target: Target, variant: int | None = None, when: Bounds | None = None,
             variants: tuple[Resolved, ...] = (), companions: tuple[Resolved, ...] = (),
             companion: tuple[str, tuple[str | int, ...]] = ("", ()), parent: LayeredSpec | None = None) -> Resolved:
    info = target_info(target)
    design = design_of(spec, info)
    stages, acc_stages = design.stages(spec, info)
    regs, threads = design.accumulator_registers(spec, info)
    return Resolved(
        spec=spec, target=target, info=info, gpu=info.gpu, tpu=info.tpu,
        ab_stages=stages, acc_stages=acc_stages,
        budget=design.budget(spec, info, stages),
        acc_registers=regs, acc_threads=threads,
        tmem_columns=design.tmem_columns(spec, info),
        tma_boxes=design.tma_boxes(spec, info),
        design=design,
        variant=variant, when=when, variants=variants,
        companions=companions, companion=companion[0], companion_field=companion[1], parent=parent,
    )
