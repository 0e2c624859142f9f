"""The on-chip memory budget every GPU design lays out (resolve.py asks the design for it; stages.py finds
the deepest pipeline that fits)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.envelope.budget import MIN_STAGES
from specgen.kinds.gemm.shared_rules import compiled
from specgen.kinds.gemm.stages import max_ab_stages, memory
from specgen.rules.base import Finding, Near, RuleContext, RuleSet, is_gpu

RULES = RuleSet()

# --- memory budgets --------------------------------------------------------------------------------------
@RULES.rule("SMEM001", "shared memory per block", is_gpu)
def smem_budget_rule(ctx: RuleContext) -> Iterator[Finding]:
    """Everything a block stages must fit the per-block opt-in maximum: 232448 B on sm90 and sm100
    (cutlass `arch.h`; measured on the H200), counting the barrier reserve where the kernel keeps one.
    The planner's `auto` stages come from the same budget (the design's `memory`, via resolve.py).
    Where a design's plan is not exact (its `smem_margin`, measured against its compiler), a total within
    that margin of the capacity is near the boundary: check settles it with the compiler's own figure."""
    b = ctx.budget
    margin = ctx.design.smem_margin
    near = Near(margin, b.fits, compiled.smem_within(b.capacity)) if margin and margin.near(b.total, b.capacity) else None
    if b.fits:
        if near is not None:
            yield Finding("SMEM001", "error", f"the plan needs {b.total} B of SMEM of the {b.capacity} B a block has on "
                          f"{ctx.target} ({b.breakdown()}); the {ctx.design.name} compiler's own figure has been up to "
                          f"{margin.below} B more", "use a smaller tile or fewer ab_stages", ("pipeline", "ab_stages"), near)
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
                  f"({b.breakdown()})", hint, ("pipeline", "ab_stages") if fit >= 1 else ("tile",), near)
