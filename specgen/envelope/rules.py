"""Envelope rules: small named functions with ids, each citing its source (../shared/HARDWARE.md rows).

A rule gets a `RuleContext` (the `Resolved` of resolve.py: spec, target, its row of the target table,
device, resolved stages, budget, registers) and yields `Finding`s whose messages carry the numbers
compared. Hard limits are errors; example-kernel conventions are warnings. A rule names the targets it
concerns by their table facts (never by arch name) and the spec kinds it concerns (`kinds`): it never
runs elsewhere. Every rule has a unit test on each side of its boundary (tests/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from specgen.envelope.budget import MIN_STAGES
from specgen.resolve import Resolved, max_ab_stages, memory
from specgen.spec.dtypes import DType
from specgen.spec.models import GemmSpec, Target
from specgen.targets import Backend, TargetInfo, is_mgpu_target, target_info

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    hint: str = ""
    field: tuple[str | int, ...] = ()


RuleContext = Resolved  # what every rule reads: resolved once per (spec, target) by resolve.py


RuleFn = Callable[[RuleContext], Iterator[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    applies: Callable[[Target | TargetInfo], bool]
    fn: RuleFn = field(repr=False)
    kinds: tuple[str, ...] = ("gemm",)  # the spec kinds the rule concerns


RULES: list[Rule] = []


def rule(rule_id: str, title: str, applies: Callable[[Target | TargetInfo], bool],
         kinds: tuple[str, ...] = ("gemm",)) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(rule_id, title, applies, fn, kinds))
        return fn

    return register


# --- which targets a rule concerns: facts of the target table ------------------------------------------
def _info(t: Target | TargetInfo) -> TargetInfo:
    return t if isinstance(t, TargetInfo) else target_info(t)


def is_gpu(t: Target | TargetInfo) -> bool:
    return _info(t).memory == "smem"


def is_tpu(t: Target | TargetInfo) -> bool:
    return _info(t).memory == "vmem"


def is_triton(t: Target | TargetInfo) -> bool:
    return t.backend is Backend.triton


def uses_wgmma(t: Target | TargetInfo) -> bool:
    """The kernel issues wgmma itself (its tile maps onto the instruction): CuTe sm90, Mosaic GPU."""
    info = _info(t)
    return info.issues_mma and info.mma == "wgmma"


def uses_tcgen05(t: Target | TargetInfo) -> bool:
    info = _info(t)
    return info.issues_mma and info.mma == "tcgen05"


def uses_tma_boxes(t: Target | TargetInfo) -> bool:
    """Raw TMA boxes (<= 256 per dim): CuTe and Mosaic GPU. Triton splits its block shapes itself."""
    return _info(t).tma_boxes


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def k_per_instruction(dtype: DType) -> int:
    """MMA K per instruction: 32 bytes of K (tf32 8, 16-bit 16, 8-bit 32). PTX wgmma / tcgen05."""
    return 32 // dtype.bytes


# --- dtypes --------------------------------------------------------------------------------------------
_MMA_ACC: dict[str, dict[DType, tuple[DType, ...]]] = {
    # CD cute/nvgpu/warpgroup/mma.py and PTX wgmma: f16 -> f16/f32; bf16 -> f32; tf32 -> f32; fp8 -> f16/f32; s8 -> s32
    "wgmma": {
        DType.f16: (DType.f16, DType.f32), DType.bf16: (DType.f32,), DType.tf32: (DType.f32,),
        DType.fp8_e4m3: (DType.f16, DType.f32), DType.fp8_e5m2: (DType.f16, DType.f32), DType.int8: (DType.int32,),
    },
    # PTX tcgen05.mma kinds: f16/bf16 (bf16 acc f32 only); tf32 -> f32; f8f6f4 -> f16/f32; i8 -> s32
    "tcgen05": {
        DType.f16: (DType.f16, DType.f32), DType.bf16: (DType.f32,), DType.tf32: (DType.f32,),
        DType.fp8_e4m3: (DType.f16, DType.f32), DType.fp8_e5m2: (DType.f16, DType.f32), DType.int8: (DType.int32,),
    },
}


@rule("DT001", "operand and accumulator dtypes the MMA instruction takes", is_gpu)
def mma_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """A and B share a dtype unless both are fp8 (e4m3/e5m2 mix); the accumulator must be one the
    instruction produces. Sources: PTX wgmma and tcgen05 tables; CD `warpgroup/mma.py`,
    `tcgen05/mma.py`; Triton `language/semantic.py` (tl.dot: same dtype unless both fp8)."""
    s = ctx.spec
    a, b, acc = s.a.dtype, s.b.dtype, s.accumulator
    if a != b and not (a.is_fp8 and b.is_fp8):
        yield Finding("DT001", "error", f"A is {a} but B is {b}: the MMA takes one dtype for both (fp8 formats may mix)",
                      "give A and B the same dtype", ("b", "dtype"))
        return
    if ctx.backend is Backend.triton:
        # tl.dot: int8 -> int32; f16 may accumulate in f16 (out_dtype); everything else in f32
        legal = {DType.int8: (DType.int32,), DType.f16: (DType.f32, DType.f16)}.get(a, (DType.f32,))
    else:
        table = _MMA_ACC[ctx.info.mma]
        if a not in table:
            yield Finding("DT001", "error", f"{ctx.target} has no tensor-core MMA for {a} operands",
                          "use tf32 for f32 data" if a == DType.f32 else "", ("a", "dtype"))
            return
        legal = table[a]
    if acc not in legal:
        yield Finding("DT001", "error", f"{a} operands accumulate in {'/'.join(map(str, legal))} on {ctx.target}, not {acc}",
                      f"set accumulator = \"{legal[0]}\"", ("accumulator",))


@rule("DT002", "fp8 needs compute capability 8.9 or later in Triton", is_triton)
def triton_fp8_arch(ctx: RuleContext) -> Iterator[Finding]:
    """tl.dot on fp8e4nv needs cc >= 89 (Triton `language/semantic.py`); sm90 and sm100 both qualify."""
    assert ctx.gpu is not None
    for side in ("a", "b"):
        dt = getattr(ctx.spec, side).dtype
        if dt.is_fp8 and ctx.gpu.compute_capability < 89:
            yield Finding("DT002", "error", f"{side.upper()} is {dt}: Triton's fp8 dot needs cc >= 89, {ctx.target} is "
                          f"cc {ctx.gpu.compute_capability}", "", (side, "dtype"))


@rule("DT003", "TPU MXU dtypes", is_tpu)
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


@rule("DT004", "accumulator kind matches the operands", lambda t: True)
def accumulator_kind(ctx: RuleContext) -> Iterator[Finding]:
    """Integer operands accumulate in int32, float operands in a float type (every MMA table)."""
    a, acc = ctx.spec.a.dtype, ctx.spec.accumulator
    if a.is_float != acc.is_float or acc in (DType.int8, DType.fp8_e4m3, DType.fp8_e5m2, DType.bf16, DType.tf32):
        want = "int32" if not a.is_float else "f32"
        yield Finding("DT004", "error", f"{a} operands cannot accumulate in {acc}", f"set accumulator = \"{want}\"",
                      ("accumulator",))


# --- major modes -----------------------------------------------------------------------------------------
@rule("MAJ001", "wgmma reads only 16-bit operands MN-major", uses_wgmma)
def wgmma_major(ctx: RuleContext) -> Iterator[Finding]:
    """Only f16/bf16 may be MN-major (transposed) in wgmma; fp8, int8 and tf32 must be K-major for A and B.
    Sources: CD `warpgroup/mma.py`; cutlass `mma_sm90_gmma.hpp`; jax `mosaic/gpu/wgmma.py`.
    (tcgen05 and Triton both accept MN-major 8-bit operands: not checked there.)"""
    for side in ("a", "b"):
        op = getattr(ctx.spec, side)
        if op.major == "mn" and not op.dtype.is_16bit:
            yield Finding("MAJ001", "error", f"{side.upper()} is {op.dtype} and MN-major: wgmma transposes only 16-bit "
                          "operands", f"store {side.upper()} K-major ({side}.major = \"k\")", (side, "major"))


# --- MMA shapes ------------------------------------------------------------------------------------------
@rule("MMA001", "wgmma instruction shape", uses_wgmma)
def wgmma_shape(ctx: RuleContext) -> Iterator[Finding]:
    """wgmma: M = 64 per warpgroup, N 8..256 in steps of 8, K a multiple of 32 bytes of the dtype.
    Source: CD `cute/nvgpu/warpgroup/mma.py`, PTX wgmma."""
    t, kk = ctx.spec.tile, k_per_instruction(ctx.spec.a.dtype)
    if t.m % 64:
        yield Finding("MMA001", "error", f"tile.m = {t.m} is not a multiple of 64 (wgmma M per warpgroup)",
                      f"use tile.m = {max(64, t.m // 64 * 64)}", ("tile", "m"))
    if not (8 <= t.n <= 256 and t.n % 8 == 0):
        yield Finding("MMA001", "error", f"tile.n = {t.n} is outside wgmma N 8..256 step 8", "", ("tile", "n"))
    if t.k % kk:
        yield Finding("MMA001", "error", f"tile.k = {t.k} is not a multiple of {kk} (wgmma K for {ctx.spec.a.dtype})",
                      "", ("tile", "k"))


@rule("MMA002", "tcgen05 (UMMA) instruction shape", uses_tcgen05)
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


def triton_mma_rows(spec: GemmSpec) -> tuple[int, str]:
    """The rows of a Triton tile's MMA and the tile field that holds them: tile.m, or tile.n with
    `triton.swap_ab` (the kernel computes the tile transposed: templates/triton/tile.jinja `dot`)."""
    return (spec.tile.n, "n") if spec.triton.swap_ab else (spec.tile.m, "m")


@rule("MMA003", "tl.dot minimum shapes", is_triton)
def triton_dot_shape(ctx: RuleContext) -> Iterator[Finding]:
    """tl.dot needs K >= 16 (16-bit), 32 (8-bit), 8 (32-bit) and M, N >= 16. Source: Triton
    `language/semantic.py`; measured. A block of fewer than 64 MMA rows compiles but does not use wgmma
    (warning): the rows are tile.m, or tile.n with `triton.swap_ab` (the kernel computes the tile
    transposed, templates/triton/tile.jinja `dot`)."""
    t, dt = ctx.spec.tile, ctx.spec.a.dtype
    kmin = {1: 32, 2: 16, 4: 8}[dt.bytes]
    if t.k < kmin:
        yield Finding("MMA003", "error", f"tile.k = {t.k} < {kmin}, tl.dot's minimum K for {dt}", f"use tile.k = {kmin}",
                      ("tile", "k"))
    for dim in ("m", "n"):
        if getattr(t, dim) < 16:
            yield Finding("MMA003", "error", f"tile.{dim} = {getattr(t, dim)} < 16, tl.dot's minimum", "", ("tile", dim))
    rows, dim = triton_mma_rows(ctx.spec)
    if ctx.info.mma == "wgmma" and rows < 64:
        if dim == "n":
            yield Finding("MMA003", "warning", f"tile.n = {t.n} < 64 with triton.swap_ab (tile.n is the MMA's rows): "
                          "Triton will not use wgmma on sm90", "use tile.n >= 64", ("tile", "n"))
        else:
            hint = "set triton.swap_ab = true (tile.n becomes the MMA's rows)" if t.n >= 64 else ""
            yield Finding("MMA003", "warning", f"tile.m = {t.m} < 64: Triton will not use wgmma on sm90", hint,
                          ("tile", "m"))


@rule("MMA004", "tl.dot falls back from the arch's tensor-core MMA", is_triton)
def triton_mma_fallback(ctx: RuleContext) -> Iterator[Finding]:
    """Triton lowers tl.dot to wgmma (sm90) or tcgen05 (sm100) only for blocks of M >= 64 on at least
    one warpgroup (4 warps); otherwise to mma_v2, a fraction of the throughput. f32 operands with ieee
    precision (specgen's `f32`, not `tf32`) run on the FMA units, no tensor cores at all. Sources:
    Triton `AccelerateMatmul.cpp` (MMA version selection), `semantic.py` (input_precision); measured
    with `triton.compile` (tests/differential.py). sm90 M < 64 is MMA003's warning; with `triton.swap_ab`
    the MMA's rows are tile.n."""
    w, mma = ctx.spec.triton.num_warps, ctx.info.mma
    if ctx.spec.a.dtype == DType.f32:
        yield Finding("MMA004", "warning", f"A and B are f32 (ieee): tl.dot runs on FMA units on {ctx.target}, no "
                      f"{mma} (tensor cores)", 'use dtype = "tf32" for tensor cores', ("a", "dtype"))
        return
    rows, dim = triton_mma_rows(ctx.spec)
    if mma == "tcgen05" and rows < 64:
        yield Finding("MMA004", "warning", f"tile.{dim} = {rows} < 64{' (swap_ab: the MMA rows)' if dim == 'n' else ''}: "
                      f"Triton falls back from tcgen05 to mma_v2 on {ctx.target}", f"use tile.{dim} = 64", ("tile", dim))
    if w < 4:
        yield Finding("MMA004", "warning", f"triton.num_warps = {w} < 4 (one warpgroup): Triton falls back from {mma} "
                      f"to mma_v2 on {ctx.target}", "use num_warps = 4", ("triton", "num_warps"))


# --- powers of two, sizes --------------------------------------------------------------------------------
@rule("POW001", "Triton block dims and num_warps are powers of two", is_triton)
def triton_pow2(ctx: RuleContext) -> Iterator[Finding]:
    """tl.arange and block shapes need powers of two with numel <= 1048576 (Triton `_utils.py`);
    num_warps is a power of two (Triton `backends/nvidia/compiler.py`)."""
    t = ctx.spec.tile
    for dim in ("m", "n", "k"):
        v = getattr(t, dim)
        if not _pow2(v):
            yield Finding("POW001", "error", f"tile.{dim} = {v} is not a power of two (Triton block dims must be)",
                          f"use {1 << (v.bit_length() - 1)} or {1 << v.bit_length()}", ("tile", dim))
    if t.m * t.n > 1048576:
        yield Finding("POW001", "error", f"tile m*n = {t.m * t.n} > 1048576 elements, Triton's block limit", "", ("tile",))
    w = ctx.spec.triton.num_warps
    if not _pow2(w) or w > 32:
        yield Finding("POW001", "error", f"triton.num_warps = {w} is not a power of two in 1..32", "",
                      ("triton", "num_warps"))


# --- memory budgets --------------------------------------------------------------------------------------
@rule("SMEM001", "shared memory per block", is_gpu)
def smem_budget_rule(ctx: RuleContext) -> Iterator[Finding]:
    """Everything a block stages must fit the per-block opt-in maximum: 232448 B on sm90 and sm100
    (cutlass `arch.h`; measured on the H200), counting the barrier reserve where the kernel keeps one.
    The planner's `auto` stages come from the same budget (the design's `memory`, via resolve.py)."""
    b = ctx.budget
    if b.fits:
        return
    fit = max_ab_stages(ctx.spec, ctx.info)
    hint = f"ab_stages = {fit} fits ({memory(ctx.spec, ctx.info, fit).total} B)" if fit >= 1 else ""
    if fit < MIN_STAGES and ctx.spec.tile.k >= 32:  # no real pipeline left: a thinner K slice is the way out
        half = ctx.spec.model_copy(update={"tile": ctx.spec.tile.model_copy(update={"k": ctx.spec.tile.k // 2})})
        deeper = max_ab_stages(half, ctx.info)
        if deeper >= MIN_STAGES:
            hint = (hint + "; " if hint else "") + f"tile.k = {half.tile.k} fits {deeper} stages"
    hint = hint or "shrink the tile: not even one A/B stage fits"
    yield Finding("SMEM001", "error", f"needs {b.total} B of SMEM > {b.capacity} B per block on {ctx.target} "
                  f"({b.breakdown()})", hint, ("pipeline", "ab_stages") if fit >= 1 else ("tile",))


@rule("VMEM001", "TPU VMEM budget", is_tpu)
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


@rule("TMEM001", "tensor memory columns", uses_tcgen05)
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


# --- TMA ------------------------------------------------------------------------------------------------
@rule("TMA001", "TMA inner box bytes are a multiple of 16", lambda t: is_gpu(t))
def tma_inner_box(ctx: RuleContext) -> Iterator[Finding]:
    """cuTensorMapEncodeTiled: the inner box dimension in bytes must be a multiple of 16 (Driver API).
    Applies wherever tiles move by TMA: CuTe, Mosaic GPU, Triton's persistent descriptor kernel."""
    for box in ctx.tma_boxes:
        name, inner, nbytes = box.operand, box.inner, box.elem_bytes
        if inner * nbytes % 16:
            yield Finding("TMA001", "error", f"{name}'s TMA box has {inner} x {nbytes} B = {inner * nbytes} B along its "
                          "contiguous dim, not a multiple of 16", "", (*box.field, "major") if name != "out" else ("tile", "n"))


@rule("TMA002", "TMA box dims are at most 256", uses_tma_boxes)
def tma_box_dims(ctx: RuleContext) -> Iterator[Finding]:
    """cuTensorMapEncodeTiled: each box dimension is 1..256 elements (Driver API). CuTe issues one box
    per tile; Mosaic GPU one per tile in its tiled GMEM view, (outer / 8, inner / swizzle, 8, swizzle)
    (the design's `tma_boxes` dims: a 320-row tile is 40 row tiles); Triton splits larger blocks itself,
    so it is exempt."""
    for box in ctx.tma_boxes:
        dims = box.dims or (box.outer, box.inner)
        for extent in dims:
            if extent > 256:
                shape = "x".join(map(str, dims))
                yield Finding("TMA002", "error", f"{box.operand}'s TMA box {shape} has a dim {extent} > 256",
                              "", ("tile",))
                break


# --- clusters -------------------------------------------------------------------------------------------
@rule("CLU001", "cluster size", is_gpu)
def cluster_size(ctx: RuleContext) -> Iterator[Finding]:
    """Portable clusters hold at most 8 CTAs; sm90 allows 16 with the non-portable opt-in and 17 fails
    (measured, cudaOccupancyMaxPotentialClusterSize). Triton and Pallas TPU launch no clusters; Pallas
    Mosaic GPU launches the pairs PAL007 allows."""
    c = ctx.spec.cluster
    if c.size == 1:
        return
    if not ctx.info.clusters:
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n} is ignored by {ctx.backend} (it launches single CTAs)",
                      "", ("cluster",))
        return
    assert ctx.gpu is not None
    if c.size > ctx.gpu.cluster_max:
        yield Finding("CLU001", "error", f"cluster {c.m}x{c.n} = {c.size} CTAs > {ctx.gpu.cluster_max}, the hardware maximum",
                      "", ("cluster",))
    elif c.size > ctx.gpu.cluster_portable:
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n} = {c.size} CTAs > {ctx.gpu.cluster_portable} (portable): "
                      "needs the non-portable opt-in", "", ("cluster",))
    if not (_pow2(c.m) and _pow2(c.n)):
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n}: the CuTe examples use powers of two (convention, "
                      "not hardware)", "", ("cluster",))


