"""specgen/spec/memo.py: a derived figure is made once per spec object, never handed to another object."""

from __future__ import annotations

from specgen.spec import memo
from specgen.spec.memo import per_spec


class Spec:
    def __init__(self, n: int) -> None:
        self.n = n


def test_once_per_object_and_never_across_objects(monkeypatch) -> None:
    calls: list[int] = []

    @per_spec
    def doubled(spec: Spec) -> int:
        calls.append(spec.n)
        return 2 * spec.n

    a, b = Spec(1), Spec(2)
    assert (doubled(a), doubled(a), doubled(b), doubled(a)) == (2, 2, 4, 2)
    assert calls == [1, 2]
    monkeypatch.setattr(memo, "HELD", 2)
    assert doubled(Spec(3)) == 6 and doubled(Spec(4)) == 8  # past HELD: starts over
    assert doubled(a) == 2 and calls[-1] == 1
    doubled.cache_clear()
    doubled(b)
    assert calls[-1] == 2
