"""The CuTe sm100 (tcgen05) design's rules. The hardware's, by the target's row (any CuTe kernel issuing
tcgen05): its MMA shapes per dtype and CTA group (MMA002), TMEM columns x accumulator stages (TMEM001),
2-CTA clusters (CLU002), and the CuTe options a tcgen05 kernel cannot honour (OPT001). This template's
own (CUTE101-CUTE106): the tile widths it compiles, the cluster sizes its launcher can launch, its TMA
store, the accumulator stages and dtypes it compiles, and its epilogue subtiles. Shared rules apply too: dtypes (DT001), cluster size (CLU001), TMA boxes (TMA001, TMA002: B's box
is half the tile's columns per CTA of a 2-CTA pair, the store box the epilogue subtile) and the SMEM
budget (SMEM001) over this design's `memory`, which counts the epilogue staging it allocates."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.cute_sm100.design import DESIGN, epilogue_tile, tmem_warps
from specgen.rules.base import Finding, RuleContext, RuleSet, issues, k_per_instruction, target_of

RULES = RuleSet()
SERVED = target_of(DESIGN)
PORTABLE_CLUSTER = 8  # CTAs a cluster may hold without cudaFuncAttributeNonPortableClusterSizeAllowed


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
    warpgroups and `cute.schedule = "pingpong"` alternates them (sm90 only, wgmma); `cute.swap_ab` is
    rendered by the sm90 design only."""
    s, t = ctx.spec, ctx.target
    if s.cute.schedule == "pingpong":
        yield Finding("OPT001", "error", f"cute.schedule = \"pingpong\" alternates wgmma warpgroups (sm90); {t} "
                      "issues tcgen05 MMAs from one thread", "drop cute.schedule for this target",
                      ("cute", "schedule"))
    if s.cute.mma_warpgroups is not None:
        yield Finding("OPT001", "error", f"cute.mma_warpgroups = {s.cute.mma_warpgroups} splits a wgmma tile "
                      f"(sm90); {t} issues tcgen05 MMAs from one thread", "drop cute.mma_warpgroups",
                      ("cute", "mma_warpgroups"))
    if s.cute.swap_ab:
        yield Finding("OPT001", "error", f"cute.swap_ab = true is rendered by the sm90 (wgmma) design only; the {t} "
                      "kernel computes out's tiles as they are (a design limit: tcgen05 takes M = 64 or 128 per CTA)",
                      "set cute.swap_ab = false for this target (a per_target table)", ("cute", "swap_ab"))