@rule("CLU002", "2-CTA MMA needs an even cluster M", uses_tcgen05)
def two_cta_cluster(ctx: RuleContext) -> Iterator[Finding]:
    """cta_group::2 pairs CTAs along M: cluster.m must be even (CX `dense_gemm_persistent.py`)."""
    if ctx.spec.cute.two_cta and ctx.spec.cluster.m % 2:
        yield Finding("CLU002", "error", f"cute.two_cta needs an even cluster.m, got {ctx.spec.cluster.m}",
                      "set cluster.m = 2", ("cluster", "m"))


# --- registers ------------------------------------------------------------------------------------------
@rule("REG001", "accumulator register pressure", lambda t: is_triton(t) or uses_wgmma(t))
def register_pressure(ctx: RuleContext) -> Iterator[Finding]:
    """The register-resident accumulator: wgmma holds N/2 fp32 registers per thread per 64-row atom
    (cutlass `mma_sm90_gmma.hpp`); a thread has 255 registers. CuTe sm90: the design's register model,
    the accumulator plus the epilogue's live operands (`_cute_sm90_registers`), errors above the 232
    registers setmaxnreg gives a consumer, where ptxas spilled (measured, nvidia-cutlass-dsl 4.8.1).
    Mosaic GPU: above 255 the accumulator cannot be held (error); above 192 little room is left for
    addresses and the epilogue (warning: spills). Triton: ptxas always builds the kernel, spilling what
    does not fit (measured with `triton.compile`, tests/differential.py: 256 accumulator registers on
    sm_90 spilled 2.6-3.8 KB, and tcgen05 kernels, whose accumulator lives in TMEM until the epilogue,
    spill less), so Triton gets a warning with the estimate where spills are likely, never an error. The
    estimate adds the operands an FMA dot (f32 ieee) holds in registers."""
    regs, threads = ctx.acc_registers, ctx.acc_threads
    if ctx.backend is Backend.triton:
        t = ctx.spec.tile
        # an FMA dot also holds A and B fragments each about the accumulator's size, beside its slice of
        # the tiles (measured: 64 accumulator registers spilled 0.4-16 KB there, 32 none)
        operands = 2 * regs + (t.m * t.k + t.k * t.n) // threads if ctx.spec.a.dtype == DType.f32 else 0
        need = regs + operands
        if need > TRITON_SPILL_REGISTERS:
            held = f" + {operands} for the FMA operands = {need}" if operands else ""
            over = " > 255" if need > 255 else f" of 255 (over {TRITON_SPILL_REGISTERS})"
            yield Finding("REG001", "warning", f"accumulator needs {regs} registers per thread ({threads} threads){held}"
                          f"{over}: ptxas builds it but will likely spill to local memory",
                          "use more warps or a smaller tile", ("triton", "num_warps"))
        return
    if is_cute_wgmma(ctx.info):
        yield from _cute_sm90_registers(ctx)
        return
    if regs > 255:
        yield Finding("REG001", "error", f"accumulator needs {regs} registers per thread ({threads} threads) > 255",
                      "use more warps or a smaller tile", ("tile",))
    elif regs > 192:
        yield Finding("REG001", "warning", f"accumulator needs {regs} of 255 registers per thread ({threads} threads): "
                      "expect spills", "use more warps or a smaller tile", ("tile",))


