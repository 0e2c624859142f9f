"""The grouped Pallas TPU design's rules: the dense Pallas TPU design's own, the same rules (one check each,
concerning both kinds: they read sections the grouped spec has, `tile`, `pipeline`, the operands' dtypes and
majors, `pallas.vmem_limit_bytes`), on the grouped kernel's VMEM budget (design.py `tpu_memory`): the MXU's
dtypes DT003, the VMEM budget VMEM001, block shapes PAL001, MXU alignment PAL002 (warning), buffering depth
PAL003; and its own, GRP201 (the f32 accumulator), GRP204 (a gated epilogue's B: halves) and GRP205 (an fp8
forward's backward: wgrad's 8-bit A blocks). GRP203 (groups of rows
only) is retired (session 26): the kernel renders groups along K too (megablox's `tgmm`, the weight gradient:
templates/grouped/pallas/tpu_k.jinja), whose blocks are the dense kernel's A (M, K) / (K, M), B (N, K) / (K, N) and
(tile.m, tile.n) out blocks, so PAL001 and VMEM001 (design.py `tpu_memory`: no base block) check it as they stand.
GRP202 (no fp8 operands and no per-group (G, N) column scales) is retired (session 26): the kernel's
dot_general takes the 8-bit operands the MXU multiplies (DT003 says which: e5m2 before v7x, e4m3 and e5m2 on v7x,
either B major) and reads a (G, N) column scale as it reads the per-group bias, a (1, block_n) row of group g;
the interpreter's numerics and Mosaic's lowering for TPU of both are tests/backends/pallas/test_grouped_tpu.py's."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm.designs.pallas import rules as dense
from specgen.kinds.grouped.designs.pallas.design import ACC_BYTES, DESIGN
from specgen.rules.base import Finding, RuleContext, RuleSet, target_of
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op

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


@OWN.rule("GRP204", "the grouped TPU kernel's gated B: halves", target_of(DESIGN))
def tpu_gated_b(ctx: RuleContext) -> Iterator[Finding]:
    """The kernel reads a gated B as two (tile.n, tile.k) / (tile.k, tile.n) blocks a step (design.py): B (G, 2N, K)
    K-major through its (G, 2, N, K) view, the half a leading (squeezed) block dim; B (G, K, 2N) N-major as stored,
    the gate block j and the up block j + N / tile.n, which needs N a multiple of tile.n: a shape, not a spec field,
    so the launcher checks it when the call traces (a ValueError naming N and the block). Pallas TPU's block rule (jax
    `pallas/mosaic/lowering.py`: a block's last two dims divisible by (8, 128) or equal to the array's) refuses the
    interleaved views' one-half blocks, checked by lowering for TPU on the CPU (jax 0.10.2): interleaved K-major,
    (G, N, 2, K), puts the half on the second-minor (sublane) dim, a block of 1 row there (splitting a (2 tile.n,
    tile.k) block by a stride-2 sublane load instead needs Mosaic's `tpu.strided_load`, which takes a base of exactly
    128 lanes: apply_vector_layout.cc); interleaved N-major strides the lanes. Those are refused rather than rendered
    slow or untested."""
    op = gated_op(ctx.spec.epilogue)
    if op is None:
        return
    if op.layout != "halves":
        yield Finding("GRP204", "error", f"a gated epilogue ({op.fn}, interleaved): gate column j is B's row 2j, so a "
                      f"gate block of the {ctx.target} grouped kernel is every other row of B, a block of 1 row on the "
                      "sublane dim of a (G, N, 2, K) view, which TPU blocks (8 x 128 tiles) do not take",
                      'set layout = "halves" (gate rows [0, N), up rows [N, 2N))', ("epilogue", 0, "layout"))


@OWN.rule("GRP205", "an fp8 forward's TPU backward reads the 8-bit A in wgrad's blocks", target_of(DESIGN))
def tpu_fp8_backward_blocks(ctx: RuleContext) -> Iterator[Finding]:
    """An fp8 forward's backward (session 27; designs/pallas/training.py) runs its GEMMs in the output's dtype, so
    check takes dgrad and wgrad as GEMMs of that dtype (VMEM001, PAL001 at `training.*`); but dgrad reads B and wgrad
    A as stored, 8-bit, and converts each block in the kernel. wgrad's A block has the groups' rows on its sublanes,
    `training.wgrad.tile.k` of them, which must be a multiple of the 8-bit sublane tile (32: PAL001's rule for the
    dtype, jax `pallas/mosaic/lowering.py`), where PAL001 on the 16-bit companion asks 8 or 16. dgrad's B block needs
    no rule of its own: its rows (tile.k for a K-major B, tile.n for an N-major one) are the lanes of G's or of dA's
    block, which PAL001 makes multiples of 128."""
    t, s = getattr(ctx.spec, "training", None), ctx.spec
    if t is None or not s.a.dtype.is_fp8:
        return
    rows, sub = (t.wgrad.tile or s.tile).k, dense.tpu_sublanes(ctx, s.a.dtype)
    if rows % sub:
        yield Finding("GRP205", "error", f"training.wgrad: the backward reads A ({s.a.dtype}) as stored in blocks of "
                      f"{rows} rows (tile.k = {rows}), not a multiple of the {sub}-row sublane tile of an 8-bit block "
                      f"on {ctx.target}", f"set training.wgrad.tile.k to a multiple of {sub}", ("training", "wgrad", "tile", "k"))


RULES = [*SHARED, *OWN]
