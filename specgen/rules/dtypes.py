"""Operand and accumulator dtypes: the MMA families' tables (DT001) and the kinds (DT004)."""

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