def _cute_sm90_registers(ctx: RuleContext) -> Iterator[Finding]:
    """CuTe sm90: the design's register model (designs/gemm_cute_sm90.py `register_estimate`: the
    accumulator, a base, and the epilogue's operands and temporaries at a subtile) against the
    MMA_REGISTERS its consumers get from setmaxnreg. Measured (nvidia-cutlass-dsl 4.8.1, sm_90a SASS over
    the compile grid of tests/grids/cute_sm90.py, tests/data/grid_cute_sm90.json): where the estimate is
    over, ptxas spilled to local memory (LDL/STL), and only a handful of the kernels it refuses compile
    spill-free. An error: the spilling kernel builds, but runs slowly."""
    from specgen.designs.gemm_cute_sm90 import mma_warpgroups, register_estimate

    est = register_estimate(ctx.spec)
    if not est.spills:
        return
    s = ctx.spec
    hints = []
    if est.operands or est.temporaries:
        hints.append("fewer vector, residual or cast ops in the epilogue")
    if s.cute.schedule == "pingpong":
        hints.append('cute.schedule = "cooperative" with cute.mma_warpgroups = 2 (each holds half the tile)')
    elif mma_warpgroups(s) == 1 and s.tile.m % 128 == 0:
        hints.append("cute.mma_warpgroups = 2 (each holds half the tile)")
    hints.append("a smaller tile.n")
    yield Finding("REG001", "error", f"a consumer thread needs about {est.total} registers ({est.breakdown()}; "
                  f"{ctx.acc_threads} threads share the {s.tile.m}x{s.tile.n} accumulator) > the {est.budget} "
                  "setmaxnreg gives it: ptxas spills to local memory", "use " + ", or ".join(hints), ("tile",))


