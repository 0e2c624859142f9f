"""specgen/memo.py: a figure is made once per object (and key), never handed to another object."""

from __future__ import annotations

from specgen import memo
from specgen.memo import IdentityMemo, per_spec


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


def test_identity_memo_keys_by_object_and_key() -> None:
    memo: IdentityMemo[str] = IdentityMemo()
    a, b = Spec(1), Spec(1)  # equal objects, two identities
    assert memo.put(a, "a at 2", 2) == "a at 2"
    assert memo.get(a, 2) == "a at 2" and memo.get(a, 3) is None and memo.get(b, 2) is None and memo.get(a) is None
    memo.clear()
    assert memo.get(a, 2) is None
