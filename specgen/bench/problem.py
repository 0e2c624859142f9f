"""A kind's problem, as `specgen bench` and `specgen tune` see it: each kind's `problem` part
(`specgen/kinds/<kind>/problem.py`, found through the kinds' line-up, `kinds/lineup.py`'s `kind_part`)
says what a problem of that kind is. bench/ and tune/ call it and name no kind.

A problem module holds, at module level:

    Shape                               its shape type: a tuple of ints (a NamedTuple) whose str() is how
                                        bench and tune print it and whose tuple() is how caches key it
    shape(values)                       a Shape from its tuple() (a cache entry, a Ray job)
    parse_shapes(text)                  `--shapes` text -> [Shape]; ShapeError says what is wrong
    default_shapes(spec, target)        the shapes bench and tune time when none are given
    slot_for(spec, target, shape)       the size variant the launcher picks for the shape, None: the default
    runs_at(spec, shape)                whether the spec takes a problem of that shape at all
    flops(shape, spec), bytes_moved(spec, shape), operand_bits(spec)
                                        the work (the spec's where it changes it: a gated epilogue's
                                        2N columns), the bytes read and written once, the width of the peak
    record_shape(shape)                 (sizes, batch) as a bench record's row holds them
    config_label(spec)                  one config as `check` prints it
    inputs(spec, shape, seed)           the launcher's arguments on the GPU (torch, imported when called)
    peer_name(spec, target), peer_call(spec, target, args)
                                        the program a user would run instead, and its call on `args`

Nothing here imports torch: the problem modules import it inside the functions that need a GPU."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from specgen.kinds.lineup import kind_part

# What the core holds of a shape: a kind's Shape is a tuple of ints (str() prints it, tuple() keys it)
ProblemShape = tuple[int, ...]


class ShapeError(ValueError):
    """`--shapes` text that is no list of the kind's shapes."""


def problem_for(kind: str) -> ModuleType:
    """The kind's problem module (ValueError for a kind without one)."""
    found = kind_part(kind, "problem")
    if found is None:
        raise ValueError(f"kind {kind!r} has no problem module (specgen/kinds/{kind}/problem.py): bench and tune "
                         "cannot time it")
    return found


def problem_of(spec: Any) -> ModuleType:
    """The problem module of a spec's kind."""
    return problem_for(spec.kind)


def shape_text(shape: tuple) -> str:
    """A shape as bench and tune print it: a kind's Shape prints itself, a bare tuple (a job built by hand)
    as its sizes joined by x."""
    return "x".join(map(str, shape)) if type(shape) is tuple else str(shape)