TRITON_SPILL_REGISTERS = 192  # above this many live registers per thread ptxas spilled in the measured grid


# --- the CuTe sm90 design (designs/gemm_cute_sm90.py) --------------------------------------------------
def is_cute_wgmma(t: Target | TargetInfo) -> bool:
    """The CuTe design's Hopper kernel: CuTe DSL issuing wgmma."""
    info = _info(t)
    return info.backend is Backend.cute and info.mma == "wgmma"


@rule("CUTE001", "sm90 consumer warpgroups", is_cute_wgmma)
def cute_sm90_warpgroups(ctx: RuleContext) -> Iterator[Finding]:
    """One producer warpgroup (40 registers) and 1 or 2 wgmma warpgroups (232 registers each) fill the
    65536-register file (setmaxnreg, PTX ISA; CUTLASS's sm90 split: the spec model bounds
    `cute.mma_warpgroups` to 2); the template stacks the consumer warpgroups' 64-row wgmma atoms along
    M (`make_tiled_mma`: atom layout (warpgroups, 1, 1)), so tile.m is a multiple of 64 x warpgroups.
    Measured (nvidia-cutlass-dsl 4.8.1, sm_90a): a 64-row tile over two warpgroups compiles without
    complaint, but the second warpgroup's atom covers rows 64..127 of a 64-row tile: it multiplies
    SMEM past the A stage and its epilogue indexes accumulator rows the tile does not have. So the
    refusal stands (a template limit, not a hardware one)."""
    from specgen.designs.gemm_cute_sm90 import mma_warpgroups

    wgs = mma_warpgroups(ctx.spec)
    m = ctx.spec.tile.m
    if m % (64 * wgs):
        yield Finding("CUTE001", "error", f"tile.m = {m} is not a multiple of 64 x {wgs} consumer warpgroups: "
                      f"the warpgroups' stacked 64-row wgmma atoms cover {-(-m // (64 * wgs)) * 64 * wgs} rows, "
                      f"and rows past {m} would be read from SMEM beyond the A tile (it compiles; the results "
                      "would be wrong)", f"use tile.m = {max(64 * wgs, m // (64 * wgs) * 64 * wgs)} or "
                      "cute.mma_warpgroups = 1", ("tile", "m"))


