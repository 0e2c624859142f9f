"""Memos by an object's identity: what check figures of one frozen object (an effective spec, a target) and asks
again, figured once.

check resolves every target and variant of every kernel and asks each derived figure of one effective spec
several times (resolve's budget at two or three depths, the TMA boxes, the rules, the variant lines), and the
objects are frozen: the answer for one object never changes. A memo holds the object beside the answer, so an
identity is never reused under it, and starts over past `HELD` entries. Values are immutable (tuples, frozen
dataclasses, strings) that callers share, and never None.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

HELD = 4096  # entries a memo keeps before it starts over: a run's working set is one kernel's configs

T = TypeVar("T")
R = TypeVar("R")


class IdentityMemo(Generic[R]):
    """Values by an object's identity and a key beside it (say a target and a depth)."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, Hashable], tuple[object, R]] = {}

    def get(self, obj: object, key: Hashable = None) -> R | None:
        hit = self._held.get((id(obj), key))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: object, value: R, key: Hashable = None) -> R:
        if len(self._held) >= HELD:
            self._held.clear()
        self._held[(id(obj), key)] = (obj, value)
        return value

    def clear(self) -> None:
        self._held.clear()


def per_spec(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn(spec)`, figured once per spec object."""
    memo: IdentityMemo[R] = IdentityMemo()

    @functools.wraps(fn)
    def once(spec: T) -> R:
        found = memo.get(spec)
        return found if found is not None else memo.put(spec, fn(spec))

    once.cache_clear = memo.clear  # type: ignore[attr-defined]
    return once
