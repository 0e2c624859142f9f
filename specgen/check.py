"""`specgen check`: run every envelope rule over every (spec, target) pair and report with positions.

Each pair is resolved once (resolve.py: stages, memory budget, registers, TMA boxes); the rules read
that, and `check_specs` hands the same `Resolved` objects on to render, whose designs plan from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specgen.envelope.rules import run_rules
from specgen.resolve import Resolved, resolve
from specgen.spec.load import LoadedSpec
from specgen.spec.models import parse_target
from specgen.targets import ALL_TARGETS


@dataclass(frozen=True)
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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}:{self.column}: {self.severity} {self.rule} [{self.spec} @ {self.target}] {self.message}"
        return f"{text}\n    hint: {self.hint}" if self.hint else text


@dataclass
class CheckReport:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    resolved: dict[tuple[str, str], Resolved] = field(default_factory=dict)  # (spec, target) -> its resolution


def _check_spec(loaded: LoadedSpec, notes: bool, report: CheckReport) -> None:
    out = report.diagnostics
    for target in loaded.spec.targets:
        r = resolve(loaded.spec, target)
        report.resolved[(loaded.name, str(target))] = r
        for f in run_rules(r):
            line, col = loaded.where(f.field)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, str(target), f.rule, f.severity, f.message, f.hint))
    if not notes:
        return
    listed = {str(t) for t in loaded.spec.targets}
    line, col = loaded.where(("targets",))
    for name in ALL_TARGETS:
        if name in listed:
            continue
        errors = [f for f in run_rules(resolve(loaded.spec, parse_target(name))) if f.severity == "error"]
        if errors:
            why = "; ".join(f"{f.rule} {f.message}" for f in errors)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note", f"cannot serve: {why}", ""))
        else:
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note",
                                  "could serve this spec but is not listed", f'add "{name}" to targets'))


def check_specs(specs: list[LoadedSpec], notes: bool = False) -> CheckReport:
    """Diagnostics for every spec's targets, with what each (spec, target) resolved to. With `notes`,
    also one note per target a spec does not list: why that target cannot serve it, or that it could
    (a catalogue spec names every target it can serve)."""
    report = CheckReport()
    for ls in specs:
        _check_spec(ls, notes, report)
    return report


def check_spec(loaded: LoadedSpec, notes: bool = False) -> list[Diagnostic]:
    return check_specs([loaded], notes).diagnostics


def check_all(specs: list[LoadedSpec], notes: bool = False) -> list[Diagnostic]:
    return check_specs(specs, notes).diagnostics


def failing_targets(diags: list[Diagnostic]) -> dict[tuple[str, str], list[Diagnostic]]:
    """(spec, target) -> its errors, for the pairs that cannot be served."""
    out: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in diags:
        if d.severity == "error":
            out.setdefault((d.spec, d.target), []).append(d)
    return out
