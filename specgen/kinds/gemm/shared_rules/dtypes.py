"""Operand and accumulator dtypes: the MMA families' tables (DT001) and the kinds (DT004); the dtypes a
kernel stores (DT005)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.rules.base import Finding, RuleContext, RuleSet, any_target, is_gpu
from specgen.spec.dtypes import DType
from specgen.targets import Mma

RULES = RuleSet()

# --- dtypes --------------------------------------------------------------------------------------------
_MMA_ACC: dict[Mma, dict[DType, tuple[DType, ...]]] = {
    # CD cute/nvgpu/warpgroup/mma.py and PTX wgmma: f16 -> f16/f32; bf16 -> f32; tf32 -> f32; fp8 -> f16/f32; s8 -> s32
    Mma.wgmma: {
        DType.f16: (DType.f16, DType.f32), DType.bf16: (DType.f32,), DType.tf32: (DType.f32,),
        DType.fp8_e4m3: (DType.f16, DType.f32), DType.fp8_e5m2: (DType.f16, DType.f32), DType.int8: (DType.int32,),
    },
    # PTX tcgen05.mma kinds: f16/bf16 (bf16 acc f32 only); tf32 -> f32; f8f6f4 -> f16/f32; i8 -> s32
    Mma.tcgen05: {
        DType.f16: (DType.f16, DType.f32), DType.bf16: (DType.f32,), DType.tf32: (DType.f32,),
        DType.fp8_e4m3: (DType.f16, DType.f32), DType.fp8_e5m2: (DType.f16, DType.f32), DType.int8: (DType.int32,),
    },
}


@RULES.rule("DT001", "operand and accumulator dtypes the MMA instruction takes", is_gpu)
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
    own = ctx.design.dot_accumulators(a)  # a design whose dot picks its own instructions (tl.dot) says
    if own is not None:
        legal = own
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


@RULES.rule("DT004", "accumulator kind matches the operands", any_target)
def accumulator_kind(ctx: RuleContext) -> Iterator[Finding]:
    """Integer operands accumulate in int32, float operands in a float type (every MMA table)."""
    a, acc = ctx.spec.a.dtype, ctx.spec.accumulator
    if a.is_float != acc.is_float or acc in (DType.int8, DType.fp8_e4m3, DType.fp8_e5m2, DType.bf16, DType.tf32):
        want = "int32" if not a.is_float else "f32"
        yield Finding("DT004", "error", f"{a} operands cannot accumulate in {acc}", f"set accumulator = \"{want}\"",
                      ("accumulator",))


_FLOAT_OUTPUTS = "f32, f16 or bf16 (or fp8 e4m3/e5m2)"
_TF32 = "tf32 is a compute format (f32 storage whose 10-bit mantissa the tensor cores read), not a storage type"


@RULES.rule("DT005", "stored dtypes: a float GEMM stores floats, tf32 is never stored", any_target)
def stored_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """What a kernel writes or reads in memory is a storage type, and a float GEMM's values stay float.

    tf32 names how the MMA reads f32 data (PTX `mma`/`wgmma` `.tf32`, `tcgen05.mma.kind::tf32`: f32
    registers and memory, a 10-bit mantissa inside the instruction; specgen/spec/dtypes.py: stored as f32).
    As an operand's dtype it keeps that meaning (f32 data, tensor-core precision: DT001, MAJ001). Stored,
    it has none: torch and jnp have no tf32 dtype, and the backends disagree on what writing one means
    (Triton and Pallas spell it float32, CuTe converts to `TFloat32`). So the output, a bias or residual
    read from memory, and a `cast` (which rounds "as an unfused chain would" between stored ops) may not
    be tf32: f32 is what it stores as.

    A float GEMM (float operands: f32, tf32, f16, bf16, fp8) ends in an f32 value; storing it as int8 or
    int32, or casting to them in the chain, is a quantization the spec does not state (scale, rounding
    mode, saturation), rendered as a bare float-to-integer conversion (`acc.to(tl.int8)`) whose rounding
    and overflow the backends need not share; specgen has no quantizing epilogue. An integer GEMM (int8 x
    int8, int32 accumulator: DT001, DT004) keeps its integer output. Issue 36."""
    s = ctx.spec
    float_gemm = s.a.dtype.is_float or s.b.dtype.is_float
    out = s.out.dtype
    if out == DType.tf32:
        yield Finding("DT005", "error", f"out is tf32: {_TF32}", 'set out.dtype = "f32"', ("out", "dtype"))
    elif float_gemm and not out.is_float:
        yield Finding("DT005", "error", f"out is {out} but A and B are {s.a.dtype} x {s.b.dtype}: a float GEMM's output "
                      f"is float: {_FLOAT_OUTPUTS}; specgen has no quantizing epilogue (scale, round, saturate) "
                      f"yet, so storing {out} would truncate the f32 result with no stated rounding or saturation",
                      f'set out.dtype = "f32" (or f16, bf16) and quantize to {out} after the kernel', ("out", "dtype"))
    for i, op in enumerate(s.epilogue):
        dt = op.__dict__.get("dtype")  # a field, where the op has one (getattr of a missing one costs a raise)
        if dt == DType.tf32:
            what = "cast to tf32" if op.op == "cast" else f"{op.op} {op.name!r} is tf32"
            hint = ("drop the cast: the epilogue computes in f32, which is what tf32 data is stored as"
                    if op.op == "cast" else 'set its dtype = "f32"')
            yield Finding("DT005", "error", f"{what}: {_TF32}", hint, ("epilogue", i, "dtype"))
        elif op.op == "cast" and float_gemm and not dt.is_float:
            yield Finding("DT005", "error", f"cast to {dt} in a float GEMM's epilogue: a float GEMM's values are float: "
                          f"{_FLOAT_OUTPUTS}; specgen has no quantizing epilogue (scale, round, saturate) yet, so the "
                          "cast would truncate with no stated rounding or saturation",
                          "drop the cast, or cast to f16, bf16 or fp8 to round as a stored float would",
                          ("epilogue", i, "dtype"))
