"""`specgen check`: run every envelope rule over every (spec, target) pair and report with positions.

Each pair is resolved once (resolve.py: stages, memory budget, registers, TMA boxes); the rules read
that, and `check_specs` hands the same `Resolved` objects on to render, whose designs plan from them.
A modelled verdict near its rule's boundary is settled there (`settle`: specgen/settle.py): by the
compiler ("compile"), by the model saying so ("analytic"), or left as the model's plain verdict ("model",
the default of the library calls: the grid records replay that).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from specgen.registry import design_for, designs_for, rendering
from specgen.resolve import Resolved, resolve
from specgen.rules.finding import Finding
from specgen.rules.table import run_rules
from specgen.settle import Settled, SettleStats
from specgen.settle import settle as settle_near
from specgen.spec.load import LoadedSpec
from specgen.spec.models import parse_target
from specgen.targets import ALL_TARGETS, target_info
from specgen.values import value


@value
class Diagnostic:
    spec: str
    file: str
    line: int
    column: int
    target: str
    rule: str
    severity: str
    message: str
    hint: str
    variant: str = ""  # "variant 0 (M <= 64)" when the finding is about a size-selected variant
    source: str = ""  # a near-boundary verdict's: "compiler" (settled) or "model"; "" elsewhere

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        if not self.source:
            del d["source"]
        return d

    @property
    def label(self) -> str:
        """The rule as messages show it: `REG001 (compiler)` where a near-boundary verdict says its source."""
        return f"{self.rule} ({self.source})" if self.source else self.rule

    def __str__(self) -> str:
        where = f"{self.target} {self.variant}" if self.variant else self.target
        text = f"{self.file}:{self.line}:{self.column}: {self.severity} {self.label} [{self.spec} @ {where}] {self.message}"
        return f"{text}\n    hint: {self.hint}" if self.hint else text


@dataclass
class CheckReport:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    resolved: dict[tuple[str, str], Resolved] = field(default_factory=dict)  # (spec, target) -> its resolution
    settled: SettleStats = field(default_factory=SettleStats)  # what the settle step did
    # near-boundary findings awaiting their verdict: (index in diagnostics, spec, target, resolved, variant label,
    # finding); their diagnostics say no position until the verdict keeps them
    pending: list[Pending] = field(default_factory=list, repr=False)


Settle = Literal["model", "analytic", "compile"]
Pending = tuple[int, LoadedSpec, object, Resolved, str, Finding]


def _label(one: Resolved) -> str:
    """What a diagnostic says of the config it is about: a variant's bounds, a companion kernel's label."""
    if one.companion:
        return f"backward {one.companion}"
    return "" if one.variant is None else f"variant {one.variant} ({one.when})"


def _diagnostic(loaded: LoadedSpec, target: object, one: Resolved, label: str, f: Finding, source: str = "") -> Diagnostic:
    # a companion kernel's findings point into the field that configures it (its nearest written ancestor)
    field = (*one.companion_field, *f.field) if one.companion else loaded.spec.config_field(target, f.field, one.variant)
    line, col = loaded.where(field)
    return Diagnostic(loaded.name, loaded.file, line, col, str(target), f.rule, f.severity, f.message, f.hint, label, source)


# a target's resolution, and each of its configs (default, variants) with its label and the rules' findings
Checked = tuple[Resolved, list[tuple[Resolved, str, list[Finding]]]]


class KernelMemo:
    """A run's memo over many specs (check_batch.py): what each target of a kernel resolved to and what the
    rules found, by the kernel as written less its name and description (`LoadedSpec.raw`), so that a kernel
    written again (a copy, a template's output) is resolved and ruled on once. Neither reads the name or the
    description (a finding's message is the config's); positions and the checks that name the kernel's
    modules stay each kernel's own. Holds `limit` kernels at most, then starts over. `agreed`: the kernels whose
    targets' configs agree (CFG001-CFG003 found nothing: that reads the configs, never the name)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self.kernels: dict[str, dict[str, Checked]] = {}
        self.agreed: set[str] = set()

    @staticmethod
    def key(loaded: LoadedSpec) -> str | None:
        return loaded.key

    def put(self, key: str, checked: dict[str, Checked]) -> None:
        if len(self.kernels) >= self.limit:
            self.kernels.clear()
            self.agreed.clear()
        self.kernels[key] = checked


def _definite(findings: list[Finding]) -> list[Finding]:
    """A config refused for a definite reason compiles nothing: its near verdicts cannot change that (a near
    accept is dropped, a near refusal stays the model's, as if far)."""
    if not any(f.severity == "error" and f.near is None for f in findings):
        return findings
    return [f if f.near is None else replace(f, near=None) for f in findings if f.near is None or not f.near.accepted]


def _check_spec(loaded: LoadedSpec, notes: bool, report: CheckReport, near: bool = False,
                memo: KernelMemo | None = None) -> None:
    out = report.diagnostics
    key = None if memo is None else memo.key(loaded)
    seen = None if key is None else memo.kernels.get(key)
    fresh: dict[str, Checked] = {}
    for target in loaded.spec.targets:
        done = None if seen is None else seen.get(str(target))
        if done is None:
            r = resolve(loaded.spec, target)
            done = fresh[str(target)] = (r, [(one, _label(one), _definite(run_rules(one, near=near)))
                                             for one in (r, *r.variants, *r.companions)])
        report.resolved[(loaded.name, str(target))] = done[0]
        for one, label, findings in done[1]:  # every variant of every target is checked
            for f in findings:
                if near and f.near is not None:  # its verdict comes from the settle step: its place kept
                    report.pending.append((len(out), loaded, target, one, label, f))
                    out.append(Diagnostic(loaded.name, loaded.file, 0, 0, str(target), f.rule, f.severity, f.message,
                                          f.hint, label))
                else:
                    out.append(_diagnostic(loaded, target, one, label, f))
    if key is not None and seen is None:
        memo.put(key, fresh)
    if key is None or key not in memo.agreed:
        before = len(out)
        _module_agreement(loaded, report)
        if key is not None and len(out) == before and key in memo.kernels:
            memo.agreed.add(key)
    if not notes:
        return
    listed = {str(t) for t in loaded.spec.targets}
    line, col = loaded.where(("targets",))
    for name in ALL_TARGETS:
        if name in listed:
            continue
        if design_for(loaded.spec.kind, name) is None:  # the spec's kind has no design for that target (yet)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note",
                                  f"cannot serve: no {loaded.spec.kind} design serves it", ""))
            continue
        errors = [f for f in run_rules(resolve(loaded.spec, parse_target(name))) if f.severity == "error"]
        if errors:
            why = "; ".join(f"{f.rule} {f.message}" for f in errors)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note", f"cannot serve: {why}", ""))
        else:
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note",
                                  "could serve this spec but is not listed", f'add "{name}" to targets'))


