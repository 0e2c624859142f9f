"""Split-K: only where a design renders it."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm import KIND
from specgen.registry import rendering
from specgen.rules.base import Finding, RuleContext, RuleSet
from specgen.rules.hooks import served_by

RULES = RuleSet()


@RULES.rule("SPK001", "split-K where a design renders it", served_by(lambda d, info: not d.renders_split_k, (KIND,)))
def split_k_design(ctx: RuleContext) -> Iterator[Finding]:
    """`schedule.split_k > 1` needs a kernel that divides the K loop and a launcher that reduces the
    partials: designs that render both say `renders_split_k` (the Triton design's kernel and launcher,
    the CuTe sm90 design's cluster of K splits); the others render one K loop per tile, so a split there
    would be dropped silently."""
    k = ctx.spec.schedule.split_k
    if k > 1:
        where = sorted(d.name for d in rendering(KIND) if d.renders_split_k)
        yield Finding("SPK001", "error", f"schedule.split_k = {k}: the {ctx.design.name} design renders no split-K "
                      f"(the {' and '.join(where)} designs do)", f'set schedule.split_k = 1 for {ctx.target} (a per_target table)',
                      ("schedule", "split_k"))
