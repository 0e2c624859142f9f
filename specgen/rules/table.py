"""The rule table: the rules every kind's designs answer (hooks.py), each kind's shared rules and each
design's own (their `rules` parts, specgen/kinds/lineup.py), ordered by topic. `rules_for` selects once
per (kind, target) the rules that concern it."""

from __future__ import annotations

from dataclasses import replace

from specgen.kinds.lineup import parts
from specgen.rules import hooks
from specgen.rules.base import Finding, Rule, RuleContext, RuleFn
from specgen.targets import TargetInfo

__all__ = ["RULES", "Finding", "Rule", "RuleContext", "rules_for", "run_rules"]


def _collect() -> list[Rule]:
    """Every part's rules, each given the kinds whose parts list it. A kind may list another kind's rule (the
    same `Rule`: one check reading sections both kinds have): it stays one rule, concerning both; two different
    rules of one id are an error."""
    by_id: dict[str, Rule] = {}
    for of in ("kinds", "designs"):
        for kind, m in parts("rules", of=of):
            for r in m.RULES:
                held = by_id.get(r.id)
                if held is None:
                    by_id[r.id] = replace(r, kinds=(kind,))
                elif held.fn is not r.fn:
                    raise ValueError(f"two different rules are named {r.id}")
                elif kind not in held.kinds:
                    by_id[r.id] = replace(held, kinds=(*held.kinds, kind))
    return [*hooks.RULES, *by_id.values()]


_COLLECTED: list[Rule] = _collect()
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
        fns = _SELECTED[key] = [r.fn for r in RULES if (not r.kinds or kind in r.kinds) and r.applies(info)]
    return fns


def run_rules(ctx: RuleContext, near: bool = False) -> list[Finding]:
    """The findings of every rule on `ctx`. A modelled rule also marks a config it accepts within its
    margin of the boundary (a `Finding` whose `near.accepted`): only with `near` (check's settle step),
    so that elsewhere the findings are the model's verdicts."""
    return [f for fn in rules_for(ctx.spec.kind, ctx.info) for f in fn(ctx)
            if near or f.near is None or not f.near.accepted]
