"""`specgen.values.value`: a frozen dataclass with a fast `__init__` behaves as `dataclass(frozen=True)` does."""

from __future__ import annotations

import dataclasses

import pytest

from specgen.envelope.budget import MemoryBudget
from specgen.values import value


def _pair(kw_only: bool = False) -> tuple[type, type]:
    def body() -> dict:
        return {"__annotations__": {"a": "int", "b": "str", "c": "list", "d": "int", "e": "int"},
                "b": "x", "c": dataclasses.field(default_factory=lambda: [1]), "d": dataclasses.field(default=4, init=False),
                "e": dataclasses.field(default=5, kw_only=True)}
    fast = value(kw_only=kw_only)(type("Fast", (), body()))
    plain = dataclasses.dataclass(frozen=True, kw_only=kw_only)(type("Plain", (), body()))
    return fast, plain


@pytest.mark.parametrize("kw_only", [False, True])
def test_same_fields_defaults_and_signature_as_a_frozen_dataclass(kw_only: bool) -> None:
    fast, plain = _pair(kw_only)
    for args, kwargs in [((), {"a": 1}), ((), {"a": 1, "b": "y", "c": [2], "e": 9})] + ([] if kw_only else [((1, "z"), {})]):
        f, p = fast(*args, **kwargs), plain(*args, **kwargs)
        assert vars(f) == vars(p)
    with pytest.raises(TypeError):
        fast(1, "b", [], 2, 3)  # d is not a parameter, e is keyword-only
    with pytest.raises(TypeError):
        fast()  # a is required
    one, two = fast(a=1), fast(a=1)
    assert one.c is not two.c  # a factory's value per instance


def test_frozen_hashable_and_replaceable() -> None:
    fast, _ = _pair()
    f = fast(a=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del f.a
    g = dataclasses.replace(f, b="q")
    assert (g.a, g.b, g.d) == (1, "q", 4) and g != f and fast(a=1, c=(1,)) == fast(a=1, c=(1,))
    assert hash(fast(a=1, c=(1,))) == hash(fast(a=1, c=(1,)))
    assert repr(f).startswith("Fast(a=1, b='x'")


def test_post_init_runs_and_slots_are_refused() -> None:
    seen = []

    @value
    class Checked:
        n: int

        def __post_init__(self) -> None:
            seen.append(self.n)

    Checked(3)
    assert seen == [3]
    with pytest.raises(TypeError, match="no slots"):
        value(type("Slotted", (), {"__slots__": ("n",), "__annotations__": {"n": "int"}}))


def test_a_record_check_makes_is_one() -> None:
    b = MemoryBudget("SMEM", 1000, 8, 100, 3, 50, epilogue_overlaps_ab=False)
    assert b.total == 300 + 50 + 8 and b.fits and b.extra_label == "accumulator+vectors"
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.capacity = 0  # type: ignore[misc]
