"""The grouped CuTe sm100 design's rules: the dense sm100 design's that read the same tile and TMEM (tcgen05's
shape MMA002, TMEM columns TMEM001, 2-CTA clusters CLU002, and its template's measured limits CUTE101 tile widths,
CUTE104 accumulator stages, CUTE105 f16 accumulators, CUTE106 epilogue subtile rows: one rule each, concerning both
kinds), OPT001 as the dense sm100 design answers it, and what this kernel renders (GRP401: operand and output
dtypes, ragged M; GRP402: the configurations it runs). No register model: the accumulator lives in TMEM, and the
compile (tests/grouped/test_cute_sm100.py) reads the epilogue's spills off the SASS."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.cute_sm100 import rules as dense
from specgen.kinds.grouped.designs.cute_sm100.design import DESIGN
from specgen.rules.base import Finding, RuleContext, RuleSet, target_of
from specgen.spec.dtypes import DType

OWN = RuleSet()
SERVED = target_of(DESIGN)
option_findings = dense.option_findings  # OPT001: ping-pong, mma_warpgroups and swap_ab are the sm90 design's

OPERANDS = (DType.bf16, DType.f16, DType.fp8_e4m3, DType.fp8_e5m2)
OUTPUTS = (DType.bf16, DType.f16, DType.f32)


@OWN.rule("GRP401", "the grouped CuTe sm100 kernel's dtypes and grouping", SERVED)
def cute_sm100_grouped_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """The grouped sm100 kernel renders the MoE forward: ragged M, 16-bit A and B (bf16, f16: tcgen05
    kind::f16, UTCHMMA, K 16 an instruction) or 8-bit ones (fp8 e4m3 and e5m2, which may mix: kind::f8f6f4, UTCQMMA,
    K 32 an instruction, PTX ISA "tcgen05.mma" and CD `tcgen05/mma.py` MmaF8Op; either B major, as the dense sm100
    design's fp8) into an f32 TMEM accumulator, stored as bf16, f16 or f32 through 16-byte vector stores (8 or 4
    elements a thread). fp8's rowwise scales are the epilogue's `scale` by = "rowcol" (scale_a (M,), scale_b (G, N))
    on the f32 accumulator before the rest of the chain. Not rendered (a design limit, not a hardware one): 32-bit
    operands, an f16 accumulator, 8-bit outputs, and ragged K (the weight gradient), whose groups end anywhere
    along K, where a TMA box would read the next group's rows: the cute:sm90 kernel zeroes those rows of a boundary
    tile in SMEM (GRP301 takes ragged K since 2026-11-28), this one does not yet."""
    s = ctx.spec
    if s.groups.ragged != "m":
        yield Finding("GRP401", "error", "groups.ragged = 'k' (the weight gradient) is not rendered on cute:sm100: its "
                      "groups end anywhere along K, where a TMA box would read the next group's rows (the cute:sm90 "
                      "kernel zeroes them in SMEM; this one does not yet)",
                      "use a triton, cute:sm90, pallas:gpu_sm90 or Pallas TPU target for the weight gradient",
                      ("groups", "ragged"))
    for side in ("a", "b"):
        dt = getattr(s, side).dtype
        if dt not in OPERANDS:
            yield Finding("GRP401", "error", f"{side.upper()} is {dt}: the grouped cute:sm100 kernel renders bf16, f16 "
                          "or fp8 (e4m3, e5m2) operands (32-bit operands are the Triton design's)",
                          "use bf16, f16 or fp8, or a triton target", (side, "dtype"))
    if s.accumulator != DType.f32:
        yield Finding("GRP401", "error", f"accumulator = {s.accumulator}: the grouped cute:sm100 kernel accumulates in "
                      "f32", 'use accumulator = "f32"', ("accumulator",))
    if s.out.dtype not in OUTPUTS:
        yield Finding("GRP401", "error", f"out is {s.out.dtype}: the grouped cute:sm100 kernel stores bf16, f16 or f32 "
                      "(16-byte vectors of 8 or 4 elements)", "use out.dtype = bf16, f16 or f32", ("out", "dtype"))


@OWN.rule("GRP402", "the grouped CuTe sm100 kernel's configurations", SERVED)
def cute_sm100_grouped_config(ctx: RuleContext) -> Iterator[Finding]:
    """One CTA a tile: a 1-CTA tcgen05 MMA (cta_group::1, tile.m 64 or 128) and no cluster. A 2-CTA pair
    (`cute.two_cta`) shares one MMA over two CTAs' rows, and a cluster multicasts one A or B box to its CTAs; both
    would need the pair's or cluster's tiles in one group, whose ends live on the device: not rendered (errors: the
    kernel would run another schedule than the spec says). `cute.tma_store` does not apply: a tile's rows end at its
    group's end on the device, which a host-built TMA store descriptor cannot follow, so the kernel always stores
    through predicated vector stores (a note where the spec asks for TMA stores explicitly off, which is what
    runs)."""
    s = ctx.spec
    if s.cute.two_cta:
        yield Finding("GRP402", "error", "cute.two_cta = true: the grouped cute:sm100 kernel runs a 1-CTA tcgen05 MMA "
                      f"(tile.m = {s.tile.m} rows a CTA, no CTA pair across a group's tiles)",
                      "set cute.two_cta = false (and cluster = { m = 1, n = 1 })", ("cute", "two_cta"))
    if s.cluster.m * s.cluster.n > 1:
        yield Finding("GRP402", "error", f"cluster = {s.cluster.m}x{s.cluster.n}: the grouped cute:sm100 kernel runs "
                      "one CTA a tile (no multicast across groups)", "use cluster = { m = 1, n = 1 }", ("cluster",))
    if not s.cute.tma_store:
        yield Finding("GRP402", "note", "cute.tma_store = false: the grouped cute:sm100 kernel always stores through "
                      "predicated vector stores (group ends live on the device)", "drop cute.tma_store",
                      ("cute", "tma_store"))


SHARED = [r for r in dense.RULES if r.id in ("MMA002", "TMEM001", "CLU002", "CUTE101", "CUTE104", "CUTE105", "CUTE106")]
RULES = [*SHARED, *OWN]
