"""Rules every design of every kind answers in its own way: the rule is shared (its id, where it
applies), the verdict is the design's (`register_findings`, `option_findings`; design.py). Where each
applies comes from the registry: the designs that serve the target (`served_by`, which a kind's rules
use too)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from specgen.registry import DESIGNS, DesignBase, design_for
from specgen.rules.base import Applies, Finding, RuleContext, RuleSet, any_target, info_of
from specgen.spec.models import Target
from specgen.targets import TargetInfo

RULES = RuleSet()
KINDS = tuple(sorted({d.kind for d in DESIGNS}))


def served_by(pred: Callable[[DesignBase, TargetInfo], bool], kinds: tuple[str, ...] = KINDS) -> Applies:
    """The targets where a design (of one of `kinds`) that serves them answers `pred`."""
    def applies(t: Target | TargetInfo) -> bool:
        info = info_of(t)
        return any(d is not None and pred(d, info) for d in (design_for(k, info) for k in kinds))

    return applies


@RULES.rule("REG001", "accumulator register pressure", served_by(lambda d, info: d.has_register_model(info)))
def register_pressure(ctx: RuleContext) -> Iterator[Finding]:
    """A register-resident accumulator against the registers a thread has, by each design's own register
    model (its rules.py's `register_findings`: where the compiler will likely spill, what the epilogue
    keeps live beside the accumulator). Designs whose accumulator lives elsewhere have none."""
    yield from ctx.design.register_findings(ctx)


@RULES.rule("OPT001", "backend options the target can honour", any_target)
def backend_options(ctx: RuleContext) -> Iterator[Finding]:
    """Each backend's options are read by that backend's targets only (an options table on a spec that
    lists none of its backend's targets is inert, not an error). Within a backend, an option the target
    cannot honour is an error, and one that the spec's own settings switch off a warning: each design
    says which (`option_findings`, with the instruction or limit that decides it)."""
    yield from ctx.design.option_findings(ctx)
