"""What a rule is: an id, a title, the targets it concerns (by their table facts, never by arch name),
the spec kinds it concerns, and a small function over a `Resolved` (resolve.py's, computed once per
(spec, target)) that yields `Finding`s whose messages carry the numbers compared. Hard limits are
errors; example-kernel conventions are warnings. Each rule's docstring cites its source
(../shared/HARDWARE.md rows) and every rule has a unit test on each side of its boundary
(tests/test_rules.py).

Rules live beside what they concern: those every kind's designs answer in rules/hooks.py, those a
kind's designs share in the kind's `rules` part, a design's own in its package's `rules.py` (each a
`RuleSet` named `RULES`); specgen/rules/table.py collects them in one table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from specgen.resolved import Resolved
from specgen.rules.finding import Finding, Margin, Near, ProbeResult, Severity
from specgen.spec.dtypes import DType
from specgen.spec.models import Target
from specgen.targets import Mma, TargetInfo, target_info

__all__ = ["Finding", "Margin", "Near", "ProbeResult", "Severity"]  # re-exported: a design's rules import the machinery from here only

RuleContext = Resolved  # what every rule reads: resolved once per (spec, target) by resolve.py
RuleFn = Callable[[RuleContext], Iterator[Finding]]
Applies = Callable[[Target | TargetInfo], bool]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    applies: Applies
    fn: RuleFn = field(repr=False)
    # The spec kinds the rule concerns; () is every kind. The table sets it from where the rule lives:
    # a kind's rules and its designs' concern that kind.
    kinds: tuple[str, ...] = ()


class RuleSet(list[Rule]):
    """The rules of one module, in the order they are written (the table's order)."""

    def rule(self, rule_id: str, title: str, applies: Applies) -> Callable[[RuleFn], RuleFn]:
        def register(fn: RuleFn) -> RuleFn:
            self.append(Rule(rule_id, title, applies, fn))
            return fn

        return register


# --- which targets a rule concerns: facts of the target table ------------------------------------------
def info_of(t: Target | TargetInfo) -> TargetInfo:
    return t if isinstance(t, TargetInfo) else target_info(t)


def is_gpu(t: Target | TargetInfo) -> bool:
    return info_of(t).memory == "smem"


def is_tpu(t: Target | TargetInfo) -> bool:
    return info_of(t).memory == "vmem"


def issues(family: Mma | str) -> Applies:
    """Targets whose kernel issues the MMA family's instructions itself (its tile maps onto them)."""
    def applies(t: Target | TargetInfo) -> bool:
        info = info_of(t)
        return info.issues_mma and info.mma == family

    applies.__name__ = f"issues_{family}"
    return applies


def uses_tma_boxes(t: Target | TargetInfo) -> bool:
    """Raw TMA boxes (<= 256 per dim), where the target's row says tiles move as such."""
    return info_of(t).tma_boxes


def any_target(t: Target | TargetInfo) -> bool:
    return True


def pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def k_per_instruction(dtype: DType) -> int:
    """MMA K per instruction: 32 bytes of K (tf32 8, 16-bit 16, 8-bit 32). PTX ISA, both tensor-core MMA families."""
    return 32 // dtype.bytes


def target_of(design: object) -> Applies:
    """The targets a design serves (its `serves`, over the target's row): for a design's own rules."""
    def applies(t: Target | TargetInfo) -> bool:
        return design.serves(info_of(t))  # type: ignore[attr-defined]

    return applies
