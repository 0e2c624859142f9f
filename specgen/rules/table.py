"""The rule table: the shared rules, then each design's own (its package's `rules.py`), in registry
order. `rules_for` selects once per (kind, target) the rules that concern it."""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec

from specgen.kinds.lineup import DESIGN_PACKAGES
from specgen.rules import cluster, dtypes, hooks, memory, mma, tma
from specgen.rules.base import Finding, Rule, RuleContext, RuleFn
from specgen.targets import TargetInfo

__all__ = ["RULES", "Finding", "Rule", "RuleContext", "rules_for", "run_rules"]

_SHARED = (dtypes, mma, memory, tma, cluster, hooks)
_COLLECTED: list[Rule] = [r for m in _SHARED for r in m.RULES] + [
    r for p in DESIGN_PACKAGES if find_spec(f"{p}.rules") is not None for r in import_module(f"{p}.rules").RULES
]
# The table reads by topic, wherever a rule lives (so `check` lists a target's findings in one order):
# these id prefixes first, then the designs' own prefixes alphabetically, then split-K and options.
_FIRST = ("DT", "MAJ", "MMA", "POW", "SMEM", "VMEM", "TMEM", "TMA", "CLU", "REG")
_LAST = ("SPK", "OPT")


def _prefix(rule: Rule) -> str:
    return rule.id.rstrip("0123456789")


def _topic_order(rules: list[Rule]) -> list[Rule]:
    own = sorted({_prefix(r) for r in rules} - {*_FIRST, *_LAST})
    order = {p: i for i, p in enumerate((*_FIRST, *own, *_LAST))}
    return sorted(rules, key=lambda r: (order[_prefix(r)], r.id))


RULES: list[Rule] = _topic_order(_COLLECTED)

_SELECTED: dict[tuple[int, str, str], list[RuleFn]] = {}


def rules_for(kind: str, info: TargetInfo) -> list[RuleFn]:
    """The rules that concern a kind on a target, in table order (selected once per pair)."""
    key = (id(RULES), kind, info.name)  # RULES may be swapped (tests); its identity keys the cache
    fns = _SELECTED.get(key)
    if fns is None:
        fns = _SELECTED[key] = [r.fn for r in RULES if kind in r.kinds and r.applies(info)]
    return fns


def run_rules(ctx: RuleContext) -> list[Finding]:
    return [f for fn in rules_for(ctx.spec.kind, ctx.info) for f in fn(ctx)]
