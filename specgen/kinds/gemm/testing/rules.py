"""Spec fragments the rule tests write their cases with (tests/test_rules.py and each
design's tests/backends/*/rule_cases*.py)."""

from __future__ import annotations

F16 = {"a": {"dtype": "f16"}, "b": {"dtype": "f16"}, "out": {"dtype": "f16"}}
FP8 = {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3"}}


def tile(m: int, n: int, k: int) -> dict:
    return {"m": m, "n": n, "k": k}
