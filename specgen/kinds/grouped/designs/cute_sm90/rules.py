"""The grouped CuTe sm90 design's rules: the dense sm90 design's that read the same tile (wgmma's shape and
majors MMA001 / MAJ001, its consumer warpgroups CUTE001 and epilogue subtiles CUTE002: one rule each, concerning
both kinds), what this kernel renders (GRP301: operand and output dtypes, ragged M or K; GRP302: the configurations
it runs), and REG001's verdict by the dense design's register model (`group_registers`)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.cute_sm90 import rules as dense
from specgen.kinds.gemm.designs.cute_sm90.design import mma_warpgroups
from specgen.kinds.gemm.shared_rules import mma
from specgen.kinds.grouped.designs.cute_sm90.design import DESIGN, group_registers
from specgen.rules.base import Finding, Margin, RuleContext, RuleSet, target_of
from specgen.spec.dtypes import DType

OWN = RuleSet()
SERVED = target_of(DESIGN)
# The dense kernel's measured margin (the same mainloop and epilogue copy), 12 registers wider above: the grouped
# compile grid's fresh seed 38 (tests/grids/grouped_cute_sm90.py, tests/data/fresh/fresh_grouped_cute_sm90_38.json,
# nvidia-cutlass-dsl 4.8.1) compiled gcute_38_019, a 192x128 one-warpgroup tile with two erf GELUs, to 232
# registers with no spill where the estimate is 283 (51 over: 1 false reject of the 26 configs that ran, past
# issue 36's 2%); the spilling kernels nearest it sit 47 and 52 over (256x256 and 256x192 two-warpgroup tiles,
# 1-10 KB of spill stores), which check now compiles instead of refusing outright. Judged on seed 39, drawn after.
REGISTER_MARGIN = Margin(below=dense.REGISTER_MARGIN.below, above=52, unit=dense.REGISTER_MARGIN.unit)
option_findings = dense.option_findings  # OPT001: cute.two_cta is Blackwell's

OPERANDS = (DType.bf16, DType.f16, DType.fp8_e4m3, DType.fp8_e5m2)
OUTPUTS = (DType.bf16, DType.f16, DType.f32)


@OWN.rule("GRP301", "the grouped CuTe sm90 kernel's dtypes and grouping", SERVED)
def cute_grouped_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """The grouped sm90 kernel renders the MoE forward (ragged M) and its weight gradient (ragged K: groups along
    K, out (G, M, N), A and B in either major, ragged_k_sm90.jinja), with 16-bit A and B (bf16, f16; wgmma
    m64nNk16) or, ragged M only (the spec refuses fp8 ragged K), 8-bit ones (fp8 e4m3 and e5m2, which may mix:
    wgmma m64nNk32's .e4m3 / .e5m2 atype and btype, PTX ISA "wgmma.mma_async" and CD `warpgroup/mma.py` MmaF8Op;
    K-major only, MAJ001; tile.k a multiple of 32, MMA001) into an f32 accumulator, stored as bf16, f16 or f32
    by TMA (16-byte vector stores, 8 or 4 elements a thread, where a group ends inside a subtile). fp8's rowwise
    scales are the epilogue's `scale` by = "rowcol" (scale_a (M,), scale_b (G, N)), applied to the f32
    accumulator before the rest of the chain. Not
    rendered: 32-bit operands (for either grouping: the Triton design's), an f16 accumulator, 8-bit outputs. A
    gated epilogue's limits (a K-major B) are EPI003's."""
    s = ctx.spec
    which = "weight gradient (groups.ragged = 'k')" if s.groups.ragged == "k" else "MoE forward"
    for side in ("a", "b"):
        dt = getattr(s, side).dtype
        if dt not in OPERANDS:
            yield Finding("GRP301", "error", f"{side.upper()} is {dt}: the grouped cute:sm90 kernel renders bf16, f16 "
                          f"or fp8 (e4m3, e5m2) operands (32-bit operands are the Triton design's; here the {which})",
                          "use bf16, f16 or fp8, or a triton target", (side, "dtype"))
    if s.accumulator != DType.f32:
        yield Finding("GRP301", "error", f"accumulator = {s.accumulator}: the grouped cute:sm90 kernel accumulates in f32",
                      'use accumulator = "f32"', ("accumulator",))
    if s.out.dtype not in OUTPUTS:
        yield Finding("GRP301", "error", f"out is {s.out.dtype}: the grouped cute:sm90 kernel stores bf16, f16 or f32 "
                      "(16-byte vectors of 8 or 4 elements)", "use out.dtype = bf16, f16 or f32", ("out", "dtype"))


@OWN.rule("GRP302", "the grouped CuTe sm90 kernel's configurations", SERVED)
def cute_grouped_config(ctx: RuleContext) -> Iterator[Finding]:
    """One CTA a tile (no cluster: a cluster's CTAs would share an A or B tile of the same group, and groups end
    on the device), cooperative consumer warpgroups (1 or 2 splitting the tile along M), the tile computed
    unswapped (out = A B, tile.m on wgmma's rows). Ping-pong warpgroups, `cute.swap_ab` (decode's transposed
    tile) and clusters are the dense kernel's and not rendered here (errors: the kernel would run another
    schedule than the spec says). `cute.tma_store = false` is not honoured (a warning, as the dense design's
    CUTE003): ragged M stores by TMA every epilogue subtile whose rows all lie in its group (or reach M), and
    through predicated vector stores only one its group's end cuts (a host-built descriptor cannot follow group
    ends on the device); ragged K (out (G, M, N), a fixed shape) stores every subtile by TMA."""
    s = ctx.spec
    if s.cluster.m * s.cluster.n > 1:
        yield Finding("GRP302", "error", f"cluster = {s.cluster.m}x{s.cluster.n}: the grouped cute:sm90 kernel runs one "
                      "CTA a tile (no multicast across groups)", "use cluster = { m = 1, n = 1 }", ("cluster",))
    if s.cute.schedule == "pingpong":
        yield Finding("GRP302", "error", 'cute.schedule = "pingpong" is not rendered by the grouped cute:sm90 kernel: '
                      "its consumer warpgroups share each tile", 'use cute.schedule = "cooperative"', ("cute", "schedule"))
    if s.cute.swap_ab:
        yield Finding("GRP302", "error", "cute.swap_ab is not rendered by the grouped cute:sm90 kernel (the tile is "
                      "computed as out = A B, tile.m on wgmma's rows)", "set cute.swap_ab = false", ("cute", "swap_ab"))
    if not s.cute.tma_store and s.groups.ragged == "k":
        yield Finding("GRP302", "warning", "cute.tma_store = false is ignored by the grouped cute:sm90 kernel's ragged "
                      "K: out[g] is written whole, by TMA (as the dense kernel stores)", "drop cute.tma_store",
                      ("cute", "tma_store"))
    elif not s.cute.tma_store:
        yield Finding("GRP302", "warning", "cute.tma_store = false is ignored by the grouped cute:sm90 kernel: every "
                      "epilogue subtile inside its group's rows is stored by TMA, only one a group's end cuts through "
                      "predicated vector stores", "drop cute.tma_store", ("cute", "tma_store"))


def register_findings(ctx: RuleContext) -> Iterator[Finding]:
    """REG001 on grouped cute:sm90: the dense sm90 design's register model (kinds/gemm/designs/cute_sm90/rules.py
    `register_findings` says how it was fitted and its margin) over this kernel's tile, with each (G, N) operand
    counted as the per-column vector it is in a tile (`group_registers`). Within the margin, check settles the
    verdict by compiling the config (ptxas' spill stores); below it too where a SiLU's or tanh GELU's tanh results
    for the whole tile would pass the budget (`dense.hoist_near`: the same epilogue math)."""
    est = group_registers(ctx.spec)
    near = REGISTER_MARGIN.near(est.total, est.budget)
    hoist = dense.hoist_near(ctx.spec, est, near)  # type: ignore[arg-type]  # a SiLU's / tanh GELU's tanh
    if not est.spills and not near and not hoist:
        return
    hints = ["fewer vector or cast ops in the epilogue"] if est.operands or est.temporaries else []
    if mma_warpgroups(ctx.spec) == 1 and ctx.spec.tile.m % 128 == 0:  # type: ignore[arg-type]
        hints.append("cute.mma_warpgroups = 2 (each holds half the tile)")
    yield dense.register_finding(ctx, est, hints, near, REGISTER_MARGIN, hoist)


SHARED = [r for r in (*mma.RULES, *dense.RULES) if r.id in ("MAJ001", "MMA001", "CUTE001", "CUTE002")]
RULES = [*SHARED, *OWN]
