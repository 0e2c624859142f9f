"""The rules of CuTe targets that issue tcgen05 (Blackwell): its MMA shapes (MMA002), TMEM (TMEM001),
2-CTA clusters (CLU002), and the CuTe options a tcgen05 kernel cannot honour (OPT001). They apply by
the target's row (any CuTe kernel issuing tcgen05), so a rendering design that takes these targets
over keeps them."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.rules.base import Finding, RuleContext, RuleSet, issues, k_per_instruction

RULES = RuleSet()


@RULES.rule("MMA002", "tcgen05 (UMMA) instruction shape", issues("tcgen05"))
def tcgen05_shape(ctx: RuleContext) -> Iterator[Finding]:
    """tcgen05.mma: cta_group::1 M in {64, 128}, N 8..256 step 8; cta_group::2 M in {128, 256} (tile.m is
    the per-CTA half), N 16..256 step 16; 8-bit MN-major B doubles the N step. K: 32 bytes per
    instruction. Sources: PTX tcgen05; CD `cute/nvgpu/tcgen05/mma.py`; HARDWARE.md."""
    s, t = ctx.spec, ctx.spec.tile
    two = s.cute.two_cta
    mma_m = t.m * 2 if two else t.m
    legal_m = (128, 256) if two else (64, 128)
    if mma_m not in legal_m:
        yield Finding("MMA002", "error", f"MMA M = {mma_m} ({'2 x ' if two else ''}tile.m {t.m}) is not one of {legal_m} "
                      f"for cta_group::{2 if two else 1}", "", ("tile", "m"))
    step = 16 if two else 8
    if s.b.dtype.bytes == 1 and s.b.major == "mn":
        step *= 2
    if not (step <= t.n <= 256 and t.n % step == 0):
        yield Finding("MMA002", "error", f"tile.n = {t.n} is outside tcgen05 N {step}..256 step {step}", "", ("tile", "n"))
    kk = k_per_instruction(s.a.dtype)
    if t.k % kk:
        yield Finding("MMA002", "error", f"tile.k = {t.k} is not a multiple of {kk} (tcgen05 K for {s.a.dtype})", "",
                      ("tile", "k"))


@RULES.rule("TMEM001", "tensor memory columns", issues("tcgen05"))
def tmem_budget(ctx: RuleContext) -> Iterator[Finding]:
    """128 lanes x 512 columns of 32 bit per CTA; allocations are powers of two in [32, 512]
    (CD `cute/arch/tmem.py`, `utils/tmem_allocator.py`). acc columns x acc stages <= 512."""
    assert ctx.gpu is not None
    cols = ctx.tmem_columns
    total = cols * ctx.acc_stages
    alloc = max(32, 1 << (total - 1).bit_length())
    if alloc > ctx.gpu.tmem_columns:
        yield Finding("TMEM001", "error", f"accumulator needs {cols} columns x {ctx.acc_stages} stages = {total} "
                      f"(allocated {alloc}) > {ctx.gpu.tmem_columns} TMEM columns",
                      "use acc_stages = 1" if cols <= 512 and ctx.acc_stages > 1 else "shrink tile.n",
                      ("pipeline", "acc_stages"))


@RULES.rule("CLU002", "2-CTA MMA needs an even cluster M", issues("tcgen05"))
def two_cta_cluster(ctx: RuleContext) -> Iterator[Finding]:
    """cta_group::2 pairs CTAs along M: cluster.m must be even (CX `dense_gemm_persistent.py`)."""
    if ctx.spec.cute.two_cta and ctx.spec.cluster.m % 2:
        yield Finding("CLU002", "error", f"cute.two_cta needs an even cluster.m, got {ctx.spec.cluster.m}",
                      "set cluster.m = 2", ("cluster", "m"))


def option_findings(ctx: RuleContext) -> Iterator[Finding]:
    """OPT001 on tcgen05 CuTe targets: `cute.mma_warpgroups` splits a wgmma tile between consumer
    warpgroups and `cute.schedule = "pingpong"` alternates them (sm90 only, wgmma)."""
    s, t = ctx.spec, ctx.target
    if s.cute.schedule == "pingpong":
        yield Finding("OPT001", "error", f"cute.schedule = \"pingpong\" alternates wgmma warpgroups (sm90); {t} "
                      "issues tcgen05 MMAs from one thread", "drop cute.schedule for this target",
                      ("cute", "schedule"))
    if s.cute.mma_warpgroups is not None:
        yield Finding("OPT001", "error", f"cute.mma_warpgroups = {s.cute.mma_warpgroups} splits a wgmma tile "
                      f"(sm90); {t} issues tcgen05 MMAs from one thread", "drop cute.mma_warpgroups",
                      ("cute", "mma_warpgroups"))
