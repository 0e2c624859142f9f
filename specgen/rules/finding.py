"""What a rule reports: a leaf module (imports nothing of specgen), so that the resolved types, the rules'
machinery and the designs can all name it without importing one another.

A rule that models a compiler's limit (registers, spills, SMEM where the plan is not exact, lowering
limits) states how far its model may be wrong (`Margin`, measured against the compiler) and marks a
verdict within that margin `Near`: `specgen check` settles it with the backend's compiler where one is
installed (specgen/settle.py), and says so where none is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from specgen.values import value

Severity = Literal["error", "warning"]

# what a compile probe reports (specgen/probe.py): "error", "registers", "spill_bytes", "smem", ...
ProbeResult = Mapping[str, object]


@dataclass(frozen=True)
class Margin:
    """How far a modelled figure may sit from its limit on either side and the compiler still disagree:
    `below` under the limit (the model accepts, the compiler may refuse), `above` over it (the model
    refuses, the compiler may accept), in `unit`, from the rule's own measured error."""

    below: int
    above: int
    unit: str

    def near(self, value: int, limit: int) -> bool:
        return limit - self.below <= value <= limit + self.above

    def __str__(self) -> str:
        return f"within {self.below} {self.unit} under to {self.above} over the limit, the model's measured error"


@value
class Near:
    """A modelled verdict within its rule's margin of the boundary, or one the installed compiler's version
    decides (`margin` a sentence then). The finding it rides on is what the
    rule reports where the config is refused (its severity, hint and field); `accepted` is the model's
    side. `decide` reads the compiler's probe of the config: why the compiler refuses it (a message), ""
    where it accepts it, None where the probe does not say (the model's verdict stands)."""

    margin: Margin | str  # a measured margin, or why the verdict is the compiler's (one that moves with its version)
    accepted: bool
    decide: Callable[[ProbeResult], str | None]


@value
class Finding:
    rule: str
    severity: Severity
    message: str
    hint: str = ""
    field: tuple[str | int, ...] = ()
    near: Near | None = None  # set where a modelled verdict is within its rule's margin (either side)
