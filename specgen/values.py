"""Frozen dataclasses that are cheap to make: check makes some hundred thousand small records a second (findings,
diagnostics, budgets, TMA boxes, resolutions).

A frozen dataclass's `__init__` stores each field through `object.__setattr__` (its own `__setattr__` refuses),
about five times the cost of a plain one's: 3 us against 0.6 us for eleven fields, a sixth of check's CPU over
many kernels. `value` is `dataclass(frozen=True)` with an `__init__` that writes the instance's `__dict__`
directly; everything else (refused assignment, eq, hash, repr, `replace`, `fields`) is the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)

_FACTORY = object()  # the default of a field made by its factory: the call happens in `__init__`


@overload
def value(cls: T, /) -> T: ...
@overload
def value(*, kw_only: bool = False) -> Callable[[T], T]: ...


def value(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    """`@dataclass(frozen=True)` (and `kw_only`), with a fast `__init__`."""

    def wrap(c: T) -> T:
        c = dataclasses.dataclass(frozen=True, kw_only=kw_only)(c)
        c.__init__ = _fast_init(c)  # type: ignore[misc]
        return c

    return wrap if cls is None else wrap(cls)


def _fast_init(cls: type) -> Callable[..., None]:
    """The dataclass's `__init__`, its stores made into the instance's dictionary (the class keeps one: no
    `__slots__`; no `InitVar` fields, which none of these records has)."""
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: value classes keep a __dict__ (no slots)")
    names: dict[str, object] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            param, given = f"{f.name}=_default_{f.name}", f.name
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            param, given = f"{f.name}=_FACTORY", f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
        else:
            param, given = f.name, f.name
        if not f.init:  # not a parameter: as the dataclass's, a factory's value is stored, a default is the class's
            if f.default_factory is dataclasses.MISSING:
                continue
            given = f"_factory_{f.name}()"
        else:
            (keyword if f.kw_only else positional).append(param)
        body.append(f"    d[{f.name!r}] = {given}")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__({params}) -> None:\n    d = self.__dict__\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, names)  # noqa: S102 - the source is made above from the class's own field names
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    init.__module__ = cls.__module__  # type: ignore[attr-defined]
    return init  # type: ignore[return-value]
