"""Resolve once what check and the planners both need, per (spec, target).

`resolve(spec, target)` applies the target's `per_target` configuration, turns `auto` pipeline depths into numbers, lays out the on-chip memory with the
target's design (or its checked-only layout), and works out the accumulator's registers, its TMEM
columns and the TMA boxes. `check` runs the rules over a `Resolved` and hands the same objects to render,
whose designs plan from them: nothing is resolved twice (tests/test_rules.py counts it).
"""

from __future__ import annotations

from specgen.designs import design_for
from specgen.envelope.budget import (
    CHECKED_ONLY_LAYOUTS,
    MAX_AUTO_STAGES,
    MIN_STAGES,
    TPU_BUFFERS,
    MemoryBudget,
    MemoryLayout,
)
from specgen.resolved import Resolved, TmaBox, tma_boxes
from specgen.spec.models import GemmSpec, Target, When
from specgen.targets import Backend, TargetInfo, target_info

__all__ = ["Resolved", "TmaBox", "memory", "max_ab_stages", "resolve", "tma_boxes"]


_LAYOUTS: dict[tuple[str, Backend], MemoryLayout] = {}


def layout(kind: str, backend: Backend) -> MemoryLayout:
    """The memory layout of a (kind, backend): its design's, else the checked-only one."""
    fn = _LAYOUTS.get((kind, backend))
    if fn is None:
        design = design_for(kind, backend)
        fn = _LAYOUTS[(kind, backend)] = design.memory if design is not None else CHECKED_ONLY_LAYOUTS[(kind, backend)]
    return fn


def memory(spec: GemmSpec, target: Target | TargetInfo, ab_stages: int) -> MemoryBudget:
    """The budget at a given depth, from the target's design (or its checked-only layout)."""
    info = target if isinstance(target, TargetInfo) else target_info(target)
    return layout(spec.kind, info.backend)(spec, info, ab_stages)


def max_ab_stages(spec: GemmSpec, target: Target | TargetInfo, limit: int = 64) -> int:
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
    # A layout whose extra bytes vary with the depth (Mosaic GPU pads its buffers to whole KiB) moves the
    # answer by a stage at most: settle it on the budget itself.
    while stages > 0 and not memory(spec, target, stages).fits:
        stages -= 1
    while 0 < stages < limit and memory(spec, target, stages + 1).fits:
        stages += 1
    return stages


def resolve_ab_stages(spec: GemmSpec, target: Target | TargetInfo) -> int:
    """`auto` -> the deepest pipeline that fits, capped per backend and floored at MIN_STAGES (where
    not even two stages fit, SMEM001 reports it: a one-stage pipeline overlaps nothing); TPU blocks are
    double-buffered."""
    if spec.pipeline.ab_stages != "auto":
        return spec.pipeline.ab_stages
    info = target if isinstance(target, TargetInfo) else target_info(target)
    if info.memory == "vmem":
        return TPU_BUFFERS  # Pallas TPU pipelines double-buffer each BlockSpec by default
    return max(MIN_STAGES, min(MAX_AUTO_STAGES[info.backend], max_ab_stages(spec, info)))


def tmem_columns(spec: GemmSpec) -> int:
    """Accumulator TMEM columns per CTA per stage: N (1-CTA, or 2-CTA M=256), N/2 for 2-CTA M=128.
    fp16 accumulators are not packed. Source: cutlass `mma_traits_sm100_frag.hpp`."""
    n = spec.tile.n
    return n // 2 if spec.cute.two_cta and spec.tile.m * 2 == 128 else n


def _acc_in_tmem(info: TargetInfo) -> bool:
    return info.issues_mma and info.mma == "tcgen05"


def resolve_acc_stages(spec: GemmSpec, target: Target | TargetInfo) -> int:
    """Accumulator stages live in TMEM on tcgen05 (2 when they fit, so the epilogue overlaps the next
    tile's MMA); register accumulators have one."""
    if spec.pipeline.acc_stages != "auto":
        return spec.pipeline.acc_stages
    info = target if isinstance(target, TargetInfo) else target_info(target)
    if _acc_in_tmem(info):
        assert info.gpu is not None
        return 2 if tmem_columns(spec) * 2 <= info.gpu.tmem_columns else 1
    return 1


def accumulator_registers(spec: GemmSpec, info: TargetInfo) -> tuple[int, int]:
    """(registers per thread holding the accumulator, threads sharing it)."""
    t = spec.tile
    words = t.m * t.n * (4 if spec.accumulator.bytes == 4 else 2) // 4
    if info.backend is Backend.triton:
        threads = spec.triton.num_warps * 32
    elif info.backend is Backend.cute and spec.cute.schedule == "pingpong":  # each warpgroup owns a whole tile
        threads = 128
    elif info.backend is Backend.cute and spec.cute.mma_warpgroups:
        threads = spec.cute.mma_warpgroups * 128
    elif info.backend is Backend.pallas:  # Mosaic GPU: two consumer warpgroups split N (designs/gemm_pallas.py)
        threads = 2 * 128
    else:  # wgmma consumers: one warpgroup per 64 rows, two for wide tiles (the CuTe examples' default)
        threads = (2 if t.m > 64 and t.n > 128 else 1) * 128
    return words // threads, threads


def resolve_tma_boxes(spec: GemmSpec, info: TargetInfo) -> tuple[TmaBox, ...]:
    """The boxes the kernel moves by TMA: its design's own (`tma_boxes`, the ones the module builds), else
    one per tile where the target moves raw TMA boxes, else none."""
    design = design_for(spec.kind, info.backend)
    own = getattr(design, "tma_boxes", None)
    if own is not None:
        return own(spec, info)
    return tma_boxes(spec) if info.tma_boxes else ()


def resolve(spec: GemmSpec, target: Target) -> Resolved:
    """What `spec` resolves to on `target`, from the target's effective config (its `per_target` keys
    applied): `Resolved.spec` is that effective spec, which the rules and the designs read. Each of
    the target's size-selected variants resolves too, into `Resolved.variants`."""
    variants = tuple(_resolve(spec.for_target(target, i), target, i, v.when)
                     for i, v in enumerate(spec.variants_on(target)))
    return _resolve(spec.for_target(target), target, variants=variants)


def _resolve(spec: GemmSpec, target: Target, variant: int | None = None, when: When | None = None,
             variants: tuple[Resolved, ...] = ()) -> Resolved:
    info = target_info(target)
    stages = resolve_ab_stages(spec, info)
    regs, threads = accumulator_registers(spec, info)
    return Resolved(
        spec=spec, target=target, info=info, gpu=info.gpu, tpu=info.tpu,
        ab_stages=stages, acc_stages=resolve_acc_stages(spec, info),
        budget=memory(spec, info, stages),
        acc_registers=regs, acc_threads=threads,
        tmem_columns=tmem_columns(spec) if _acc_in_tmem(info) else 0,
        tma_boxes=resolve_tma_boxes(spec, info),
        variant=variant, when=when, variants=variants,
    )