@RULES.rule("CUTE101", "sm100 tile widths the template compiles", SERVED)
def cute_sm100_tile_n(ctx: RuleContext) -> Iterator[Finding]:
    """Each CTA holds tile.n (1-CTA) or tile.n / 2 (2-CTA) rows of B. With a 16-bit K-major B, where that
    width is an odd multiple of 8 past 8 (24, 40, ..., 200; 2-CTA tile.n 48, 112, 240) the compiling process
    aborts (measured: nvidia-cutlass-dsl 4.8.1, `cute.compile` for sm_100a, SIGABRT, no Python error; the
    compile grid tests/grids/cute_sm100.py); multiples of 16, 8 itself, fp8 B and MN-major B compile. A
    template limit, not a hardware one: tcgen05 takes N in steps of 8 (MMA002)."""
    s = ctx.spec
    pair = 2 if s.cute.two_cta else 1
    width = s.tile.n // pair
    if s.b.dtype.bytes == 2 and s.b.major == "k" and width % 16 and width != 8:
        good = max(16 * pair, s.tile.n // (16 * pair) * 16 * pair)
        yield Finding("CUTE101", "error", f"tile.n = {s.tile.n} gives each CTA {width} rows of a 16-bit K-major B, an odd "
                      "multiple of 8: the CuTe DSL (4.8.1) aborts compiling it for sm_100a", f"use tile.n = {good}",
                      ("tile", "n"))


@RULES.rule("CUTE102", "sm100 clusters the launcher can launch", SERVED)
def cute_sm100_cluster(ctx: RuleContext) -> Iterator[Finding]:
    """Clusters above 8 CTAs launch only with the non-portable opt-in (cudaFuncAttributeNonPortableClusterSize
    Allowed, CUDA programming guide: 8 is the portable maximum; HARDWARE.md). The sm100 launcher sets no
    such attribute, so a larger cluster (it compiles) would fail at launch: an error here where CLU001 warns."""
    c = ctx.spec.cluster
    if c.size > PORTABLE_CLUSTER:
        yield Finding("CUTE102", "error", f"cluster {c.m}x{c.n} = {c.size} CTAs > {PORTABLE_CLUSTER}: the cute:sm100 launcher "
                      "does not opt into non-portable cluster sizes", "use a cluster of at most 8 CTAs", ("cluster",))


@RULES.rule("CUTE103", "sm100 stores through SMEM by TMA", SERVED)
def cute_sm100_tma_store(ctx: RuleContext) -> Iterator[Finding]:
    """The sm100 design always stages the output in SMEM subtiles and stores them by TMA (its SMEM budget
    counts that staging); `cute.tma_store = false` is not honoured (a design choice, not a limit)."""
    if not ctx.spec.cute.tma_store:
        yield Finding("CUTE103", "warning", "cute.tma_store = false is ignored on cute:sm100: the kernel stores by TMA",
                      "drop cute.tma_store", ("cute", "tma_store"))


@RULES.rule("CUTE104", "sm100 accumulator stages of a 64-row 1-CTA tile", SERVED)
def cute_sm100_acc_stages(ctx: RuleContext) -> Iterator[Finding]:
    """A 1-CTA 64-row accumulator is packed two column blocks to a TMEM column (CD `utils/blackwell_helpers.py`
    `compute_acc_tmem_cols_per_stage`: interleaved), so its stages pair up: an odd count past one aborts the
    compiling process (measured: nvidia-cutlass-dsl 4.8.1, sm_100a: 3 stages on 8 of 8 grid specs; a 64x64x64
    bf16 tile with 3, 5 and 7 stages aborts, with 1, 2, 4, 6 and 8 it compiles spill-free, 2026-11-27; 3
    stages of a 128-row or 2-CTA tile compile)."""
    s = ctx.spec
    n = ctx.acc_stages
    if not s.cute.two_cta and s.tile.m == 64 and n > 1 and n % 2:
        yield Finding("CUTE104", "error", f"{n} accumulator stages of a 1-CTA 64-row tile: its stages pair up in TMEM, and "
                      "the CuTe DSL (4.8.1) aborts compiling an odd count for sm_100a",
                      f"use pipeline.acc_stages = {n - 1} or {n + 1}", ("pipeline", "acc_stages"))


@RULES.rule("CUTE105", "sm100 f16 accumulators store 16-bit outputs", SERVED)
def cute_sm100_f16_acc(ctx: RuleContext) -> Iterator[Finding]:
    """The epilogue's TMEM load is picked for the (accumulator, output) pair (CD `utils/blackwell_helpers.py`
    `get_tmem_load_op`); an f16 accumulator with an f32 output raises "Can not handle acc/d type combination"
    (measured: nvidia-cutlass-dsl 4.8.1, sm_100a); f16 and bf16 outputs compile. 8-bit outputs were not
    measured and are refused with it."""
    s = ctx.spec
    if s.accumulator.bytes == 2 and s.out.dtype.bytes != 2:
        yield Finding("CUTE105", "error", f"an f16 accumulator with a {s.out.dtype} output: the CuTe DSL (4.8.1) has no TMEM "
                      "load for that pair", "use accumulator = \"f32\" or a 16-bit output", ("accumulator",))


@RULES.rule("CUTE106", "sm100 epilogue subtile rows of whole 16-byte units per warp", SERVED)
def cute_sm100_epilogue_columns(ctx: RuleContext) -> Iterator[Finding]:
    """Each epilogue warp stores its share of a subtile's columns (epi_n, or epi_n / 2 when a 2-CTA pair of
    64-row CTAs splits its warps 2 x 2: kinds/gemm/designs/cute_sm100/design.py `epilogue_tile`) as 16-byte units
    (stmatrix, the TMA store's 16-byte granularity). Where tile.n admits no such subtile the epilogue takes
    the whole tile.n, and a share that is not a whole number of 16-byte units fails to build (measured:
    nvidia-cutlass-dsl 4.8.1, sm_100a, "Operation creation failed" on 2-CTA 64x48 tiles with 8-bit outputs)."""
    s = ctx.spec
    em, en = epilogue_tile(s)
    warp_n = tmem_warps(s)[1]
    share = en // warp_n * s.out.dtype.bytes
    if share % 16:
        yield Finding("CUTE106", "error", f"the {em}x{en} epilogue subtile gives each of {warp_n} warp columns {share} bytes of "
                      f"{s.out.dtype} per row, not a multiple of 16", "use a tile.n with a 32-byte multiple per warp column",
                      ("tile", "n"))
