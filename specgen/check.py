"""`specgen check`: run every envelope rule over every (spec, target) pair and report with positions.

The context each rule sees carries the resolved pipeline depths and the memory budget from
envelope/budget.py: the same numbers the planner will render.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specgen.envelope.budget import resolve_ab_stages, smem_budget
from specgen.envelope.devices import GPUS, TPUS
from specgen.envelope.rules import RuleContext, run_rules, tmem_columns
from specgen.spec.load import LoadedSpec
from specgen.spec.models import GemmSpec, Target, parse_target
from specgen.spec.targets import ALL_TARGETS, Backend, device_key


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


def resolve_acc_stages(spec: GemmSpec, target: Target) -> int:
    """Accumulator stages live in TMEM on tcgen05 (2 when they fit, so the epilogue overlaps the next
    tile's MMA); register accumulators have one."""
    if spec.pipeline.acc_stages != "auto":
        return spec.pipeline.acc_stages
    if target.backend is Backend.cute and target.arch == "sm100":
        return 2 if tmem_columns(spec) * 2 <= GPUS["sm100"].tmem_columns else 1
    return 1


def rule_context(spec: GemmSpec, target: Target) -> RuleContext:
    stages = resolve_ab_stages(spec, target)
    is_tpu = target.arch.startswith("tpu")
    return RuleContext(
        spec=spec, target=target,
        gpu=None if is_tpu else GPUS[device_key(target.backend, target.arch)],
        tpu=TPUS[target.arch] if is_tpu else None,
        ab_stages=stages, acc_stages=resolve_acc_stages(spec, target),
        budget=smem_budget(spec, target, stages),
    )


def check_spec(loaded: LoadedSpec) -> list[Diagnostic]:
    """Errors and warnings for the spec's targets, then one note per target it does not list: why that
    target cannot serve it, or that it could (a catalogue spec names every target it can serve)."""
    out: list[Diagnostic] = []
    for target in loaded.spec.targets:
        for f in run_rules(rule_context(loaded.spec, target)):
            line, col = loaded.where(f.field)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, str(target), f.rule, f.severity, f.message, f.hint))
    listed = {str(t) for t in loaded.spec.targets}
    line, col = loaded.where(("targets",))
    for name in ALL_TARGETS:
        if name in listed:
            continue
        errors = [f for f in run_rules(rule_context(loaded.spec, parse_target(name))) if f.severity == "error"]
        if errors:
            why = "; ".join(f"{f.rule} {f.message}" for f in errors)
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note", f"cannot serve: {why}", ""))
        else:
            out.append(Diagnostic(loaded.name, loaded.file, line, col, name, "TARGET", "note",
                                  "could serve this spec but is not listed", f'add "{name}" to targets'))
    return out


def check_all(specs: list[LoadedSpec]) -> list[Diagnostic]:
    return [d for ls in specs for d in check_spec(ls)]


def failing_targets(diags: list[Diagnostic]) -> dict[tuple[str, str], list[Diagnostic]]:
    """(spec, target) -> its errors, for the pairs that cannot be served."""
    out: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in diags:
        if d.severity == "error":
            out.setdefault((d.spec, d.target), []).append(d)
    return out
