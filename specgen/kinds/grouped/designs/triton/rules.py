"""The grouped Triton design's own rules: Triton's block limits (the dense Triton design's POW001, the same rule),
tl.dot's minimum shapes (GRP101), an 8-bit B K-major on sm90 (GRP102), the ragged-K kernel's options (GRP103:
swap_ab refused, masked pointer loads noted), and its register estimate (REG001's verdict: the dense Triton design's, over
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


@OWN.rule("GRP102", "an 8-bit B is K-major for wgmma", SERVED)
def grouped_fp8_b_major(ctx: RuleContext) -> Iterator[Finding]:
    """wgmma reads 8-bit operands from shared memory K-major only (PTX `wgmma.mma_async`: only .f16/.bf16 take
    the transpose bits; the MAJ001 rule of the designs that issue it). Triton (3.6, the same in 3.9) lowers an
    N-major fp8 B on sm90 anyway, by forcing a K-major SMEM order: `AccelerateMatmul.cpp` allows a transposed
    operand for f16/bf16 only and otherwise transposes the tile in registers before each SMEM store, with a
    warning that the pipelined load of that operand is disabled. A persistent grouped kernel whose weight
    loads are not pipelined is not worth rendering, so an N-major 8-bit B is refused on sm90 (torch's
    _scaled_grouped_mm refuses it too: its mat_b must be column-major). tcgen05 (sm100) takes N-major 8-bit
    operands from SMEM: not checked there."""
    b = ctx.spec.b
    if ctx.info.mma == "wgmma" and b.major == "mn" and b.dtype.bytes == 1:
        yield Finding("GRP102", "error", f"B is {b.dtype} and N-major: sm90's wgmma reads 8-bit operands K-major only, "
                      f"and Triton would transpose each {ctx.spec.tile.k}x{ctx.spec.tile.n} B tile in registers "
                      "with its pipelined load disabled", 'store B K-major (b.major = "k": the (G, N, K) weight '
                      "passed transposed, as torch._scaled_grouped_mm takes it)", ("b", "major"))


@OWN.rule("GRP103", "the ragged-K kernel's options", SERVED)
def ragged_k_options(ctx: RuleContext) -> Iterator[Finding]:
    """The ragged-K kernel (groups along K: the weight gradient) loads each group's whole K tiles by TMA with
    `triton.tma` (the default; a box may start at any K row), and its last partial tile as one more box whose rows
    past the group's end are zeroed in registers (TMA zero-fills only past the tensor, so the box reads the next
    group's rows). With `triton.tma = false` every K step is a masked pointer load (a note: slower, and its address
    tensors cost registers). It computes each (group, M tile, N tile) as one tile of M rows by N columns:
    `triton.swap_ab`, decode's transposed tile for a few rows, is not rendered for it (error)."""
    s = ctx.spec
    if s.groups.ragged != "k":
        return
    if s.triton.swap_ab:
        yield Finding("GRP103", "error", "triton.swap_ab with groups.ragged = 'k': the ragged-K kernel computes its "
                      "tiles unswapped", "set triton.swap_ab = false", ("triton", "swap_ab"))
    if not s.triton.tma:
        yield Finding("GRP103", "note", "triton.tma = false with groups.ragged = 'k': A and B load through masked "
                      "pointers at every K step (with TMA, the default, each group's whole K tiles load by box and "
                      "only its last partial tile is masked, in registers)", "drop triton.tma = false to load by TMA",
                      ("triton", "tma"))


RULES = [*(r for r in dense.RULES if r.id == "POW001"), *OWN]
