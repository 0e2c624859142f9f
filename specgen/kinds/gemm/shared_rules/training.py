"""A `training` backward: only where a design renders it."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.design import DesignBase
from specgen.kinds.gemm import KIND
from specgen.kinds.gemm.training import chain_refusal
from specgen.registry import rendering
from specgen.rules.base import Finding, RuleContext, RuleSet
from specgen.rules.hooks import served_by
from specgen.spec.epilogue import gated_op

RULES = RuleSet()
GROUPED = "grouped"  # the grouped kind (specgen/kinds/grouped/__init__.py's KIND: importing it here would cycle)


def _covers_every_section(d: DesignBase, info: object) -> bool:
    """A design whose backward renders every `training` section its kind takes: TRN001 has nothing to say for it (a
    design with a `training_refusal` of its own may still refuse one: the grouped Mosaic GPU design's dtypes)."""
    return (d.renders_training_on(info) and d.renders_gated_training_on(info) and d.renders_chain_training  # type: ignore[arg-type]
            and type(d).training_refusal is DesignBase.training_refusal)


@RULES.rule("TRN001", "a training backward where a design renders it",
            served_by(lambda d, info: not _covers_every_section(d, info), (KIND, GROUPED)))
def training_design(ctx: RuleContext) -> Iterator[Finding]:
    """A spec's `training` section asks for backward kernels (dgrad, wgrad, and the forward that stores the
    pre-activation or the backward's recompute) and an op that registers them with autograd: designs that
    render them say `renders_training` (the Triton and CuTe sm90 designs; the CuTe sm100 design's since session 33) or `renders_training_on` the target (the Pallas
    design's TPU and Mosaic GPU targets, a jax.custom_vjp); the others render the forward only, whose op would
    refuse every input that requires grad. A gated epilogue's backward (pre of B's 2N columns, G holding dgate
    and dup in the forward's layout) is a design's where it says `renders_gated_training` (the Triton, dense CuTe
    sm90 and Pallas designs: the Pallas TPU backward's halves, as its forward's PAL013; the dense CuTe sm100 design's
    since session 33, both layouts) or
    `renders_gated_training_on` the target; every shipped design that renders training renders it. The other chains (scale, residual, clamp, cast, bias along m, any order), an fp8 forward's backward
    and a batched one's (`batch = true`) are the dense Triton design's (`renders_chain_training`); an fp8 forward's with its
    scales then a chain every design renders is also the dense CuTe sm90 and (session 33) CuTe sm100 designs' and, on its TPU targets, the Pallas
    design's (session 32: `renders_fp8_training_on` the target, TPU and Mosaic GPU); the other chains unbatched, of 16-bit
    operands, the dense CuTe sm90 and sm100 designs' too and the Pallas design's, TPU and Mosaic GPU (session 33:
    `renders_unbatched_chain_training`); a batched fp8 forward's (its scales shared by the batches) the dense CuTe sm90
    and Pallas designs' too (session 34: `renders_batched_fp8_training`). A design whose backward covers less than the section says why in `training_refusal`
    (the CuTe sm90 and sm100 designs and the Pallas one on Mosaic GPU: f16 / bf16 operands, out of their dtype).
    The grouped kind's `training` (ragged M, a gated op's too, and an fp8 forward's) is its Triton design's (every
    chain the kind takes: `renders_chain_training`); its Pallas TPU design renders it too (a jax.custom_vjp; a gated
    op's since session 27, halves as its forward's GRP204; an fp8 forward's since session 27), its CuTe sm90 design the plain
    chains and a gated op's of 16-bit operands (session 28; `training_refusal`: one dtype) and an fp8 forward's (session
    32), and so does its Mosaic GPU design (session 28: f16 / bf16, a gated
    op's too; an fp8 forward's since session 29: `training_refusal` refuses other dtypes); its CuTe sm100 design the
    forward only. The rule concerns every target where a design serving it lacks one of the three."""
    if getattr(ctx.spec, "training", None) is None:
        return
    op = gated_op(ctx.spec.epilogue)
    if ctx.design.renders_training_on(ctx.info) and op is not None and not ctx.design.renders_gated_training_on(ctx.info):
        where = sorted(d.gated_training_label or d.name for d in rendering(ctx.design.kind)
                       if d.renders_gated_training or d.gated_training_label)
        yield Finding("TRN001", "error", f"training with a gated epilogue ({op.fn}, {op.layout}): the "
                      f"{ctx.design.training_label or ctx.design.name} design renders no gated backward for {ctx.target} "
                      f"(the {_listed(where)} design{'s do' if len(where) > 1 else ' does'})",
                      f"drop {ctx.target} from targets, or drop `training`", ("training",))
    elif ctx.design.renders_training_on(ctx.info) and not ctx.design.renders_chain_training and (
            what := chain_refusal(ctx.spec, ctx.design.renders_fp8_training_on(ctx.info),
                                  ctx.design.renders_unbatched_chain_training, ctx.design.renders_batched_training,
                                  ctx.design.renders_batched_fp8_training)):
        # scale, residual, clamp, cast, bias along m, other orders, a batched or an fp8 forward: named, the kind's
        # designs that render this spec's (`renders_chain_training`, or their flags pass `chain_refusal`; the grouped
        # kind refuses the chains at load)
        where = sorted(d.training_label or d.name for d in rendering(ctx.design.kind) if d.renders_chain_training or (
            (d.renders_training or d.training_label) and not chain_refusal(
                ctx.spec, d.renders_fp8_training or bool(d.training_label), d.renders_unbatched_chain_training,
                d.renders_batched_training, d.renders_batched_fp8_training)))
        yield Finding("TRN001", "error", f"{what}: the {ctx.design.training_label or ctx.design.name} design renders "
                      f"no backward for it on {ctx.target} (the {_listed(where)} design{'s do' if len(where) > 1 else ' does'})",
                      f"drop {ctx.target} from targets, "
                      f"or drop `training` or {'`batch`' if what.startswith('training with batch') else 'the ops'}",
                      ("training",))
    elif ctx.design.renders_training_on(ctx.info) and (why := ctx.design.training_refusal(ctx.spec, ctx.info)):
        # a design whose backward covers less than the section (the CuTe sm90 design: 16-bit operands, out of their dtype)
        yield Finding("TRN001", "error", f"{why} ({ctx.target})", f"drop {ctx.target} from targets, or drop `training`",
                      ("training",))
    elif not ctx.design.renders_training_on(ctx.info):
        where = sorted(d.training_label or d.name for d in rendering(ctx.design.kind)
                       if d.renders_training or d.training_label)
        yield Finding("TRN001", "error", f"training: the {ctx.design.name} design renders no backward for {ctx.target} (the "
                      f"{_listed(where)} design{'s do' if len(where) > 1 else ' does'})",
                      f"drop {ctx.target} from targets, or drop `training`", ("training",))


def _listed(names: list[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"
