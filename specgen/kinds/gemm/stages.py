"""The GEMM's stage figures on a target, by spec and target alone (the SMEM rule, tools and tests): each asks
the target's design (the registry's answer) the hook of the kind's design base (kinds/gemm/design.py)."""

from __future__ import annotations

from typing import cast

from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.design import GemmDesign
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolve import design_of
from specgen.spec.models import Target
from specgen.targets import TargetInfo, target_info


def _design(spec: GemmSpec, target: Target | TargetInfo) -> tuple[GemmDesign, TargetInfo]:
    info = target if isinstance(target, TargetInfo) else target_info(target)
    return cast(GemmDesign, design_of(spec, info)), info


def memory(spec: GemmSpec, target: Target | TargetInfo, ab_stages: int) -> MemoryBudget:
    """The budget at a given depth, from the target's design."""
    design, info = _design(spec, target)
    return design.budget(spec, info, ab_stages)


def max_ab_stages(spec: GemmSpec, target: Target | TargetInfo, limit: int = 64) -> int:
    """The deepest pipeline that fits on `target` (0 when not even one stage does), capped at `limit`."""
    design, info = _design(spec, target)
    return design.max_ab_stages(spec, info, limit)


def resolve_ab_stages(spec: GemmSpec, target: Target | TargetInfo) -> int:
    """`pipeline.ab_stages` on `target`, `auto` filled in."""
    design, info = _design(spec, target)
    return design.resolve_ab_stages(spec, info)


def resolve_acc_stages(spec: GemmSpec, target: Target | TargetInfo) -> int:
    """`pipeline.acc_stages` on `target`, `auto` filled in."""
    design, info = _design(spec, target)
    return design.resolve_acc_stages(spec, info)
