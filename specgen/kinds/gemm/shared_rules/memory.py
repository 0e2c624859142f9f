"""The on-chip memory budget every GPU design lays out (resolve.py asks the design for it; stages.py finds
the deepest pipeline that fits)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.envelope.budget import MIN_STAGES
from specgen.kinds.gemm.stages import max_ab_stages, memory
from specgen.rules.base import Finding, RuleContext, RuleSet, is_gpu

RULES = RuleSet()

# --- memory budgets --------------------------------------------------------------------------------------
@RULES.rule("SMEM001", "shared memory per block", is_gpu)
def smem_budget_rule(ctx: RuleContext) -> Iterator[Finding]:
    """Everything a block stages must fit the per-block opt-in maximum: 232448 B on sm90 and sm100
    (cutlass `arch.h`; measured on the H200), counting the barrier reserve where the kernel keeps one.
    The planner's `auto` stages come from the same budget (the design's `memory`, via resolve.py)."""
    b = ctx.budget
    if b.fits:
        return
    fit = max_ab_stages(ctx.spec, ctx.info)
    hint = f"ab_stages = {fit} fits ({memory(ctx.spec, ctx.info, fit).total} B)" if fit >= 1 else ""
    if fit < MIN_STAGES and ctx.spec.tile.k >= 32:  # no real pipeline left: a thinner K slice is the way out
        half = ctx.spec.model_copy(update={"tile": ctx.spec.tile.model_copy(update={"k": ctx.spec.tile.k // 2})})
        deeper = max_ab_stages(half, ctx.info)
        if deeper >= MIN_STAGES:
            hint = (hint + "; " if hint else "") + f"tile.k = {half.tile.k} fits {deeper} stages"
    hint = hint or "shrink the tile: not even one A/B stage fits"
    yield Finding("SMEM001", "error", f"needs {b.total} B of SMEM > {b.capacity} B per block on {ctx.target} "
                  f"({b.breakdown()})", hint, ("pipeline", "ab_stages") if fit >= 1 else ("tile",))
