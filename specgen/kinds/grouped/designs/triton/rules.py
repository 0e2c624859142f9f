"""The grouped Triton design's own rules: Triton's block limits (the dense Triton design's POW001, the same rule),
tl.dot's minimum shapes (GRP101), and its register estimate (REG001's verdict: the dense Triton design's, over
the same tile and warps)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.triton import rules as dense
from specgen.kinds.grouped.designs.triton.design import DESIGN
from specgen.rules.base import Finding, RuleContext, RuleSet, target_of

OWN = RuleSet()
SERVED = target_of(DESIGN)
register_findings = dense.register_findings  # REG001: the accumulator and FMA operands against 255 registers


@OWN.rule("GRP101", "tl.dot minimum shapes in the grouped kernel", SERVED)
def grouped_dot_shape(ctx: RuleContext) -> Iterator[Finding]:
    """tl.dot needs K >= 16 (16-bit), 8 (32-bit) and M, N >= 16 (Triton `language/semantic.py`; the dense
    design's MMA003 without its swap_ab): a block of fewer than 64 rows compiles but does not use wgmma on sm90
    (warning: the small-group decode configs of the issue's next slice will want swap_ab)."""
    t, dt = ctx.spec.tile, ctx.spec.a.dtype
    kmin = {1: 32, 2: 16, 4: 8}[dt.bytes]
    if t.k < kmin:
        yield Finding("GRP101", "error", f"tile.k = {t.k} < {kmin}, tl.dot's minimum K for {dt}", f"use tile.k = {kmin}",
                      ("tile", "k"))
    for dim in ("m", "n"):
        if getattr(t, dim) < 16:
            yield Finding("GRP101", "error", f"tile.{dim} = {getattr(t, dim)} < 16, tl.dot's minimum", "", ("tile", dim))
    if ctx.info.mma == "wgmma" and 16 <= t.m < 64:
        yield Finding("GRP101", "warning", f"tile.m = {t.m} < 64: Triton will not use wgmma on sm90", "use tile.m >= 64",
                      ("tile", "m"))


RULES = [*(r for r in dense.RULES if r.id == "POW001"), *OWN]
