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
    design's MMA003): an MMA of fewer than 64 rows compiles but does not use wgmma on sm90 (warning). The MMA's
    rows are tile.m, or tile.n with `triton.swap_ab` (the small-group decode configs: tile.m down to 16)."""
    t, dt = ctx.spec.tile, ctx.spec.a.dtype
    kmin = {1: 32, 2: 16, 4: 8}[dt.bytes]
    if t.k < kmin:
        yield Finding("GRP101", "error", f"tile.k = {t.k} < {kmin}, tl.dot's minimum K for {dt}", f"use tile.k = {kmin}",
                      ("tile", "k"))
    for dim in ("m", "n"):
        if getattr(t, dim) < 16:
            yield Finding("GRP101", "error", f"tile.{dim} = {getattr(t, dim)} < 16, tl.dot's minimum", "", ("tile", dim))
    rows, dim = (t.n, "n") if ctx.spec.triton.swap_ab else (t.m, "m")
    if ctx.info.mma == "wgmma" and 16 <= rows < 64:
        swapped = " (triton.swap_ab: the MMA's rows)" if dim == "n" else ""
        hint = f"use tile.{dim} >= 64" + ("" if dim == "n" or t.n < 64 else ", or triton.swap_ab = true (tile.n becomes the MMA's rows)")
        yield Finding("GRP101", "warning", f"tile.{dim} = {rows} < 64{swapped}: Triton will not use wgmma on sm90", hint,
                      ("tile", dim))


RULES = [*(r for r in dense.RULES if r.id == "POW001"), *OWN]
