"""What a rule reports: a leaf module (imports nothing of specgen), so that the resolved types, the rules'
machinery and the designs can all name it without importing one another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str
    hint: str = ""
    field: tuple[str | int, ...] = ()
