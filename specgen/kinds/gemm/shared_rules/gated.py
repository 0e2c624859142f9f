"""A gated epilogue (SwiGLU, GeGLU): only where a design renders it, and there in the configurations its kernel
has (both kinds: the grouped kind's rules list these too)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm import KIND
from specgen.kinds.gemm.designs.cute_sm90.gated import gated_limits
from specgen.registry import rendering
from specgen.rules.base import Finding, RuleContext, RuleSet
from specgen.rules.hooks import served_by
from specgen.spec.epilogue import gated_op
from specgen.targets import Backend

RULES = RuleSet()
GROUPED = "grouped"  # the grouped kind (specgen/kinds/grouped/__init__.py's KIND: importing it here would cycle)


@RULES.rule("EPI001", "a gated epilogue where a design renders it",
            served_by(lambda d, info: not d.renders_gated_on(info), (KIND, GROUPED)))
def gated_design(ctx: RuleContext) -> Iterator[Finding]:
    """A `gated` op (specgen/spec/epilogue.py) reads B with 2N columns and keeps gate and up accumulators: a
    design's kernel must load the doubled B tile, split the accumulator and apply fn(gate) * up before the rest
    of the chain, and its launcher must take B (K, 2N). Designs that do say `renders_gated` (the Triton designs
    of both kinds; the CuTe designs of both kinds, sm90 and sm100: their limits are EPI003; the grouped Mosaic GPU
    design: its MGP003 and PAL009; the dense Pallas design on its Mosaic GPU target: PAL012, PAL009); any other would read N columns of B as if there were no gate, so the spec is refused for
    that target rather than rendered wrong."""
    op = gated_op(ctx.spec.epilogue)
    if op is not None and not ctx.design.renders_gated_on(ctx.info):
        where = sorted({d.name if d.renders_gated else d.gated_label for d in rendering(ctx.design.kind)
                        if d.renders_gated or d.gated_label})
        does = f"the {' and '.join(where)} design{'s do' if len(where) > 1 else ' does'}" if where else "no design does"
        yield Finding("EPI001", "error", f"epilogue[0] is gated ({op.fn}, {op.layout}): the {ctx.design.name} design "
                      f"renders no gated epilogue ({does})", f"drop {ctx.target} from this kernel's targets (a gated kernel of its own for the "
                      "targets that render it)", ("epilogue",))


@RULES.rule("EPI002", "a gated epilogue in the Triton kernels' configurations",
            served_by(lambda d, info: d.renders_gated and info.backend is Backend.triton, (KIND, GROUPED)))
def gated_config(ctx: RuleContext) -> Iterator[Finding]:
    """The Triton kernels apply a gated op to the tile's gate and up accumulators, BLOCK_M x BLOCK_N each, in
    the tile's own program: a split-K tile's f32 partials would be gate and up halves of twice the workspace
    that the reduction does not lay out, and `triton.swap_ab` transposes one accumulator back, not two (nor
    splits an interleaved one). Both are refused with a gated op rather than rendered wrong."""
    op = gated_op(ctx.spec.epilogue)
    if op is None or not ctx.design.renders_gated:
        return
    if ctx.design.kind == KIND and ctx.spec.schedule.split_k > 1:  # the grouped kind refuses split-K (GRP002)
        yield Finding("EPI002", "error", f"schedule.split_k = {ctx.spec.schedule.split_k} with a gated epilogue: the "
                      "split-K reduction sums one accumulator, not gate and up", "set schedule.split_k = 1",
                      ("schedule", "split_k"))
    if ctx.spec.triton.swap_ab:
        yield Finding("EPI002", "error", "triton.swap_ab = true with a gated epilogue: the swapped kernel transposes "
                      "one accumulator back, not gate and up", "set triton.swap_ab = false", ("triton", "swap_ab"))


@RULES.rule("EPI003", "a gated epilogue in the CuTe kernels' configurations",
            served_by(lambda d, info: d.renders_gated and info.backend is Backend.cute, (KIND, GROUPED)))
def gated_cute_config(ctx: RuleContext) -> Iterator[Finding]:
    """The CuTe kernels (dense and grouped, sm90 and sm100) load a gated B through one (N, K, 2, L) view, a gate
    and an up TMA box of tile.n columns a stage (specgen/kinds/gemm/designs/cute_sm90/gated.py): B must be K-major
    (an N-major B's interleaved gate and up columns are every other element of a row; its halves sit N elements
    apart, a TMA stride that must be a multiple of 16 bytes, a shape unknown at check). The dense sm90 kernel's
    `cute.swap_ab` and split-K each handle one accumulator, and the dense sm100 kernel's 2-CTA MMA splits B's
    columns between the pair: each is refused with a gated op rather than rendered wrong."""
    for message, fix, path in gated_limits(ctx.spec, bool(ctx.gpu and ctx.gpu.tmem_columns)):
        yield Finding("EPI003", "error", message, fix, path)
