"""The grouped Pallas TPU design's rules: the dense Pallas TPU design's own, the same rules (one check each,
concerning both kinds: they read sections the grouped spec has, `tile`, `pipeline`, the operands' dtypes and
majors, `pallas.vmem_limit_bytes`), on the grouped kernel's VMEM budget (design.py `tpu_memory`): the MXU's
dtypes DT003, the VMEM budget VMEM001, block shapes PAL001, MXU alignment PAL002 (warning), buffering depth
PAL003; and its own, GRP201 (the f32 accumulator) and GRP203 (groups of rows only)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.pallas import rules as dense
from specgen.kinds.grouped.designs.pallas.design import ACC_BYTES, DESIGN
from specgen.rules.base import Finding, RuleContext, RuleSet, target_of
from specgen.spec.dtypes import DType

SHARED = [r for r in dense.RULES if r.id in ("DT003", "VMEM001", "PAL001", "PAL002", "PAL003")]
OWN = RuleSet()


@OWN.rule("GRP201", "the grouped TPU kernel accumulates in f32", target_of(DESIGN))
def tpu_accumulator(ctx: RuleContext) -> Iterator[Finding]:
    """The MXU accumulates float products in f32 (`preferred_element_type=jnp.float32`: jax
    `pallas/ops/tpu/megablox/gmm.py` and matmul.py do the same), and the grouped kernel keeps its accumulator in
    an f32 VMEM scratch (tile.m x tile.n x 4 B, the budget's figure) across K steps and across the visits of a
    shared tile; a 16-bit accumulator is not rendered, so a spec asking one is refused rather than silently
    given f32."""
    acc = ctx.spec.accumulator
    if acc != DType.f32:
        t = ctx.spec.tile
        yield Finding("GRP201", "error", f"accumulator = {acc}: the {ctx.target} grouped kernel accumulates in an f32 "
                      f"VMEM scratch ({t.m}x{t.n} x {ACC_BYTES} B = {t.m * t.n * ACC_BYTES} B)", 'set accumulator = "f32"',
                      ("accumulator",))



@OWN.rule("GRP203", "the grouped TPU kernel's groups run along M", target_of(DESIGN))
def tpu_ragged_m(ctx: RuleContext) -> Iterator[Finding]:
    """The TPU kernel is megablox's `gmm` (groups of rows: its grid visits each group's row tiles); the weight
    gradient's grouping along K (megablox's `tgmm`, out (G, M, N)) is not rendered, so a spec asking it is refused
    rather than given a kernel of the other meaning. The Triton design renders it."""
    if ctx.spec.groups.ragged == "k":
        yield Finding("GRP203", "error", f"groups.ragged = 'k': the {ctx.target} grouped kernel groups rows (ragged M) "
                      "only", "drop this target for the ragged-K kernel (triton:sm90 and triton:sm100 render it)",
                      ("groups", "ragged"))


RULES = [*SHARED, *OWN]
