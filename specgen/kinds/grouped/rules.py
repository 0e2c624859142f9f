"""The rules every grouped design shares (the kind's part `rules`): the GEMM kind's checks that read the same
sections (dtypes DT001 / DT004 / DT005, the SMEM budget SMEM001, TMA boxes TMA001-2, clusters CLU001, the gated
epilogue EPI001-EPI002, a training backward TRN001: one rule each, concerning both kinds), and the grouped
kind's own (GRP001-GRP003).

What only a call can tell is guarded on the host at launch instead (specgen/runtime/grouped.py, named in each
guard's error): the group index's dtype, shape and device (int32 (G,), as torch._grouped_mm's "Offsets have to
be int32"), each operand's major and 16-byte alignment, and 64-bit indexing where rows x K (or a group's K x N)
passes 2^31."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.shared_rules import cluster, dtypes, gated, memory, tma, training
from specgen.kinds.grouped import KIND
from specgen.rules.base import Finding, RuleContext, RuleSet
from specgen.rules.hooks import served_by
from specgen.spec.dtypes import DType

SHARED = [r for r in dtypes.RULES if r.id in ("DT001", "DT004", "DT005")] + [*memory.RULES, *tma.RULES, *cluster.RULES,
                                                                                       *gated.RULES, *training.RULES]
OWN = RuleSet()
GROUPED = served_by(lambda design, info: True, (KIND,))  # the targets a grouped design serves


@OWN.rule("GRP001", "the ragged rows are not A's contiguous dim", GROUPED)
def ragged_rows_contiguous(ctx: RuleContext) -> Iterator[Finding]:
    """A (total_rows, K) stored M-major puts the ragged dimension contiguous: every group's start must then sit
    on a 16-byte boundary (torch's grouped GEMM asserts `delta % (16 / element size) == 0` on the device,
    pytorch aten/src/ATen/native/cuda/GroupMMCommon.cuh; TMA needs 16-byte aligned boxes, cuTensorMapEncodeTiled),
    and group sizes live on the device, where no host guard can read them without a sync. K-major A (the MoE
    forward's layout, torch's row-major `mat_a`) has no such condition. A ragged-K kernel's groups run along K
    instead: its A takes either major (the weight gradient's is M-major)."""
    a = ctx.spec.a
    if a.major == "mn" and ctx.spec.groups.ragged == "m":
        per = max(1, 16 // a.dtype.bytes)
        yield Finding("GRP001", "error", f"A is M-major: the ragged rows would be contiguous, so every group's rows "
                      f"would have to start on a 16-byte boundary (a multiple of {per} {a.dtype} rows), which only the "
                      "device can check", 'store A K-major (a.major = "k"): (total_rows, K) row-major', ("a", "major"))


@OWN.rule("GRP002", "the grouped schedule: persistent, one K loop a tile", GROUPED)
def grouped_schedule(ctx: RuleContext) -> Iterator[Finding]:
    """The tile count of a grouped GEMM depends on the group sizes, which live on the device: its GPU kernels are
    persistent, a static number of programs (the SMs) walking the groups' tiles (no host sync, so a CUDA graph
    replays with new sizes; the pytorch Inductor grouped-mm template and CUTLASS's MoE example schedule so), and
    its TPU kernel a static grid over the groups' tile visits (megablox's). So `schedule.persistent = false` is
    ignored (warning), and split-K, which no grouped design renders, is an error rather than silently dropped."""
    s = ctx.spec.schedule
    if not s.persistent:
        how = ("always runs persistent (one program per SM)" if ctx.info.gpu is not None else
               "runs a static grid over every group's tile visits")
        yield Finding("GRP002", "warning", "schedule.persistent = false is ignored: a grouped kernel's tile count is "
                      f"known only on the device, so it {how}", "drop schedule.persistent", ("schedule", "persistent"))
    if s.split_k > 1:
        yield Finding("GRP002", "error", f"schedule.split_k = {s.split_k}: no grouped design renders split-K (its "
                      "tiles are found on the device, one K loop each)", "set schedule.split_k = 1",
                      ("schedule", "split_k"))


GROUPED_DTYPES = (DType.f16, DType.bf16, DType.f32, DType.tf32, DType.fp8_e4m3, DType.fp8_e5m2)


@OWN.rule("GRP003", "grouped operand dtypes", GROUPED)
def grouped_dtypes(ctx: RuleContext) -> Iterator[Finding]:
    """The grouped designs take 16-bit and 32-bit float operands, as torch._grouped_mm does (bf16, fp16, fp32:
    its `_grouped_mm_validate_inputs`), and fp8 (e4m3, e5m2: they may mix, DT001), as torch._scaled_grouped_mm
    does (e4m3 there), its rowwise scales spelled as the epilogue's `scale` by = "rowcol": scale_a (total_rows,)
    and scale_b (G, N). Integer operands (int8 into an int32 accumulator) are not rendered: torch has no grouped
    integer GEMM to match, and no grouped template rounds an integer accumulator."""
    for side in ("a", "b"):
        dt = getattr(ctx.spec, side).dtype
        if dt not in GROUPED_DTYPES:
            yield Finding("GRP003", "error", f"{side.upper()} is {dt}: grouped GEMMs take "
                          f"{', '.join(map(str, GROUPED_DTYPES))} operands", "use bf16, f16 or fp8_e4m3 (with a "
                          'scale by = "rowcol")', (side, "dtype"))


RULES = [*SHARED, *OWN]
