"""The Pallas design's own rules: Mosaic TPU's dtypes, VMEM budget, block shapes and buffering (DT003,
VMEM001, PAL001-PAL003, and PAL011 / PAL014 / PAL015 for a backward's transposed gradients, its kernels' VMEM and an fp8
forward's 8-bit blocks), the Mosaic GPU kernel's dtypes, staging, warpgroup split, clusters, swizzles
and epilogue ops (PAL004-PAL009), its gated epilogue's configurations (PAL012), its register verdict (REG001) and its options (OPT001)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.pallas.design import (
    JNP_DTYPES,
    MGPU_CONSUMER_WGS,
    is_mgpu_target,
    mgpu_layout,
    mgpu_swizzles,
    swaps,
)
from specgen.kinds.gemm.designs.pallas.training import grad_cols_vmem, oriented, pre_role_vmem
from specgen.kinds.gemm.shared_rules import compiled
from specgen.rules.base import Finding, Near, RuleContext, RuleSet, is_tpu
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op

RULES = RuleSet()
MOSAIC_GPU = is_mgpu_target


@RULES.rule("DT003", "TPU MXU dtypes", is_tpu)
def tpu_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """v5e/v5p/v6e multiply e5m2 (and e4m3b11fnuz), not e4m3fn; v7x e4m3fn and e5m2; no tf32 or f16 MXU
    path. Source: jax `_src/tpu_info.py`."""
    assert ctx.tpu is not None
    for side in ("a", "b"):
        dt = getattr(ctx.spec, side).dtype
        if dt.is_fp8 and dt not in ctx.tpu.fp8:
            yield Finding("DT003", "error", f"{side.upper()} is {dt}: {ctx.tpu.name} MXU takes fp8 as "
                          f"{', '.join(map(str, ctx.tpu.fp8))} only", "", (side, "dtype"))
        if dt in (DType.tf32, DType.f16):
            yield Finding("DT003", "error", f"{side.upper()} is {dt}: the TPU MXU has no {dt} mode",
                          "use bf16 (or f32)", (side, "dtype"))


@RULES.rule("VMEM001", "TPU VMEM budget", is_tpu)
def vmem_budget_rule(ctx: RuleContext) -> Iterator[Finding]:
    """Double-buffered blocks plus the f32 accumulator must fit VMEM per TensorCore: v5e 128 MiB,
    v5p 64 MiB, v6e 128 MiB, v7x 64 MiB (jax `_src/tpu_info.py`). An explicit `vmem_limit_bytes`
    must cover the plan and stay within VMEM; the default scoped limit is far lower, so the renderer
    always sets one."""
    b, tpu = ctx.budget, ctx.tpu
    assert tpu is not None
    if not b.fits:
        yield Finding("VMEM001", "error", f"needs {b.total} B of VMEM > {b.capacity} B on {tpu.name} ({b.breakdown()})",
                      "shrink the tile", ("tile",))
    limit = ctx.spec.pallas.vmem_limit_bytes
    if limit is not None and limit < b.total:
        yield Finding("VMEM001", "error", f"pallas.vmem_limit_bytes = {limit} < {b.total} B the plan needs", "",
                      ("pallas", "vmem_limit_bytes"))
    if limit is not None and limit > tpu.vmem_bytes:
        yield Finding("VMEM001", "error", f"pallas.vmem_limit_bytes = {limit} > {tpu.vmem_bytes} B of VMEM on {tpu.name}",
                      "", ("pallas", "vmem_limit_bytes"))


# --- Pallas TPU -------------------------------------------------------------------------------------------
@RULES.rule("PAL001", "TPU block shapes", is_tpu)
def tpu_block_shape(ctx: RuleContext) -> Iterator[Finding]:
    """Block last two dims divisible by (sublanes, 128), sublanes 8 for 32/16-bit (16 for bf16 on v7x),
    8*(32/bits) for narrower types, each block in its operand's stored layout (specgen's Pallas kernels
    take a K-major B as (N, K)). Sources: jax `_src/pallas/mosaic/lowering.py`, `tpu_info.py`.
    (Blocks equal to the full array also pass, but a spec's tile does not know the array.)"""
    s, t = ctx.spec, ctx.spec.tile
    assert ctx.tpu is not None

    def sublanes(dt: DType) -> int:
        return tpu_sublanes(ctx, dt)

    # Blocks in the stored layout: a K-major operand has K last (A (m, k), B (n, k)), MN-major has K first.
    a_block = (t.m, t.k) if s.a.major == "k" else (t.k, t.m)
    b_block = (t.n, t.k) if s.b.major == "k" else (t.k, t.n)
    for name, (rows, cols), dt, fld in (
        ("A", a_block, s.a.dtype, ("tile",)), ("B", b_block, s.b.dtype, ("tile",)), ("out", (t.m, t.n), s.out.dtype, ("tile",)),
    ):
        sub = sublanes(dt)
        if rows % sub or cols % 128:
            yield Finding("PAL001", "error", f"{name} block {rows}x{cols} ({dt}) is not divisible by ({sub}, 128) on "
                          f"{ctx.tpu.name}", "", fld)


def tpu_sublanes(ctx: RuleContext, dt: DType) -> int:
    """A block's row multiple for `dt` on the context's TPU (PAL001's source)."""
    assert ctx.tpu is not None
    if dt == DType.bf16:
        return ctx.tpu.bf16_sublanes
    return 8 * max(1, 4 // dt.bytes) if dt.bytes < 2 else 8


@RULES.rule("PAL002", "TPU MXU-aligned tiles", is_tpu)
def tpu_mxu_alignment(ctx: RuleContext) -> Iterator[Finding]:
    """The MXU is 128x128 before v6 and 256x256 on v6e/v7x (jax `tpu_info.py`); smaller tile.n/k leave
    it partly idle (warning, not a hard limit)."""
    assert ctx.tpu is not None
    t, mxu = ctx.spec.tile, ctx.tpu.mxu
    if t.n % mxu or t.k % mxu:
        yield Finding("PAL002", "warning", f"tile n={t.n}, k={t.k} are not multiples of the {mxu}x{mxu} MXU on "
                      f"{ctx.tpu.name}", "", ("tile",))


@RULES.rule("PAL003", "TPU pipeline buffering depth", is_tpu)
def tpu_buffering(ctx: RuleContext) -> Iterator[Finding]:
    """The Pallas TPU pipeline buffers each BlockSpec once or twice only: lowering `pl.Buffered(3)`
    fails with "Only single (1) and double (2) buffering are supported" (jax 0.10.2
    `_src/pallas/mosaic/lowering.py`; measured by lowering for TPU on a CPU machine)."""
    if ctx.ab_stages not in (1, 2):
        yield Finding("PAL003", "error", f"pipeline.ab_stages = {ctx.ab_stages}: Pallas TPU buffers a block 1 or 2 "
                      "deep", 'use ab_stages = 2 (or "auto")', ("pipeline", "ab_stages"))


# --- Pallas Mosaic GPU (design.py, templates/gemm/pallas/gemm_mgpu.py.jinja) ----------------------
MGPU_OPERANDS = (DType.f16, DType.bf16, DType.fp8_e4m3, DType.fp8_e5m2)
# e4m3 x e5m2: jax 0.10.2's Mosaic GPU refuses the mix ("Mixed input dtypes for matrix multiplication
# unsupported"), 0.11.2's lowers it (tests/data/grid_mgpu_jax0112.json, seed 11 of tests/grids/mgpu.py on
# 2026-11-27: 36 specs PAL004's mix alone refused all lowered) and computes it (tests/gpu/test_pallas_gpu.py,
# both ways on 7 shapes): the installed jax decides
MIXED_FP8 = "jax 0.10.2 refuses an e4m3 x e5m2 mix, 0.11.2 lowers it: the installed jax decides"
BF16_TO_FP8 = "jax 0.10.2 refuses a bf16 -> fp8 conversion, 0.11.2 lowers it: the installed jax decides"


@RULES.rule("PAL004", "Mosaic GPU operand and accumulator dtypes", MOSAIC_GPU)
def mgpu_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """The Mosaic GPU kernel stages f16/bf16/fp8 tiles by TMA and accumulates in an f32 `plgpu.ACC`
    (its epilogue is f32 math): wgmma's tf32 and s8 forms (jax `mosaic/gpu/wgmma.py` has them) and f16
    accumulators are not rendered by this design. fp8 runs (K-major only: MAJ001), measured on the H200
    (tests/gpu/test_pallas_gpu.py). A and B share one dtype: Mosaic GPU refuses an e4m3 x e5m2 mix
    that wgmma itself takes ("Mixed input dtypes for matrix multiplication unsupported", jax 0.10.2
    lowering for CUDA: tests/grids/mgpu.py)."""
    for side in ("a", "b"):
        dt = getattr(ctx.spec, side).dtype
        if dt not in MGPU_OPERANDS:
            yield Finding("PAL004", "error", f"{side.upper()} is {dt}: the {ctx.target} kernel takes "
                          f"{', '.join(map(str, MGPU_OPERANDS))} operands", "use a Triton or CuTe target for this dtype",
                          (side, "dtype"))
    a, b = ctx.spec.a.dtype, ctx.spec.b.dtype
    if a != b and a in MGPU_OPERANDS and b in MGPU_OPERANDS:
        fp8 = a.is_fp8 and b.is_fp8
        yield Finding("PAL004", "error", f"A is {a} and B is {b}: Mosaic GPU's matmul takes one input dtype for "
                      f"both{' up to jax 0.10' if fp8 else ''}", f'use the same dtype for both (b.dtype = "{a}")',
                      ("b", "dtype"), Near(MIXED_FP8, False, compiled.lowers) if fp8 else None)
    if ctx.spec.accumulator != DType.f32 and ctx.spec.a.dtype.is_float:
        yield Finding("PAL004", "error", f"accumulator = {ctx.spec.accumulator}: the {ctx.target} kernel accumulates "
                      "in f32", 'set accumulator = "f32"', ("accumulator",))


@RULES.rule("PAL005", "Mosaic GPU residual staging", MOSAIC_GPU)
def mgpu_residual(ctx: RuleContext) -> Iterator[Finding]:
    """A residual's subtile is TMA-loaded into the output's SMEM staging slot before it is added (JAX's
    Hopper matmul stages its `c` operand the same way), so it has the output's dtype: the slot holds
    64 x 64 output elements (templates/gemm/pallas/gemm_mgpu.py.jinja)."""
    for i, op in enumerate(ctx.spec.epilogue):
        if op.op == "residual" and op.dtype != ctx.spec.out.dtype:
            yield Finding("PAL005", "error", f"residual {op.name!r} is {op.dtype} but out is {ctx.spec.out.dtype}: on "
                          f"{ctx.target} a residual is staged in the output's SMEM slot ({ctx.spec.out.dtype.bytes} "
                          "B per element)", f'set its dtype = "{ctx.spec.out.dtype}"', ("epilogue", i, "dtype"))


@RULES.rule("PAL006", "Mosaic GPU warpgroup split and epilogue subtiles", MOSAIC_GPU)
def mgpu_tile_split(ctx: RuleContext) -> Iterator[Finding]:
    """Two consumer warpgroups split tile.n; each issues wgmma on tile.m x tile.n/2, so tile.n/2 is a wgmma
    N (8..256, step 8: PTX wgmma), and stores it through whole epi_m x epi_n subtiles (64x64, or the
    warpgroup's slice where smaller: kinds/gemm/designs/pallas/design.py `mgpu_layout`). With `pallas.swap_ab`
    each warpgroup's tile.n/2 is wgmma's rows instead: a multiple of 64 (MMA001 checks tile.m, the
    columns)."""

    t = ctx.spec.tile
    wg_n = t.n // MGPU_CONSUMER_WGS
    if swaps(ctx.spec):
        if t.n % (64 * MGPU_CONSUMER_WGS):
            yield Finding("PAL006", "error", f"tile.n = {t.n} splits into {MGPU_CONSUMER_WGS} warpgroup slices of "
                          f"{t.n / 2:g}: with pallas.swap_ab each is wgmma's rows, a multiple of 64",
                          f"use tile.n a multiple of {64 * MGPU_CONSUMER_WGS}", ("tile", "n"))
            return
    elif t.n % (8 * MGPU_CONSUMER_WGS) or not 8 <= wg_n <= 256:
        yield Finding("PAL006", "error", f"tile.n = {t.n} splits into {MGPU_CONSUMER_WGS} warpgroup slices of {t.n / 2:g}: "
                      "not a wgmma N (8..256, step 8)", f"use tile.n a multiple of {8 * MGPU_CONSUMER_WGS}", ("tile", "n"))
        return
    lay = mgpu_layout(ctx.spec)
    if t.m % lay.epi_m or wg_n % lay.epi_n:
        yield Finding("PAL006", "error", f"a warpgroup's {t.m}x{wg_n} slice is not a whole number of {lay.epi_m}x{lay.epi_n} "
                      "epilogue subtiles", f"use tile.n a multiple of {2 * lay.epi_n}", ("tile",))


@RULES.rule("PAL007", "Mosaic GPU clusters", MOSAIC_GPU)
def mgpu_cluster(ctx: RuleContext) -> Iterator[Finding]:
    """The Mosaic GPU kernel launches a cluster of one CTA or a pair along M or N (JAX's Hopper matmul,
    pallas/ops/gpu/hopper_matmul_mgpu.py `cluster_dimension`): the pair shares its common operand's tile,
    each CTA loading half of it by TMA multicast (`BlockSpec(collective_axes=("cluster",))`), so that
    tile must split in two whole 8-row TMA boxes: tile.n for a pair along M (B shared), tile.m along N.
    A persistent grid holds num_sms / 2 pairs."""
    c, t = ctx.spec.cluster, ctx.spec.tile
    if c.size == 1:
        return
    if c.size != 2:
        yield Finding("PAL007", "error", f"cluster {c.m}x{c.n}: the {ctx.target} kernel launches 1x1, 2x1 or 1x2 clusters",
                      "use cluster = { m = 2, n = 1 } or { m = 1, n = 2 }", ("cluster",))
        return
    shared, extent = ("tile.n", t.n) if c.m == 2 else ("tile.m", t.m)
    if extent % 16:
        yield Finding("PAL007", "error", f"cluster {c.m}x{c.n} multicasts a {extent}-wide tile ({shared}) in two halves of "
                      f"{extent / 2:g}: not a multiple of 8 rows", f"use {shared} a multiple of 16", ("tile",))


@RULES.rule("PAL008", "Mosaic GPU SMEM swizzles", MOSAIC_GPU)
def mgpu_swizzle(ctx: RuleContext) -> Iterator[Finding]:
    """Mosaic GPU stages each TMA'd tile in SMEM with a 32, 64 or 128 B swizzle ("Swizzle 16 is not
    supported. Only 32, 64 and 128 are accepted"), and its wgmma takes one swizzle for A and B
    ("Non-matching swizzles of operands a and b in WGMMA") and K in groups of swizzle/bytes elements
    ("K must be a multiple of ..."): jax 0.10.2 `mosaic/gpu/wgmma.py`, `dialect_lowering.py`. So one
    swizzle must divide A's and B's contiguous extents in bytes (K for K-major; tile.m for MN-major A;
    for MN-major B each warpgroup's tile.n/2 slice, which starts on a whole swizzle tile) and tile.k's;
    the output's epilogue subtile row must span a multiple of 32 B. Found by lowering for CUDA
    (tests/grids/mgpu.py), where such specs failed as layout inference, slice or swizzle errors."""

    s, t = ctx.spec, ctx.spec.tile
    sw, lay = mgpu_swizzles(s), mgpu_layout(s)
    if not sw.ab:
        a_ext = f"tile.k {t.k}" if s.a.major == "k" else f"tile.m {t.m}"
        b_ext = f"tile.k {t.k}" if s.b.major == "k" else f"tile.n/2 {lay.wg_n}"
        yield Finding("PAL008", "error", f"no 32/64/128 B swizzle divides A's ({a_ext} x {s.a.dtype.bytes} B), B's "
                      f"({b_ext} x {s.b.dtype.bytes} B) and K's (tile.k {t.k}) extents: Mosaic GPU's wgmma takes one "
                      "swizzle for both operands and K in whole swizzle groups",
                      f"use tile.k a multiple of {128 // s.a.dtype.bytes} (and tile.m, tile.n/2 of "
                      f"{32 // s.a.dtype.bytes})", ("tile",))
    if not sw.out:
        yield Finding("PAL008", "error", f"the output's {lay.epi_m}x{lay.epi_n} epilogue subtile rows span "
                      f"{lay.epi_n * s.out.dtype.bytes} B ({s.out.dtype}): Mosaic GPU swizzles SMEM in 32/64/128 B only",
                      f"use tile.n a multiple of {2 * 32 // s.out.dtype.bytes}", ("tile", "n"))


@RULES.rule("PAL009", "Mosaic GPU epilogue ops", MOSAIC_GPU)
def mgpu_epilogue_ops(ctx: RuleContext) -> Iterator[Finding]:
    """Two epilogues do not lower on Mosaic GPU (jax 0.10.2, found by lowering for CUDA: tests/grids/mgpu.py):
    the erf form of GELU (an activation, or a gated op's fn: GeGLU's erf form), for which layout inference has no rule ("No layout inference rule defined for
    math.erf", `mosaic/gpu/layout_inference.py`; tanh, exp and the rest lower); and an fp8 output whose
    chain ends in a cast to bf16 (only f32 casts after it): the bf16 -> f32 -> fp8 round trip becomes a
    direct bf16 -> fp8 conversion, which it refuses ("Hardware has no support for converting from bf16 to
    f8E4M3FN"); any other op after the cast, or a cast to f16, lowers. jax 0.11.2 lowers that conversion (2 of
    2 such specs of tests/grids/mgpu.py's seed 11, 2026-11-27) and computes it (tests/gpu/test_pallas_gpu.py):
    that refusal is the installed jax's to settle. The erf GELU still fails there (tests/gpu's xfail)."""
    chain = ctx.spec.epilogue
    for i, op in enumerate(chain):
        if op.op in ("activation", "gated") and op.fn == "gelu":  # a gated op's fn: the same formula on gate
            yield Finding("PAL009", "error", f"{op.op} gelu (erf form) does not lower on {ctx.target}: Mosaic GPU "
                          "has no layout rule for math.erf", 'use fn = "gelu_tanh"', ("epilogue", i, "fn"))
    last = next((i for i in range(len(chain) - 1, -1, -1)
                 if not (chain[i].op == "cast" and chain[i].dtype == DType.f32)), None)
    out = ctx.spec.out.dtype
    if last is not None and chain[last].op == "cast" and chain[last].dtype == DType.bf16 and out.bytes == 1:
        yield Finding("PAL009", "error", f"the epilogue ends in a cast to bf16 and out is {out}: Mosaic GPU lowers the "
                      "bf16 -> f32 -> fp8 round trip as a bf16 -> fp8 conversion, which it cannot do",
                      "drop the cast (the store rounds to out's dtype) or cast to f16", ("epilogue", last, "dtype"),
                      Near(BF16_TO_FP8, False, compiled.lowers))


@RULES.rule("PAL010", "Mosaic GPU swap_ab with a residual", MOSAIC_GPU)
def mgpu_swap_ab(ctx: RuleContext) -> Iterator[Finding]:
    """The swapped kernel (`pallas.swap_ab`, templates/gemm/pallas/gemm_mgpu.py.jinja) holds out^T's subtiles in
    registers; a residual's subtile is TMA-staged in out's orientation and read back through the slot's
    transposed view (`_mg.staged`). With a tile.m over 64 (two 64-column subtiles of out^T per tile row)
    Mosaic GPU's layout inference found no layout for that read after a scale, as gemm_residual_bf16's
    chain has (jax 0.10.2, lowering for CUDA; without the scale a 128-row tile lowered once in
    tests/grids/mgpu.py --swap): refused for any chain, decode tiles being 8..64. Up to 64 rows it lowers
    and runs (tests/gpu/test_mgpu_swap_ab_gpu.py at 16 and 64 rows on an H100 and an H200; 8 and 24 rows in
    bench/results/2026-11-26-h100-s13-probe-swap-clusters.log)."""
    s, t = ctx.spec, ctx.spec.tile
    if not s.pallas.swap_ab or t.m <= 64:
        return
    for i, op in enumerate(s.epilogue):
        if op.op == "residual":
            yield Finding("PAL010", "error", f"residual {op.name!r} with pallas.swap_ab and tile.m = {t.m}: the swapped "
                          f"{ctx.target} kernel reads a residual through a transposed SMEM view, which Mosaic GPU "
                          "lowers for tile.m <= 64 only", "use tile.m <= 64 (decode tiles are 8..64)", ("epilogue", i))


@RULES.rule("PAL012", "Mosaic GPU gated epilogue configurations", MOSAIC_GPU)
def mgpu_gated(ctx: RuleContext) -> Iterator[Finding]:
    """A gated epilogue (templates/gemm/pallas/gemm_mgpu.py.jinja, the grouped kernel's loads: B (K, 2N) viewed with
    a gate / up axis, a gate and an up tile a K step, two accumulators a consumer warpgroup) is rendered on the
    unswapped, unclustered kernel: `pallas.swap_ab` would put both halves on wgmma's row side and a cluster would
    multicast two B tiles, neither built. An interleaved N-major B has its gate columns 2 elements apart along its
    contiguous dim, which no TMA box holds (cuTensorMapEncodeTiled: the first dim is contiguous); fp8 operands would
    need their scales before the gated op, which the chain (gated first) cannot say. The grouped design's MGP003."""
    s, op = ctx.spec, gated_op(ctx.spec.epilogue)
    if op is None:
        return
    if s.pallas.swap_ab:
        yield Finding("PAL012", "error", f"pallas.swap_ab with a gated epilogue ({op.fn}): the {ctx.target} kernel "
                      "swaps one accumulator, not gate and up", "drop pallas.swap_ab", ("pallas", "swap_ab"))
    if s.cluster.size > 1:
        yield Finding("PAL012", "error", f"cluster {s.cluster.m}x{s.cluster.n} with a gated epilogue: the {ctx.target} "
                      "kernel multicasts one B tile, not gate and up", "drop cluster (1x1)", ("cluster",))
    if op.layout == "interleaved" and s.b.major != "k":
        yield Finding("PAL012", "error", f"a gated epilogue (interleaved) with b.major = \"{s.b.major}\": gate column j is "
                      f"B's column 2j, {2 * s.b.dtype.bytes} B from the next gate column along B's contiguous dim, and "
                      f"TMA reads contiguous {s.b.dtype.bytes}-byte elements there",
                      'use b.major = "k" or layout = "halves"', ("epilogue", 0, "layout"))
    for side in ("a", "b"):
        if getattr(s, side).dtype.is_fp8:
            yield Finding("PAL012", "error", f"{side.upper()} is {getattr(s, side).dtype} with a gated epilogue: the "
                          f"{ctx.target} kernel renders gated epilogues on bf16 and f16 operands",
                          "use bf16 or f16 operands", (side, "dtype"))


def register_findings(ctx: RuleContext) -> Iterator[Finding]:
    """REG001 on Mosaic GPU: above 255 registers per thread the accumulator cannot be held (error); above
    192 little room is left for addresses and the epilogue (warning: spills)."""
    regs, threads = ctx.acc_registers, ctx.acc_threads
    if regs > 255:
        yield Finding("REG001", "error", f"accumulator needs {regs} registers per thread ({threads} threads) > 255",
                      "use more warps or a smaller tile", ("tile",))
    elif regs > 192:
        yield Finding("REG001", "warning", f"accumulator needs {regs} of 255 registers per thread ({threads} threads): "
                      "expect spills", "use more warps or a smaller tile", ("tile",))


def option_findings(ctx: RuleContext) -> Iterator[Finding]:
    """OPT001 on Pallas: `pallas.vmem_limit_bytes` is Mosaic TPU's scoped-VMEM limit (no VMEM on Mosaic GPU);
    `pallas.swap_ab` swaps wgmma's operands (the Mosaic GPU kernel's; the TPU kernel has no wgmma)."""
    s = ctx.spec
    if swaps(s) and is_tpu(ctx.info):
        yield Finding("OPT001", "error", f"pallas.swap_ab is a Mosaic GPU setting; {ctx.target} (Mosaic TPU) does not "
                      "swap its operands", "drop pallas.swap_ab, or set it for pallas:gpu_sm90 alone (per_target)",
                      ("pallas", "swap_ab"))
    if s.pallas.vmem_limit_bytes is not None and not is_tpu(ctx.info):
        yield Finding("OPT001", "error", f"pallas.vmem_limit_bytes = {s.pallas.vmem_limit_bytes} is a TPU "
                      f"setting; {ctx.target} (Mosaic GPU) has no VMEM", "drop pallas.vmem_limit_bytes",
                      ("pallas", "vmem_limit_bytes"))


@RULES.rule("PAL013", "TPU gated epilogue: halves", is_tpu)
def tpu_gated(ctx: RuleContext) -> Iterator[Finding]:
    """The TPU kernel reads a gated B (tpu_gated.py) as two plain blocks a step: B ([batch,] 2N, K) K-major through its
    ([batch,] 2, N, K) view, the half a leading (squeezed) block dim; B ([batch,] K, 2N) N-major as stored, the gate
    block j and the up block j + N / block, which needs N a multiple of the blocks along N (a shape: the entry checks
    it when it traces). Pallas TPU takes a block's last two dims only as whole (8, 128) tiles or the array's full
    extent (jax `pallas/mosaic/lowering.py`; checked by lowering for TPU on the CPU, jax 0.10.2): interleaved K-major,
    (N, 2, K), puts the half on the sublane dim (a one-half block of 1 row is refused; a block of both sits in VMEM
    padded from 2 rows to a sublane tile, 4x to 8x, and is split by a sublane gather), interleaved N-major strides
    the lanes. The grouped TPU design's GRP204. 8-bit operands (int8's int32 accumulator, fp8) with a gated op are
    not rendered."""
    s, op = ctx.spec, gated_op(ctx.spec.epilogue)
    if op is None:
        return
    if op.layout != "halves":
        yield Finding("PAL013", "error", f"a gated epilogue ({op.fn}, interleaved): gate column j is B's row 2j, a block "
                      f"of 1 row on the sublane dim of the {ctx.target} kernel's (N, 2, K) view, which TPU blocks (8 x "
                      "128 tiles) do not take", 'set layout = "halves"', ("epilogue", 0, "layout"))
    for side in ("a", "b"):
        if getattr(s, side).dtype.bytes == 1:
            yield Finding("PAL013", "error", f"{side.upper()} is {getattr(s, side).dtype} with a gated epilogue: the "
                          f"{ctx.target} kernel renders gated epilogues on bf16 and f32 operands", "use bf16 or f32",
                          (side, "dtype"))


@RULES.rule("PAL011", "TPU backward: a gradient's blocks in its stored layout", is_tpu)
def tpu_backward_blocks(ctx: RuleContext) -> Iterator[Finding]:
    """A `training` backward writes each gradient in its operand's stored layout. Where that is the transpose of
    the backward GEMM's logical output (dA of an mn-major A is stored (K, M); dB of a K-major B (N, K)), the TPU
    kernel computes the transposed product (templates/gemm/pallas/backward_tpu.jinja) and writes tile.n x tile.m
    blocks of it: their lanes are the companion's tile.m. PAL001 checks each companion's blocks in the logical
    layout (its operands' blocks are the kernel's); this checks the stored output block, by PAL001's source."""
    assert ctx.tpu is not None
    for c in ctx.companions:
        g = oriented(c.companion, ctx.spec, c.spec.tile, JNP_DTYPES)  # type: ignore[attr-defined]
        if not g.transposed:
            continue
        dt, sub = c.spec.out.dtype, tpu_sublanes(ctx, c.spec.out.dtype)  # type: ignore[attr-defined]
        if g.block_p % sub or g.block_q % 128:
            grad, stored = ("dA", "(K, M): a.major = mn") if c.companion == "dgrad" else ("dB", "(N, K): b.major = k")
            yield Finding("PAL011", "error", f"backward {c.companion}: {grad} is stored {stored}, so its kernel writes "
                          f"{g.block_p}x{g.block_q} blocks (training.{c.companion}.tile n x m, {dt}), not divisible by "
                          f"({sub}, 128) on {ctx.tpu.name}",
                          f"make training.{c.companion}.tile.m a multiple of 128", ("training", c.companion))


@RULES.rule("PAL014", "TPU backward: the VMEM of the blocks beyond each companion's", is_tpu)
def tpu_backward_vmem(ctx: RuleContext) -> Iterator[Finding]:
    """VMEM001 checks each backward GEMM as the GEMM its companion is (A, B, out and the accumulator; a gated op's up
    block and accumulator; the chain its kernel applies, a recompute's dOut read as a residual is). The pre GEMM's
    pallas_call (templates/gemm/pallas/backward_tpu.jinja) holds more: forward_pre stores pre beside out (a gated op's
    gate and up planes), a gated recompute G's up plane beside its gate plane, each double-buffered; and the columns
    pass (grad_cols) holds dOut, pre and G blocks (or the one it sums) at the forward's tile, with the bias gradient's.
    Each pallas_call's figure must fit VMEM (`pre_role_vmem`, `grad_cols_vmem` in training.py: the figures the plan's
    scoped limits are made from)."""
    assert ctx.tpu is not None
    for c in ctx.companions:
        if c.companion not in ("forward_pre", "recompute") or not c.budget.fits:  # VMEM001 says it where it does not
            continue
        extra = pre_role_vmem(ctx.spec, c.companion, c.spec.tile)  # type: ignore[attr-defined]
        gated = gated_op(ctx.spec.epilogue) is not None
        what = "pre's" + (" gate and up" if gated else "") if c.companion == "forward_pre" else "G's up"
        if c.budget.total + extra > c.budget.capacity:
            yield Finding("PAL014", "error", f"backward {c.companion}: needs {c.budget.total + extra} B of VMEM > "
                          f"{c.budget.capacity} B on {ctx.tpu.name} (the GEMM's {c.budget.total} + {what} blocks, "
                          f"double-buffered: {extra})", "set a smaller training.pre.tile", ("training", "pre"))
    cols = grad_cols_vmem(ctx.spec) if getattr(ctx.spec, "training", None) is not None else 0
    if cols > ctx.tpu.vmem_bytes:
        yield Finding("PAL014", "error", f"backward grad_cols: its {ctx.spec.tile.m}x{ctx.spec.tile.n} blocks (the "
                      f"forward's tile: dOut, pre and G, or the one it sums, double-buffered) need {cols} B of VMEM > "
                      f"{ctx.tpu.vmem_bytes} B on {ctx.tpu.name}", "shrink the tile", ("tile",))


@RULES.rule("PAL015", "TPU fp8 backward: the 8-bit A block wgrad reads", is_tpu)
def tpu_fp8_backward_blocks(ctx: RuleContext) -> Iterator[Finding]:
    """An fp8 forward's backward (training.py: the gradients of the dequantized operands, in the output's dtype) runs
    dgrad and wgrad as GEMMs of that dtype, which check takes as such (VMEM001, PAL001 at `training.*`), but they read
    B and A as stored, 8-bit, converting each block in the kernel. wgrad's A block has M on its rows: tile.k of
    `training.wgrad` for a K-major A ((M, K) read as (tile.k, tile.m)), its tile.m for an mn-major one, which must be
    a multiple of the 8-bit sublane tile (32: PAL001's source, jax `_src/pallas/mosaic/lowering.py`) where PAL001 on
    the 16-bit companion asks 8 or 16. dgrad's B block needs no rule: its rows are lanes of G's or dA's block, which
    PAL001 makes multiples of 128 (the grouped design's GRP205, for the same reason)."""
    s = ctx.spec
    if getattr(s, "training", None) is None or not s.a.dtype.is_fp8:
        return
    for c in ctx.companions:
        if c.companion != "wgrad":
            continue
        axis = "k" if s.a.major == "k" else "m"
        rows, sub = getattr(c.spec.tile, axis), tpu_sublanes(ctx, s.a.dtype)  # type: ignore[attr-defined]
        if rows % sub:
            yield Finding("PAL015", "error", f"training.wgrad: the backward reads A ({s.a.dtype}, {s.a.major}-major) as "
                          f"stored in blocks of {rows} rows (tile.{axis} = {rows}), not a multiple of the {sub}-row "
                          f"sublane tile of an 8-bit block on {ctx.tpu.name}",  # type: ignore[union-attr]
                          f"set training.wgrad.tile.{axis} to a multiple of {sub}", ("training", "wgrad", "tile", axis))