@rule("CUTE002", "sm90 epilogue subtiles cover the tile", is_cute_wgmma)
def cute_sm90_epilogue_tile(ctx: RuleContext) -> Iterator[Finding]:
    """The epilogue stores the tile in whole subtiles of 64 or 128 rows x 32 columns (64 for 8-bit
    outputs where tile.n allows), the TMA-store boxes the template allocates (designs/gemm_cute_sm90.py
    `epilogue_tile`); each subtile takes the next epi_m x epi_n share of the thread's accumulator
    registers. Measured (nvidia-cutlass-dsl 4.8.1, sm_90a): a 64x48 tile compiles, but its second
    subtile reads 16 accumulator registers past the 24 a thread holds (its stored columns are
    garbage); a 128x40 tile aborts the compiling process. An 8-bit 64x160 tile takes 32-column
    subtiles (it compiles spill-free)."""
    from specgen.designs.gemm_cute_sm90 import epilogue_tile

    em, en = epilogue_tile(ctx.spec)
    t = ctx.spec.tile
    if t.m % em or t.n % en:
        yield Finding("CUTE002", "error", f"tile {t.m}x{t.n} is not a whole number of {em}x{en} epilogue subtiles: "
                      "the last subtile would read accumulator registers past the tile's (it compiles; those "
                      "columns would be garbage)", f"use tile.n a multiple of {en}", ("tile",))


@rule("CUTE003", "sm90 stores through SMEM by TMA", is_cute_wgmma)
def cute_sm90_tma_store(ctx: RuleContext) -> Iterator[Finding]:
    """The sm90 design always stages the output in SMEM and stores it by TMA (its SMEM budget counts
    that staging); `cute.tma_store = false` is not honoured there (a design choice, not a limit)."""
    if not ctx.spec.cute.tma_store:
        yield Finding("CUTE003", "warning", "cute.tma_store = false is ignored on cute:sm90: the kernel stores by TMA",
                      "drop cute.tma_store", ("cute", "tma_store"))


