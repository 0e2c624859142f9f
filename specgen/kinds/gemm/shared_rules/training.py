"""A `training` backward: only where a design renders it."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.kinds.gemm import KIND
from specgen.registry import rendering
from specgen.rules.base import Finding, RuleContext, RuleSet
from specgen.rules.hooks import served_by

RULES = RuleSet()


@RULES.rule("TRN001", "a training backward where a design renders it",
            served_by(lambda d, info: not d.renders_training_on(info), (KIND,)))
def training_design(ctx: RuleContext) -> Iterator[Finding]:
    """A spec's `training` section asks for backward kernels (dgrad, wgrad, and the forward that stores the
    pre-activation or the backward's recompute) and an op that registers them with autograd: designs that
    render them say `renders_training` (the Triton design) or `renders_training_on` the target (the Pallas
    design's TPU targets, a jax.custom_vjp; not Mosaic GPU); the others render the forward only, whose op would
    refuse every input that requires grad."""
    if getattr(ctx.spec, "training", None) is not None:
        where = sorted(d.training_label or d.name for d in rendering(KIND) if d.renders_training or d.training_label)
        yield Finding("TRN001", "error", f"training: the {ctx.design.name} design renders no backward for {ctx.target} (the "
                      f"{' and '.join(where)} design{'s do' if len(where) > 1 else ' does'})",
                      f"drop {ctx.target} from targets, or drop `training`", ("training",))
