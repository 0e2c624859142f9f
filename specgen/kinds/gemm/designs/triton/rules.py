"""The Triton design's own rules: tl.dot's shapes and fallbacks, Triton's block limits, split-K, its
options, and its register estimate (REG001's Triton verdict)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from specgen.kinds.gemm.design import b_tile_columns
from specgen.kinds.gemm.designs.triton.design import DESIGN
from specgen.kinds.gemm.designs.triton.training import recompute_knobs
from specgen.kinds.gemm.shared_rules import compiled
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.training import activation_fn
from specgen.rules.base import Finding, Margin, Near, RuleContext, RuleSet, pow2, target_of
from specgen.spec.dtypes import DType

RULES = RuleSet()
SERVED = target_of(DESIGN)
TRITON_REGISTERS = 255  # per thread (PTX ISA: a thread addresses at most 255 registers)
# REG001's margin: spills measured from 16 registers up, spill-free up to 256 (see `register_findings`)
REGISTER_MARGIN = Margin(below=TRITON_REGISTERS - 16, above=1, unit="registers")


@RULES.rule("DT002", "fp8 needs compute capability 8.9 or later in Triton", SERVED)
def triton_fp8_arch(ctx: RuleContext) -> Iterator[Finding]:
    """tl.dot on fp8e4nv needs cc >= 89 (Triton `language/semantic.py`); sm90 and sm100 both qualify."""
    assert ctx.gpu is not None
    for side in ("a", "b"):
        dt = getattr(ctx.spec, side).dtype
        if dt.is_fp8 and ctx.gpu.compute_capability < 89:
            yield Finding("DT002", "error", f"{side.upper()} is {dt}: Triton's fp8 dot needs cc >= 89, {ctx.target} is "
                          f"cc {ctx.gpu.compute_capability}", "", (side, "dtype"))


def triton_mma_rows(spec: GemmSpec) -> tuple[int, str]:
    """The rows of a Triton tile's MMA and the tile field that holds them: tile.m, or tile.n with
    `triton.swap_ab` (the kernel computes the tile transposed: templates/gemm/triton/tile.jinja `dot`)."""
    return (spec.tile.n, "n") if spec.triton.swap_ab else (spec.tile.m, "m")


@RULES.rule("MMA003", "tl.dot minimum shapes", SERVED)
def triton_dot_shape(ctx: RuleContext) -> Iterator[Finding]:
    """tl.dot needs K >= 16 (16-bit), 32 (8-bit), 8 (32-bit) and M, N >= 16. Source: Triton
    `language/semantic.py`; measured. A block of fewer than 64 MMA rows compiles but does not use wgmma
    (warning): the rows are tile.m, or tile.n with `triton.swap_ab` (the kernel computes the tile
    transposed, templates/gemm/triton/tile.jinja `dot`)."""
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


@RULES.rule("MMA004", "tl.dot falls back from the arch's tensor-core MMA", SERVED)
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
@RULES.rule("POW001", "Triton block dims and num_warps are powers of two", SERVED)
def tritonpow2(ctx: RuleContext) -> Iterator[Finding]:
    """tl.arange and block shapes need powers of two with numel <= 1048576 (Triton `_utils.py`);
    num_warps is a power of two (Triton `backends/nvidia/compiler.py`)."""
    t = ctx.spec.tile
    for dim in ("m", "n", "k"):
        v = getattr(t, dim)
        if not pow2(v):
            yield Finding("POW001", "error", f"tile.{dim} = {v} is not a power of two (Triton block dims must be)",
                          f"use {1 << (v.bit_length() - 1)} or {1 << v.bit_length()}", ("tile", dim))
    if t.m * t.n > 1048576:
        yield Finding("POW001", "error", f"tile m*n = {t.m * t.n} > 1048576 elements, Triton's block limit", "", ("tile",))
    w = ctx.spec.triton.num_warps
    if not pow2(w) or w > 32:
        yield Finding("POW001", "error", f"triton.num_warps = {w} is not a power of two in 1..32", "",
                      ("triton", "num_warps"))


def _k_tiles(k: int, block: int) -> int:
    return -(-k // block)


@RULES.rule("SPK002", "split-K partials and K tiles", SERVED)
def split_k_shape(ctx: RuleContext) -> Iterator[Finding]:
    """Each split reduces its share of the K tiles into f32 partials that the last program of the tile
    sums (templates/gemm/triton/gemm.py.jinja `_split_k_reduce`): the accumulator must be f32 (an int32 or
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


@RULES.rule("SPK003", "split-K pays only where tiles are too few", SERVED)
def split_k_pays(ctx: RuleContext) -> Iterator[Finding]:
    """Split-K trades f32 partial traffic (split_k partial tiles written and read per output tile) for
    more programs along K: it pays when M x N gives too few tiles to fill the SMs (decode shapes: small
    M), measured by the session-3 decode sweeps (bench/results/2026-11-22-h200-decode-sweep*.json). A
    config that serves every M (no `when.m_max`) also serves large problems, whose tiles already fill the
    GPU: a warning with the numbers."""
    s = ctx.spec
    k = s.schedule.split_k
    if k == 1 or (ctx.when is not None and ctx.when.m_max is not None):
        return
    yield Finding("SPK003", "warning", f"schedule.split_k = {k} on a config that serves every M: large problems "
                  f"fill the GPU with {s.tile.m}x{s.tile.n} tiles already and pay {k} f32 partial tiles of traffic each",
                  "put split_k in a variant bounded by when.m_max", ("schedule", "split_k"))


def fma_operand_registers(ctx: RuleContext) -> int:
    """The registers an FMA dot (f32 ieee) holds beside its accumulator: A and B fragments each about the
    accumulator's size, and its slice of the tiles (measured: 64 accumulator registers spilled 0.4-16 KB
    there, 32 none); 0 for a tensor-core dot. REG001's estimate is the accumulator plus these."""
    if ctx.spec.a.dtype != DType.f32:
        return 0
    t = ctx.spec.tile
    return 2 * ctx.acc_registers + (t.m * t.k + t.k * b_tile_columns(ctx.spec)) // ctx.acc_threads


# The recompute GEMM's epilogue (G = dOut * act'(pre), templates/gemm/triton/recompute.jinja) beside its accumulator:
# RECOMPUTE_BASE registers (addresses, masks, descriptors) and, per f32 value of a thread's subtile (its accumulator
# registers / EPI_SPLIT: dOut's, pre's and the derivative's), RECOMPUTE_PER_VALUE by activation ("gated <fn>" for a
# gated op, whose subtile holds the gate and the up). Fitted to triton.compile (3.9) for sm_90 and sm_100 over
# tests/data/grid_triton_recompute.jsonl (tests/grids/triton_recompute.py), where the accumulator alone missed the
# spills: every kernel that spilled is estimated past 256, none that built spill-free is.
RECOMPUTE_BASE = 32
RECOMPUTE_PER_VALUE = {"gelu": 1.375, "gelu_tanh": 0.75, "silu": 0.7, "sigmoid": 0.7, "relu": 0.25, "gated silu": 0.25}


def recompute_registers(spec: GemmSpec, acc_registers: int) -> tuple[int, int]:
    """(the registers the recompute GEMM's epilogue holds beside its accumulator of `acc_registers` a thread, its
    EPI_SPLIT), (0, 0) for a kernel that forms no G."""
    knobs = recompute_knobs(spec)
    if knobs is None:
        return 0, 0
    split = int(knobs.get("EPI_SPLIT", 1))  # type: ignore[call-overload]
    gated = any(op.op == "gated" for op in spec.epilogue)
    key = f"{'gated ' if gated else ''}{activation_fn(spec.epilogue)}"
    per_value = RECOMPUTE_PER_VALUE.get(key, max(RECOMPUTE_PER_VALUE.values()))  # unmeasured: the costliest
    return math.ceil(RECOMPUTE_BASE + per_value * acc_registers / split), split


def register_findings(ctx: RuleContext) -> Iterator[Finding]:
    """REG001 on Triton: ptxas always builds the kernel, spilling what does not fit into local memory, and
    a config that spills is a failed one (`specgen compile`). The estimate: the accumulator's registers
    per thread (gate and up, 2 tile.n columns, with a gated epilogue), plus the operands an FMA dot (f32
    ieee) holds beside it, plus the recompute GEMM's epilogue (`recompute_registers`: until session 35 the
    accumulator alone, so a whole-tile erf GELU recompute that spilled 1.3-1.7 KB passed as a near accept), against
    the 255 a thread may have.

    Its margin (`REGISTER_MARGIN`) is nearly the whole range, measured with `triton.compile` over
    tests/differential.py's seed-17 grid (1000 kernels with triton 3.9.0, tests/data/grid_triton.jsonl,
    and 1000 with 3.6.0, tests/data/grid_triton_3.6.jsonl): ptxas spilled kernels whose estimate was as
    low as 16 registers (255 of 1000 under the estimate's old 192 warning line with 3.9; FMA dots, long
    epilogues, flattened loops, 8-bit tiles 256 deep in K), and every kernel estimated past 256 spilled
    (sm_100 kernels at exactly 256 did not: tcgen05 keeps the accumulator in TMEM until the epilogue), as did
    every recompute kernel of tests/data/grid_recompute_triton.jsonl estimated past 256 with its epilogue. So
    a config from 16 to 256 is near the boundary (check compiles it where Triton is installed: the
    installed Triton's ptxas decides), one past 256 is refused, one under 16 accepted."""
    regs, threads = ctx.acc_registers, ctx.acc_threads
    operands = fma_operand_registers(ctx)
    epilogue, split = recompute_registers(ctx.spec, regs)
    need = regs + operands + epilogue
    near = REGISTER_MARGIN.near(need, TRITON_REGISTERS)
    if need <= TRITON_REGISTERS and not near:
        return
    held = f" + {operands} for the FMA operands" if operands else ""
    if epilogue:
        held += f" + {epilogue} for the recompute epilogue (dOut, pre and act' of a 1/{split} column subtile)"
    held += f" = {need}" if held else ""
    side = f"> {TRITON_REGISTERS}: ptxas spills to local memory" if need > TRITON_REGISTERS else f"of {TRITON_REGISTERS}"
    yield Finding("REG001", "error", f"accumulator needs {regs} registers per thread ({threads} threads){held} {side}",
                  "use more warps or a smaller tile", ("triton", "num_warps"),
                  Near(REGISTER_MARGIN, need <= TRITON_REGISTERS, compiled.spills) if near else None)


def option_findings(ctx: RuleContext) -> Iterator[Finding]:
    """OPT001 on Triton: options the spec's own settings switch off are warnings: the subtiled store is
    a TMA store (`triton.tma`), `flatten` pipelines a persistent kernel's tile loop (`schedule.persistent`)."""
    s = ctx.spec
    if s.triton.epilogue_subtile and not s.triton.tma:
        yield Finding("OPT001", "warning", "triton.epilogue_subtile = true is ignored: it halves the TMA "
                      "store, and triton.tma = false stores through pointers", "", ("triton", "epilogue_subtile"))
    if s.triton.flatten and not s.schedule.persistent:
        yield Finding("OPT001", "warning", "triton.flatten = true is ignored: it pipelines the tile loop of a "
                      "persistent kernel, and schedule.persistent = false", "", ("triton", "flatten"))