@rule("CUTE004", "sm90 ping-pong warpgroups", is_cute_wgmma)
def cute_sm90_pingpong(ctx: RuleContext) -> Iterator[Finding]:
    """`cute.schedule = "pingpong"` runs two consumer warpgroups that each own a whole tile and take
    turns at the mainloop (CUTLASS's KernelTmaWarpSpecializedPingpong); they cannot also split a tile,
    so `cute.mma_warpgroups = 2` contradicts it. (Each warpgroup then holds the whole tile's
    accumulator: REG001 counts it over 128 threads.)"""
    s = ctx.spec
    if s.cute.schedule == "pingpong" and s.cute.mma_warpgroups == 2:
        yield Finding("CUTE004", "error", "cute.schedule = \"pingpong\" gives each of its two consumer warpgroups a whole "
                      "tile; cute.mma_warpgroups = 2 would split each tile between them",
                      "drop cute.mma_warpgroups (or use cute.schedule = \"cooperative\")", ("cute", "mma_warpgroups"))


# --- Pallas TPU -------------------------------------------------------------------------------------------
@rule("PAL001", "TPU block shapes", is_tpu)
def tpu_block_shape(ctx: RuleContext) -> Iterator[Finding]:
    """Block last two dims divisible by (sublanes, 128), sublanes 8 for 32/16-bit (16 for bf16 on v7x),
    8*(32/bits) for narrower types, each block in its operand's stored layout (specgen's Pallas kernels
    take a K-major B as (N, K)). Sources: jax `_src/pallas/mosaic/lowering.py`, `tpu_info.py`.
    (Blocks equal to the full array also pass, but a spec's tile does not know the array.)"""
    s, t = ctx.spec, ctx.spec.tile
    assert ctx.tpu is not None

    def sublanes(dt: DType) -> int:
        if dt == DType.bf16:
            return ctx.tpu.bf16_sublanes
        return 8 * max(1, 4 // dt.bytes) if dt.bytes < 2 else 8

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


@rule("PAL002", "TPU MXU-aligned tiles", is_tpu)
def tpu_mxu_alignment(ctx: RuleContext) -> Iterator[Finding]:
    """The MXU is 128x128 before v6 and 256x256 on v6e/v7x (jax `tpu_info.py`); smaller tile.n/k leave
    it partly idle (warning, not a hard limit)."""
    assert ctx.tpu is not None
    t, mxu = ctx.spec.tile, ctx.tpu.mxu
    if t.n % mxu or t.k % mxu:
        yield Finding("PAL002", "warning", f"tile n={t.n}, k={t.k} are not multiples of the {mxu}x{mxu} MXU on "
                      f"{ctx.tpu.name}", "", ("tile",))


@rule("PAL003", "TPU pipeline buffering depth", is_tpu)
def tpu_buffering(ctx: RuleContext) -> Iterator[Finding]:
    """The Pallas TPU pipeline buffers each BlockSpec once or twice only: lowering `pl.Buffered(3)`
    fails with "Only single (1) and double (2) buffering are supported" (jax 0.10.2
    `_src/pallas/mosaic/lowering.py`; measured by lowering for TPU on a CPU machine)."""
    if ctx.ab_stages not in (1, 2):
        yield Finding("PAL003", "error", f"pipeline.ab_stages = {ctx.ab_stages}: Pallas TPU buffers a block 1 or 2 "
                      "deep", 'use ab_stages = 2 (or "auto")', ("pipeline", "ab_stages"))


# --- Pallas Mosaic GPU (designs/gemm_pallas.py, templates/pallas/gemm_mgpu.py.jinja) ----------------------
MGPU_OPERANDS = (DType.f16, DType.bf16, DType.fp8_e4m3, DType.fp8_e5m2)


@rule("PAL004", "Mosaic GPU operand and accumulator dtypes", is_mgpu_target)
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
        yield Finding("PAL004", "error", f"A is {a} and B is {b}: Mosaic GPU's matmul takes one input dtype for "
                      "both", f'use the same dtype for both (b.dtype = "{a}")', ("b", "dtype"))
    if ctx.spec.accumulator != DType.f32 and ctx.spec.a.dtype.is_float:
        yield Finding("PAL004", "error", f"accumulator = {ctx.spec.accumulator}: the {ctx.target} kernel accumulates "
                      "in f32", 'set accumulator = "f32"', ("accumulator",))


@rule("PAL005", "Mosaic GPU residual staging", is_mgpu_target)
def mgpu_residual(ctx: RuleContext) -> Iterator[Finding]:
    """A residual's subtile is TMA-loaded into the output's SMEM staging slot before it is added (JAX's
    Hopper matmul stages its `c` operand the same way), so it has the output's dtype: the slot holds
    64 x 64 output elements (templates/pallas/gemm_mgpu.py.jinja)."""
    for i, op in enumerate(ctx.spec.epilogue):
        if op.op == "residual" and op.dtype != ctx.spec.out.dtype:
            yield Finding("PAL005", "error", f"residual {op.name!r} is {op.dtype} but out is {ctx.spec.out.dtype}: on "
                          f"{ctx.target} a residual is staged in the output's SMEM slot ({ctx.spec.out.dtype.bytes} "
                          "B per element)", f'set its dtype = "{ctx.spec.out.dtype}"', ("epilogue", i, "dtype"))


@rule("PAL006", "Mosaic GPU warpgroup split and epilogue subtiles", is_mgpu_target)
def mgpu_tile_split(ctx: RuleContext) -> Iterator[Finding]:
    """Two consumer warpgroups split tile.n; each issues wgmma on tile.m x tile.n/2, so tile.n/2 is a wgmma
    N (8..256, step 8: PTX wgmma), and stores it through whole epi_m x epi_n subtiles (64x64, or the
    warpgroup's slice where smaller: designs/gemm_pallas.py `mgpu_layout`)."""
    from specgen.designs.gemm_pallas import MGPU_CONSUMER_WGS, mgpu_layout

    t = ctx.spec.tile
    wg_n = t.n // MGPU_CONSUMER_WGS
    if t.n % (8 * MGPU_CONSUMER_WGS) or not 8 <= wg_n <= 256:
        yield Finding("PAL006", "error", f"tile.n = {t.n} splits into {MGPU_CONSUMER_WGS} warpgroup slices of {t.n / 2:g}: "
                      "not a wgmma N (8..256, step 8)", f"use tile.n a multiple of {8 * MGPU_CONSUMER_WGS}", ("tile", "n"))
        return
    lay = mgpu_layout(ctx.spec)
    if t.m % lay.epi_m or wg_n % lay.epi_n:
        yield Finding("PAL006", "error", f"a warpgroup's {t.m}x{wg_n} slice is not a whole number of {lay.epi_m}x{lay.epi_n} "
                      "epilogue subtiles", f"use tile.n a multiple of {2 * lay.epi_n}", ("tile",))


@rule("PAL007", "Mosaic GPU clusters", is_mgpu_target)
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


@rule("PAL008", "Mosaic GPU SMEM swizzles", is_mgpu_target)
def mgpu_swizzle(ctx: RuleContext) -> Iterator[Finding]:
    """Mosaic GPU stages each TMA'd tile in SMEM with a 32, 64 or 128 B swizzle ("Swizzle 16 is not
    supported. Only 32, 64 and 128 are accepted"), and its wgmma takes one swizzle for A and B
    ("Non-matching swizzles of operands a and b in WGMMA") and K in groups of swizzle/bytes elements
    ("K must be a multiple of ..."): jax 0.10.2 `mosaic/gpu/wgmma.py`, `dialect_lowering.py`. So one
    swizzle must divide A's and B's contiguous extents in bytes (K for K-major; tile.m for MN-major A;
    for MN-major B each warpgroup's tile.n/2 slice, which starts on a whole swizzle tile) and tile.k's;
    the output's epilogue subtile row must span a multiple of 32 B. Found by lowering for CUDA
    (tests/grids/mgpu.py), where such specs failed as layout inference, slice or swizzle errors."""
    from specgen.designs.gemm_pallas import mgpu_layout, mgpu_swizzles

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


@rule("PAL009", "Mosaic GPU epilogue ops", is_mgpu_target)
def mgpu_epilogue_ops(ctx: RuleContext) -> Iterator[Finding]:
    """Two epilogues do not lower on Mosaic GPU (jax 0.10.2, found by lowering for CUDA: tests/grids/mgpu.py):
    the erf form of GELU, for which layout inference has no rule ("No layout inference rule defined for
    math.erf", `mosaic/gpu/layout_inference.py`; tanh, exp and the rest lower); and an fp8 output whose
    chain ends in a cast to bf16 (only f32 casts after it): the bf16 -> f32 -> fp8 round trip becomes a
    direct bf16 -> fp8 conversion, which it refuses ("Hardware has no support for converting from bf16 to
    f8E4M3FN"); any other op after the cast, or a cast to f16, lowers."""
    chain = ctx.spec.epilogue
    for i, op in enumerate(chain):
        if op.op == "activation" and op.fn == "gelu":
            yield Finding("PAL009", "error", f"activation gelu (erf form) does not lower on {ctx.target}: Mosaic GPU "
                          "has no layout rule for math.erf", 'use fn = "gelu_tanh"', ("epilogue", i, "fn"))
    last = next((i for i in range(len(chain) - 1, -1, -1)
                 if not (chain[i].op == "cast" and chain[i].dtype == DType.f32)), None)
    out = ctx.spec.out.dtype
    if last is not None and chain[last].op == "cast" and chain[last].dtype == DType.bf16 and out.bytes == 1:
        yield Finding("PAL009", "error", f"the epilogue ends in a cast to bf16 and out is {out}: Mosaic GPU lowers the "
                      "bf16 -> f32 -> fp8 round trip as a bf16 -> fp8 conversion, which it cannot do",
                      "drop the cast (the store rounds to out's dtype) or cast to f16", ("epilogue", last, "dtype"))


# --- split-K -------------------------------------------------------------------------------------------
def _no_split_k_design(t: Target | TargetInfo) -> bool:
    """No design of the target's backend renders split-K (a design's `renders_split_k`; designs/base.py)."""
    from specgen.designs import DESIGNS  # the registry imports the rules' neighbours: look it up late

    backend = _info(t).backend
    return not any(getattr(d, "renders_split_k", False) for (_, b), d in DESIGNS.items() if b is backend)


@rule("SPK001", "split-K where a design renders it", _no_split_k_design)
def split_k_design(ctx: RuleContext) -> Iterator[Finding]:
    """`schedule.split_k > 1` needs a kernel that divides the K loop and a launcher that reduces the
    partials: designs that render both say `renders_split_k` (the Triton design: designs/gemm_triton.py,
    templates/triton/gemm.py.jinja); the others render one K loop per tile, so a split there would be
    dropped silently."""
    from specgen.designs import DESIGNS

    k = ctx.spec.schedule.split_k
    if k > 1:
        where = sorted({b.value for (_, b), d in DESIGNS.items() if getattr(d, "renders_split_k", False)})
        yield Finding("SPK001", "error", f"schedule.split_k = {k}: the {ctx.backend.value} design renders no split-K "
                      f"({', '.join(where)} targets only)", f'set schedule.split_k = 1 for {ctx.target} (a per_target table)',
                      ("schedule", "split_k"))


def _k_tiles(k: int, block: int) -> int:
    return -(-k // block)


@rule("SPK002", "split-K partials and K tiles", is_triton)
def split_k_shape(ctx: RuleContext) -> Iterator[Finding]:
    """Each split reduces its share of the K tiles into f32 partials that the last program of the tile
    sums (templates/triton/gemm.py.jinja `_split_k_reduce`): the accumulator must be f32 (an int32 or
    f16 accumulator would be rounded through f32), and a config whose `when` bounds K (`k_max`) must
    leave every split at least one K tile at that bound: cdiv(k_max, tile.k) >= split_k, or some
    programs only add zeros for every problem it serves."""
    s = ctx.spec
    k = s.schedule.split_k
    if k == 1:
        return
    if s.accumulator != DType.f32:
        yield Finding("SPK002", "error", f"schedule.split_k = {k} sums f32 partials; the accumulator is {s.accumulator}",
                      'set accumulator = "f32" or schedule.split_k = 1', ("schedule", "split_k"))
    k_max = ctx.when.k_max if ctx.when is not None else None
    if k_max is not None and _k_tiles(k_max, s.tile.k) < k:
        tiles = _k_tiles(k_max, s.tile.k)
        yield Finding("SPK002", "error", f"schedule.split_k = {k} > {tiles} K tiles at k_max = {k_max} "
                      f"(tile.k = {s.tile.k}): some splits never get a K tile",
                      f"use schedule.split_k <= {tiles}", ("schedule", "split_k"))


@rule("SPK003", "split-K pays only where tiles are too few", is_triton)
def split_k_pays(ctx: RuleContext) -> Iterator[Finding]:
    """Split-K trades f32 partial traffic (split_k partial tiles written and read per output tile) for
    more programs along K: it pays when M x N gives too few tiles to fill the SMs (decode shapes: small
    M), measured in bench/bench_decode.py. A config that serves every M (no `when.m_max`) also serves
    large problems, whose tiles already fill the GPU: a warning with the numbers."""
    s = ctx.spec
    k = s.schedule.split_k
    if k == 1 or (ctx.when is not None and ctx.when.m_max is not None):
        return
    yield Finding("SPK003", "warning", f"schedule.split_k = {k} on a config that serves every M: large problems "
                  f"fill the GPU with {s.tile.m}x{s.tile.n} tiles already and pay {k} f32 partial tiles of traffic each",
                  "put split_k in a variant bounded by when.m_max", ("schedule", "split_k"))


# --- backend options -----------------------------------------------------------------------------------
def _any_target(t: Target) -> bool:
    return True


@rule("OPT001", "backend options the target can honour", _any_target)
def backend_options(ctx: RuleContext) -> Iterator[Finding]:
    """Each backend's options are read by that backend's targets only (a `triton` table on a spec that
    lists no Triton target is inert, not an error). Within a backend, an option the target cannot
    honour is an error: `cute.two_cta` is Blackwell's cta_group::2 tcgen05 MMA (sm100 only, PTX ISA
    tcgen05); `cute.mma_warpgroups` splits a wgmma tile between consumer warpgroups and
    `cute.schedule = "pingpong"` alternates them (sm90 only, wgmma);
    `pallas.vmem_limit_bytes` is Mosaic TPU's scoped-VMEM limit (no VMEM on Mosaic GPU). Triton options
    that the spec's own settings switch off are warnings: the subtiled store is a TMA store
    (`triton.tma`), `flatten` pipelines a persistent kernel's tile loop (`schedule.persistent`)."""
    s, t = ctx.spec, ctx.target
    if t.backend is Backend.cute:
        if s.cute.two_cta and not uses_tcgen05(t):
            yield Finding("OPT001", "error", f"cute.two_cta = true needs tcgen05 2-CTA MMA (sm100); {t} has none",
                          "set cute.two_cta = false for this target", ("cute", "two_cta"))
        if s.cute.schedule == "pingpong" and not uses_wgmma(t):
            yield Finding("OPT001", "error", f"cute.schedule = \"pingpong\" alternates wgmma warpgroups (sm90); {t} "
                          "issues tcgen05 MMAs from one thread", "drop cute.schedule for this target",
                          ("cute", "schedule"))
        if s.cute.mma_warpgroups is not None and not uses_wgmma(t):
            yield Finding("OPT001", "error", f"cute.mma_warpgroups = {s.cute.mma_warpgroups} splits a wgmma tile "
                          f"(sm90); {t} issues tcgen05 MMAs from one thread", "drop cute.mma_warpgroups",
                          ("cute", "mma_warpgroups"))
    elif t.backend is Backend.pallas:
        if s.pallas.vmem_limit_bytes is not None and not is_tpu(t):
            yield Finding("OPT001", "error", f"pallas.vmem_limit_bytes = {s.pallas.vmem_limit_bytes} is a TPU "
                          f"setting; {t} (Mosaic GPU) has no VMEM", "drop pallas.vmem_limit_bytes",
                          ("pallas", "vmem_limit_bytes"))
    elif t.backend is Backend.triton:
        if s.triton.epilogue_subtile and not s.triton.tma:
            yield Finding("OPT001", "warning", "triton.epilogue_subtile = true is ignored: it halves the TMA "
                          "store, and triton.tma = false stores through pointers", "", ("triton", "epilogue_subtile"))
        if s.triton.flatten and not s.schedule.persistent:
            yield Finding("OPT001", "warning", "triton.flatten = true is ignored: it pipelines the tile loop of a "
                          "persistent kernel, and schedule.persistent = false", "", ("triton", "flatten"))


_SELECTED: dict[tuple[int, str, str], list[RuleFn]] = {}


def rules_for(kind: str, info: TargetInfo) -> list[RuleFn]:
    """The rules that concern a kind on a target, in table order (selected once per pair)."""
    key = (id(RULES), kind, info.name)  # RULES may be swapped (tests); its identity keys the cache
    fns = _SELECTED.get(key)
    if fns is None:
        fns = _SELECTED[key] = [r.fn for r in RULES if kind in r.kinds and r.applies(info)]
    return fns


def run_rules(ctx: RuleContext) -> list[Finding]:
    return [f for fn in rules_for(ctx.spec.kind, ctx.info) for f in fn(ctx)]