def _field_values(one: object, other: object, path: tuple[str, ...]) -> tuple[object, object] | None:
    """The field's values on two effective specs as messages show them, or None where it is one object (a
    section no layer overrides stays the kernel's, unchanged: nothing to compare)."""
    a, b = one, other
    for part in path:
        a, b = getattr(a, part), getattr(b, part)
    if a is b:
        return None
    return (a.model_dump(mode="json") if hasattr(a, "model_dump") else a,
            b.model_dump(mode="json") if hasattr(b, "model_dump") else b)


def _module_agreement(loaded: LoadedSpec, report: CheckReport) -> None:
    """CFG001 (error): the targets one generated module serves run one kernel source, so their effective
    configs agree on the fields its design lists as `shared_config` (say tile, schedule, TMA and
    epilogue options, while warps and stages stay per compute capability). Reported at the per_target
    line of each target that departs from the module's first target."""
    for design, targets in designs_for(loaded.spec.kind, loaded.spec.targets).items():
        _variants_agree(loaded, report, targets, design.variant_shared_config)
        modules = design.modules(loaded.spec, targets)
        if any(report.resolved[(loaded.name, str(t))].variants for t in targets):
            _variants_unrendered(loaded, report, {rel: [t for t in served if not design.renders_variants_on(target_info(t))]
                                                  for rel, served in modules.items()})
        shared = design.shared_config
        if not shared:
            continue
        for rel, served in modules.items():
            first = served[0]
            base = report.resolved[(loaded.name, str(first))]
            for t in served[1:]:
                mine = report.resolved[(loaded.name, str(t))]
                out = _disagreement(loaded, rel, shared, first, base, t, mine)
                if out is not None:
                    report.diagnostics.append(out)


