"""Special values through the epilogue (the formula table's rows, specgen/spec/formulas.py): a bias
carrying NaN, +-inf and huge values, the chains that show each op's handling of them, and the check
that a kernel's result has the float64 reference's classes."""

from __future__ import annotations

import math

import torch

# Bias values: the specials, and two ordinary ones so every op's finite path shows too.
BIAS_SPECIALS = [math.nan, math.inf, -math.inf, 1e30, -1e30, 3e38, -3e38, 0.25, -0.75]

CHAINS = [
    [{"op": "activation", "fn": "relu"}],
    [{"op": "clamp", "min": -0.5, "max": 0.5}],
    [{"op": "clamp", "min": -0.5}],
    [{"op": "clamp", "max": 0.5}],
    [{"op": "activation", "fn": "gelu"}],
    [{"op": "activation", "fn": "gelu_tanh"}],
    [{"op": "activation", "fn": "silu"}],
    [{"op": "activation", "fn": "sigmoid"}],
]


def chain_id(chain: list[dict]) -> str:
    return "_".join(op.get("fn") or f"clamp{op.get('min', '')}_{op.get('max', '')}" for op in chain)


def full(chain: list[dict]) -> list[dict]:
    """The chain with a clamp's missing bound spelled out, as the reference reads it."""
    return [{"min": None, "max": None, **op} if op["op"] == "clamp" else op for op in chain]


def assert_same_classes(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor, rtol: float, atol: float, what: str) -> None:
    """Same NaN-ness, the same infinities, the same sign where torch gives zero, values to tolerance
    (atol scaled by |x|: silu's tanh form is x times a sigmoid good to an absolute error)."""
    got, want, x = got.double().flatten(), want.double().flatten(), x.double().flatten()
    for i in torch.nonzero(want.isnan() != got.isnan()).flatten().tolist():
        raise AssertionError(f"{what}({x[i].item()!r}) = {got[i].item()!r}, torch {want[i].item()!r}")
    inf = want.isinf() | got.isinf()
    assert torch.equal(got[inf], want[inf]), f"{what}: {x[inf][:5].tolist()} -> {got[inf][:5].tolist()}, torch {want[inf][:5].tolist()}"
    zero = want == 0
    assert torch.equal(got[zero].signbit(), want[zero].signbit()), f"{what}: zero signs differ at {x[zero][:5].tolist()}"
    fin = want.isfinite() & got.isfinite()
    err = (got[fin] - want[fin]).abs()
    bound = rtol * want[fin].abs() + atol * x[fin].abs().clamp(min=1.0)
    bad = err > bound
    assert not bad.any(), f"{what}: {x[fin][bad][:5].tolist()} -> {got[fin][bad][:5].tolist()}, torch {want[fin][bad][:5].tolist()}"
