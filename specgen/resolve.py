"""Resolve once what check and the planners both need, per (spec, target).

`resolve(spec, target)` applies the target's `per_target` configuration, asks the registry for the
target's design, turns `auto` pipeline depths into numbers from the design's memory layout, and takes
the accumulator's registers, its TMEM columns and the TMA boxes from the design's hooks. `check` runs
the rules over a `Resolved` and hands the same objects to render, whose designs plan from them: nothing
is resolved twice (tests/test_rules.py counts it).
"""

from __future__ import annotations

from specgen.design import DesignBase
from specgen.envelope.budget import MIN_STAGES, MemoryBudget
from specgen.registry import design_for
from specgen.resolved import Resolved, TmaBox
from specgen.spec.models import LayeredSpec, Target, When
from specgen.targets import TargetInfo, target_info

__all__ = ["Resolved", "TmaBox", "memory", "max_ab_stages", "resolve"]


def _info(target: Target | TargetInfo) -> TargetInfo:
    return target if isinstance(target, TargetInfo) else target_info(target)


def design_of(spec: LayeredSpec, info: TargetInfo) -> DesignBase:
    design = design_for(spec.kind, info)
    if design is None:
        raise ValueError(f"no design serves {info} for kind {spec.kind!r} (specgen/kinds/lineup.py's DESIGN_PACKAGES)")
    return design


def memory(spec: LayeredSpec, target: Target | TargetInfo, ab_stages: int) -> MemoryBudget:
    """The budget at a given depth, from the target's design."""
    info = _info(target)
    return design_of(spec, info).memory(spec, info, ab_stages)


def max_ab_stages(spec: LayeredSpec, target: Target | TargetInfo, limit: int = 64) -> int:
    """The deepest pipeline that fits (0 when not even one stage does), capped at `limit`.

    Closed form, as `check` runs it for every (spec, target) pair: the total grows by one A/B stage per
    stage, beside the epilogue or, where the epilogue reuses the A/B buffers, over it once one stage fits;
    then checked against the budget at that depth (padding that varies with it moves it a stage)."""
    one = memory(spec, target, 1)
    if not one.fits:
        return 0
    room = (one.capacity - one.reserve - one.extra_bytes - one.loop_bytes
            - (0 if one.epilogue_overlaps_ab else one.epilogue_bytes))
    stages = min(limit, room // one.ab_stage_bytes - one.ab_buffers_delta)
    # A layout whose extra bytes vary with the depth (one that pads its buffers to whole KiB) moves the
    # answer by a stage at most: settle it on the budget itself.
    while stages > 0 and not memory(spec, target, stages).fits:
        stages -= 1
    while 0 < stages < limit and memory(spec, target, stages + 1).fits:
        stages += 1
    return stages


def resolve_ab_stages(spec: LayeredSpec, target: Target | TargetInfo) -> int:
    """`auto` -> the design's fixed depth where it has one, else the deepest pipeline that fits, capped
    by the design and floored at MIN_STAGES (where not even two stages fit, SMEM001 reports it: a
    one-stage pipeline overlaps nothing)."""
    if spec.pipeline.ab_stages != "auto":
        return spec.pipeline.ab_stages
    info = _info(target)
    design = design_of(spec, info)
    fixed = design.auto_stages(spec, info)
    if fixed is not None:
        return fixed
    return max(MIN_STAGES, min(design.max_auto_stages, max_ab_stages(spec, info)))


def resolve_acc_stages(spec: LayeredSpec, target: Target | TargetInfo) -> int:
    """Accumulator stages: the spec's, else the design's (TMEM accumulators double-buffer where they fit,
    so the epilogue overlaps the next tile's MMA; register accumulators have one)."""
    if spec.pipeline.acc_stages != "auto":
        return spec.pipeline.acc_stages
    info = _info(target)
    return design_of(spec, info).acc_stages(spec, info)


def accumulator_registers(spec: LayeredSpec, info: TargetInfo) -> tuple[int, int]:
    """(registers per thread holding the accumulator, threads sharing it: the design's)."""
    t = spec.tile
    words = t.m * t.n * (4 if spec.accumulator.bytes == 4 else 2) // 4
    threads = design_of(spec, info).accumulator_threads(spec, info)
    return words // threads, threads


def resolve(spec: LayeredSpec, target: Target) -> Resolved:
    """What `spec` resolves to on `target`, from the target's effective config (its `per_target` keys
    applied): `Resolved.spec` is that effective spec, which the rules and the designs read. Each of
    the target's size-selected variants resolves too, into `Resolved.variants`."""
    variants = tuple(_resolve(spec.for_target(target, i), target, i, v.when)
                     for i, v in enumerate(spec.variants_on(target)))
    return _resolve(spec.for_target(target), target, variants=variants)


def _resolve(spec: LayeredSpec, target: Target, variant: int | None = None, when: When | None = None,
             variants: tuple[Resolved, ...] = ()) -> Resolved:
    info = target_info(target)
    design = design_of(spec, info)
    stages = resolve_ab_stages(spec, info)
    regs, threads = accumulator_registers(spec, info)
    return Resolved(
        spec=spec, target=target, info=info, gpu=info.gpu, tpu=info.tpu,
        ab_stages=stages, acc_stages=resolve_acc_stages(spec, info),
        budget=design.memory(spec, info, stages),
        acc_registers=regs, acc_threads=threads,
        tmem_columns=design.tmem_columns(spec, info),
        tma_boxes=design.tma_boxes(spec, info),
        design=design,
        variant=variant, when=when, variants=variants,
    )