def _variants_agree(loaded: LoadedSpec, report: CheckReport, targets: list, shared: tuple[tuple[str, ...], ...]) -> None:
    """CFG002 (error): a size-selected variant launches its target's kernel with other constexprs, warps
    and stages, so it keeps the fields that change the kernel's code (the design's
    `variant_shared_config`: say persistent, raster, TMA and epilogue options). Reported at the
    variant's line."""
    for t in targets:
        r = report.resolved[(loaded.name, str(t))]
        for v in r.variants:
            for path in shared:
                values = _field_values(v.spec, r.spec, path)
                if values is None or values[0] == values[1]:
                    continue
                mine, theirs = values
                name = ".".join(path)
                line, col = loaded.where(loaded.spec.config_field(t, path, v.variant))
                report.diagnostics.append(Diagnostic(
                    loaded.name, loaded.file, line, col, str(t), "CFG002", "error",
                    f"a variant runs the target's kernel with its own tile, warps and stages; {name} changes the "
                    f"kernel's code: {name} = {mine} in the variant, {theirs} on the target",
                    f"keep {name} = {theirs} in the variant, or give the kernel another spec", f"variant {v.variant} ({v.when})"))


def _variants_unrendered(loaded: LoadedSpec, report: CheckReport, modules: dict[str, list]) -> None:
    """CFG003 (error): designs with `renders_variants` render size-selected variants (their launchers
    pick one with integer compares; `renders_variants_on` where that depends on the target); elsewhere a
    design renders one config per module, so a variant on a target it renders would be dropped silently.
    `modules` lists, per module, the targets whose module renders one config. Reported at the variants'
    line. (Targets no design renders are checked only, variants included.)"""
    for rel, served in modules.items():
        for t in served:
            variants = report.resolved[(loaded.name, str(t))].variants
            if not variants:
                continue
            own = getattr(loaded.spec.per_target.get(str(t)), "variants", None) is not None
            line, col = loaded.where(("per_target", str(t), "variants") if own else ("variants",))
            bounds = "; ".join(str(v.when) for v in variants)
            names = [d.variants_label or d.name for d in rendering(loaded.spec.kind)
                     if d.renders_variants or d.variants_label]
            which = " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
            # (a kind none of whose designs renders variants yet says so)
            where = f"by the {which} designs only" if names else f"by no {loaded.spec.kind} design yet"
            report.diagnostics.append(Diagnostic(
                loaded.name, loaded.file, line, col, str(t), "CFG003", "error",
                f"the {t.backend.value} design renders one config per module for {t} ({rel}); size-selected variants are "
                f"rendered {where}, and {t} has {len(variants)} ({bounds})",
                f'give {t} none (`[kernels.per_target."{t}"]` variants = []), or a spec of its own per size'))


