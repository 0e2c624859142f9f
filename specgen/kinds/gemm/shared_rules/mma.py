"""MMA instruction shapes and operand majors shared by the designs that issue wgmma themselves."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.rules.base import Finding, RuleContext, RuleSet, issues, k_per_instruction
from specgen.targets import Mma

RULES = RuleSet()

# --- major modes -----------------------------------------------------------------------------------------
@RULES.rule("MAJ001", "wgmma reads only 16-bit operands MN-major", issues(Mma.wgmma))
def wgmma_major(ctx: RuleContext) -> Iterator[Finding]:
    """Only f16/bf16 may be MN-major (transposed) in wgmma; fp8, int8 and tf32 must be K-major for A and B.
    Sources: CD `warpgroup/mma.py`; cutlass `mma_sm90_gmma.hpp`; jax `mosaic/gpu/wgmma.py` (0.10.2 and 0.11: "Only
    f16 WGMMA supports transposes", raised where the element is not 2 bytes wide).
    (tcgen05 and Triton both accept MN-major 8-bit operands: not checked there.)"""
    for side in ("a", "b"):
        op = getattr(ctx.spec, side)
        if op.major == "mn" and not op.dtype.is_16bit:
            yield Finding("MAJ001", "error", f"{side.upper()} is {op.dtype} and MN-major: wgmma transposes only 16-bit "
                          f"operands ({op.dtype}: {op.dtype.bytes * 8}-bit)", f"store {side.upper()} K-major ({side}.major = \"k\")", (side, "major"))


# --- MMA shapes ------------------------------------------------------------------------------------------
@RULES.rule("MMA001", "wgmma instruction shape", issues(Mma.wgmma))
def wgmma_shape(ctx: RuleContext) -> Iterator[Finding]:
    """wgmma: M = 64 per warpgroup, N 8..256 in steps of 8, K a multiple of 32 bytes of the dtype.
    The MMA's rows are tile.m, or tile.n where the design swaps A and B (`mma_tile`: CuTe's swap_ab).
    Source: CD `cute/nvgpu/warpgroup/mma.py`, PTX wgmma."""
    t, kk = ctx.spec.tile, k_per_instruction(ctx.spec.a.dtype)
    (rows, rf), (cols, cf) = ctx.design.mma_tile(ctx.spec)
    swapped = " (swap_ab: the MMA's rows)" if rf != "m" else ""
    if rows % 64:
        yield Finding("MMA001", "error", f"tile.{rf} = {rows}{swapped} is not a multiple of 64 (wgmma M per warpgroup)",
                      f"use tile.{rf} = {max(64, rows // 64 * 64)}", ("tile", rf))
    if not (8 <= cols <= 256 and cols % 8 == 0):
        yield Finding("MMA001", "error", f"tile.{cf} = {cols} is outside wgmma N 8..256 step 8"
                      f"{' (swap_ab: the MMA columns)' if swapped else ''}", "", ("tile", cf))
    if t.k % kk:
        yield Finding("MMA001", "error", f"tile.k = {t.k} is not a multiple of {kk} (wgmma K for {ctx.spec.a.dtype})",
                      "", ("tile", "k"))
