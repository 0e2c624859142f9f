"""A memo of what a design derives from one effective spec (its epilogue subtile, its SMEM layout, its
runtime arguments), by the spec object's identity.

check resolves every target and variant of every kernel and asks each derived figure of one effective spec
several times (resolve's budget at two or three depths, the TMA boxes, the rules), and the specs are frozen
models: the answer for one object never changes. A memo holds the object beside the answer, so an identity
is never reused under it, and starts over past `HELD` entries. A memoized function returns an immutable value
(a tuple, a frozen dataclass) that callers share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

HELD = 4096  # entries a memo keeps before it starts over: a run's working set is one kernel's configs

T = TypeVar("T")
R = TypeVar("R")


def per_spec(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn(spec)`, figured once per spec object."""
    held: dict[int, tuple[T, R]] = {}

    @functools.wraps(fn)
    def memo(spec: T) -> R:
        hit = held.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        value = fn(spec)
        if len(held) >= HELD:
            held.clear()
        held[id(spec)] = (spec, value)
        return value

    memo.cache_clear = held.clear  # type: ignore[attr-defined]
    return memo