def _disagreement(loaded: LoadedSpec, rel: str, shared: tuple[tuple[str, ...], ...], first: object, base: Resolved,
                  t: object, mine: Resolved) -> Diagnostic | None:
    spec = loaded.spec

    def diag(field: tuple[str | int, ...], message: str, hint: str, variant: str = "") -> Diagnostic:
        line, col = loaded.where(field)
        return Diagnostic(loaded.name, loaded.file, line, col, str(t), "CFG001", "error",
                          f"{t} and {first} render into one module ({rel}) with one kernel: {message}", hint, variant)

    if [v.when for v in mine.variants] != [v.when for v in base.variants]:
        own = [x for x in (t, first) if getattr(spec.per_target.get(str(x)), "variants", None) is not None]
        where = ("per_target", str(own[0]), "variants") if own else ("variants",)
        shown = ["; ".join(str(v.when) for v in r.variants) or "none" for r in (mine, base)]
        return diag(where, f"they share the variants' bounds: {shown[0]} on {t}, {shown[1]} on {first}",
                    "give both targets the same variant bounds")
    for ours, theirs in zip((mine, *mine.variants), (base, *base.variants), strict=True):
        for path in shared:
            values = _field_values(ours.spec, theirs.spec, path)
            if values is None or values[0] == values[1]:
                continue
            a, b = values
            field = spec.config_field(t, path, ours.variant)
            if field == path:
                field = spec.config_field(first, path, theirs.variant)
            name = ".".join(path)
            label = "" if ours.variant is None else f"variant {ours.variant} ({ours.when})"
            return diag(field, f"they share {name}: {name} = {a} on {t}, {b} on {first}",
                        f"give both the same {name} (per-target warps and pipeline stages may differ)", label)
    return None


def check_specs(specs: list[LoadedSpec], notes: bool = False, settle: Settle = "model") -> CheckReport:
    """Diagnostics for every spec's targets, with what each (spec, target) resolved to. With `notes`,
    also one note per target a spec does not list: why that target cannot serve it, or that it could
    (a catalogue spec names every target it can serve). `settle` says who decides a modelled verdict near
    its rule's boundary: "compile" the backend's compiler where installed (else as "analytic"),
    "analytic" the model saying it is near and how to settle it, "model" the model alone, as if far."""
    report = check_unsettled(specs, notes, near=settle != "model")
    if report.pending:
        _settle(report, settle == "compile")
    return report


def check_unsettled(specs: list[LoadedSpec], notes: bool = False, near: bool = False,
                    memo: KernelMemo | None = None) -> CheckReport:
    """`check_specs` before its settle step: with `near`, the near-boundary findings' diagnostics hold the
    model's finding as the rule gave it, and `report.pending` says which (`settled` gives their verdicts).
    `memo`: a run's (same `near`) over many specs, where the resolved configs serve output only (their
    specs may carry another kernel's name)."""
    report = CheckReport()
    for ls in specs:
        _check_spec(ls, notes, report, near=near, memo=memo)
    return report


def _settle(report: CheckReport, compiling: bool) -> None:
    verdicts, report.settled = settle_near([(one, f) for *_, one, _, f in report.pending], compiling)
    report.diagnostics = settled(report.diagnostics, report.pending, verdicts)
    report.pending = []


def settled(diags: list[Diagnostic], pending: list[Pending], verdicts: list[Settled]) -> list[Diagnostic]:
    """The diagnostics with each pending one replaced by its verdict (dropped where the compiler accepts the
    config), with its position."""
    out: list[Diagnostic | None] = list(diags)
    for (i, loaded, target, one, label, _), v in zip(pending, verdicts, strict=True):
        out[i] = None if v.finding is None else _diagnostic(loaded, target, one, label, v.finding, v.source)
    return [d for d in out if d is not None]


def check_spec(loaded: LoadedSpec, notes: bool = False, settle: Settle = "model") -> list[Diagnostic]:
    return check_specs([loaded], notes, settle).diagnostics


def check_all(specs: list[LoadedSpec], notes: bool = False, settle: Settle = "model") -> list[Diagnostic]:
    return check_specs(specs, notes, settle).diagnostics


def failing_targets(diags: list[Diagnostic]) -> dict[tuple[str, str], list[Diagnostic]]:
    """(spec, target) -> its errors, for the pairs that cannot be served."""
    out: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in diags:
        if d.severity == "error":
            out.setdefault((d.spec, d.target), []).append(d)
    return out
