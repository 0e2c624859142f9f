"""The grouped Triton design's own rules: Triton's block limits (the dense Triton design's POW001, the same rule),
tl.dot's minimum shapes (GRP101), the ragged-K kernel's options (GRP103), and its register estimate (REG001's verdict: the dense Triton design's, over
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


@OWN.rule("GRP103", "the ragged-K kernel's options", SERVED)
def ragged_k_options(ctx: RuleContext) -> Iterator[Finding]:
    """The ragged-K kernel (groups along K: the weight gradient) loads A and B through masked pointers: a group's
    K rows end anywhere, and a TMA box would read the next group's (its zero fill is at the tensor's bounds only),
    so `triton.tma` does not apply (a note). It computes each (group, M tile, N tile) as one tile of M rows by N
    columns: `triton.swap_ab`, decode's transposed tile for a few rows, is not rendered for it (error)."""
    s = ctx.spec
    if s.groups.ragged != "k":
        return
    if s.triton.swap_ab:
        yield Finding("GRP103", "error", "triton.swap_ab with groups.ragged = 'k': the ragged-K kernel computes its "
                      "tiles unswapped", "set triton.swap_ab = false", ("triton", "swap_ab"))
    if s.triton.tma:
        yield Finding("GRP103", "note", "triton.tma does not apply to groups.ragged = 'k': A and B load through masked "
                      "pointers (a group's K rows end anywhere; a TMA box would read the next group's)",
                      "set triton.tma = false to say so", ("triton", "tma"))


RULES = [*(r for r in dense.RULES if r.id == "POW001"), *OWN]
