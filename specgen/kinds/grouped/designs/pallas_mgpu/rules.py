"""The grouped Pallas Mosaic GPU design's rules: the dense Mosaic GPU design's own where they read what this kernel
shares with it (one check each, concerning both kinds): operand and accumulator dtypes PAL004, the warpgroup split
and epilogue subtiles PAL006, SMEM swizzles PAL008, epilogue ops that do not lower PAL009, its register verdict
REG001 and options OPT001 (`pallas.vmem_limit_bytes` is a TPU's); the GEMM kind's wgmma shape and major rules
MMA001 and MAJ001; and its own, MGP001-MGP003."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.pallas import rules as dense
from specgen.kinds.gemm.designs.pallas.design import mgpu_layout
from specgen.kinds.gemm.shared_rules import mma
from specgen.kinds.grouped.designs.pallas_mgpu.design import DESIGN, SMEM_ROW_ALIGN
from specgen.rules.base import Finding, RuleContext, RuleSet, target_of
from specgen.spec.epilogue import gated_op

SHARED = ([r for r in dense.RULES if r.id in ("PAL004", "PAL006", "PAL008", "PAL009")]
          + [r for r in mma.RULES if r.id in ("MMA001", "MAJ001")])
OWN = RuleSet()
register_findings = dense.register_findings  # REG001: the same accumulator split over two warpgroups
option_findings = dense.option_findings  # OPT001: no VMEM on Mosaic GPU


@OWN.rule("MGP001", "what the grouped Mosaic GPU ragged-K kernel takes", target_of(DESIGN))
def ragged_k_tiles(ctx: RuleContext) -> Iterator[Finding]:
    """The ragged-K kernel (groups along K: templates/grouped/pallas/grouped_mgpu_k.py.jinja) zeroes the K rows
    of another group in a staged A tile and in each consumer warpgroup's half of the B tile in SMEM, loading them
    into registers in the wgmma accumulator's layout (Mosaic GPU's WGMMA layout: rows in groups of 64, columns in
    groups of 8; lowered with jax 0.10.2, a (32, 128) or (32, 64) tile fails its layout cast). So a tile stored with
    K along its rows (an M-major A (K, M), an N-major B (K, N)) needs tile.k a multiple of 64, and a K-major B's
    half, whose rows are a warpgroup's tile.n / 2 columns of N, needs tile.n / 2 a multiple of 64. (A K-major A's
    rows are tile.m: MMA001's 64 or more.)"""
    s = ctx.spec
    if s.groups.ragged != "k":
        return
    mn = [side.upper() for side in ("a", "b") if getattr(s, side).major == "mn"]
    if mn and s.tile.k % 64:
        yield Finding("MGP001", "error", f"tile.k = {s.tile.k} with {' and '.join(mn)} stored K-rows-first (major = "
                      "\"mn\"): the ragged-K kernel masks a group's edge rows of each staged tile in the wgmma layout, "
                      "whose rows come in groups of 64", "use tile.k = 64 or 128", ("tile", "k"))
    wg_n = mgpu_layout(s).wg_n
    if s.b.major == "k" and wg_n % 64:
        yield Finding("MGP001", "error", f"tile.n = {s.tile.n} with B stored K-major: each consumer warpgroup masks its "
                      f"{wg_n} x {s.tile.k} half of the B tile in the wgmma layout, whose rows come in groups of 64",
                      "use tile.n = 128 or 256", ("tile", "n"))


@OWN.rule("MGP002", "the store ladder's SMEM rows are 128-byte aligned", target_of(DESIGN))
def store_rows_aligned(ctx: RuleContext) -> Iterator[Finding]:
    """Each 64-row output subtile is stored as a ladder of power-of-two row boxes starting at any row of its SMEM
    slot (a group's rows begin anywhere), and TMA reads shared memory from 128-byte aligned addresses (PTX ISA,
    cp.async.bulk.tensor: the shared memory address must be 128-byte aligned; JAX's ragged_dot_mgpu.py stores
    128-column bf16 rows, 256 B). So a subtile row, epi_n = min(64, tile.n / 2) elements of out, spans a multiple
    of 128 bytes. The ragged-K kernel stores whole subtiles from each slot's start (no ladder: out[g]'s rows are
    its group's own), so this does not concern it (tile.n = 64 lowers there)."""
    if ctx.spec.groups.ragged == "k":
        return
    lay, out = mgpu_layout(ctx.spec), ctx.spec.out.dtype
    row = lay.epi_n * out.bytes
    if row % SMEM_ROW_ALIGN:
        yield Finding("MGP002", "error", f"an output subtile row is {lay.epi_n} x {out.bytes} B = {row} B: the store "
                      f"ladder's boxes start on any row, and TMA reads SMEM from {SMEM_ROW_ALIGN}-byte aligned addresses",
                      f"use tile.n >= {2 * SMEM_ROW_ALIGN // out.bytes} (epilogue subtiles {SMEM_ROW_ALIGN // out.bytes} "
                      "columns wide)", ("tile", "n"))


@OWN.rule("MGP003", "what the grouped Mosaic GPU kernel does not render yet", target_of(DESIGN))
def not_yet(ctx: RuleContext) -> Iterator[Finding]:
    """1x1 clusters only: the dense kernel's TMA multicast pairs neighbouring tiles, which here may belong to
    different groups (a different B); visits paired within a group (a pad visit for an odd count) measured 2-37%
    slower on an H200 (session 31, bench/results/2026-11-28-h200-s31.md). (fp8 operands with their rowwise `scale` by = "rowcol" are rendered: the
    dense kernel's wgmma on 8-bit tiles, K-major by MAJ001, one dtype for both by PAL004.)

    A gated epilogue loads its gate and up tiles through a view of B with a gate / up axis (templates/grouped/
    pallas/grouped_mgpu.py.jinja `_gated_view`), each a TMA box of tile.n columns. An interleaved N-major B (G, K,
    2N) has its gate columns 2 elements apart along its contiguous dim: TMA's innermost global stride is one
    element (cuTensorMapEncodeTiled: the first dim is contiguous), so no box holds them; refused (K-major, or
    `halves`, render). fp8 operands with a gated op are not rendered: their rowwise scales would have to scale gate
    and up before the gated op, which the chain's order (gated first) cannot say."""
    s = ctx.spec
    if s.cluster.size > 1:
        yield Finding("MGP003", "error", f"cluster {s.cluster.m}x{s.cluster.n}: the {ctx.target} grouped kernel launches "
                      "one CTA per cluster (a pair's neighbouring tiles may read different groups' B)",
                      "drop cluster (1x1)", ("cluster",))
    gated = gated_op(s.epilogue)
    if gated is None:
        return
    if gated.layout == "interleaved" and s.b.major != "k":
        step = 2 * s.b.dtype.bytes
        yield Finding("MGP003", "error", f"a gated epilogue (interleaved) with b.major = \"{s.b.major}\": gate column j is "
                      f"B's column 2j, {step} B from the next gate column along B's contiguous dim, and TMA reads "
                      f"contiguous {s.b.dtype.bytes}-byte elements there", 'use b.major = "k" (the (G, 2N, K) weight) or '
                      'layout = "halves"', ("epilogue", 0, "layout"))
    for side in ("a", "b"):
        dt = getattr(s, side).dtype
        if dt.is_fp8:
            yield Finding("MGP003", "error", f"{side.upper()} is {dt} with a gated epilogue ({gated.fn}): the {ctx.target} "
                          "grouped kernel renders gated epilogues on bf16 and f16 operands", "use bf16 or f16 operands",
                          (side, "dtype"))


RULES = [*SHARED, *OWN]
