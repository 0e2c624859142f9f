"""Problem shapes for bench and tune, whatever the kind: `--shapes` parsing, which config the launcher
picks for a shape (the variant slot) and the default shapes of a spec on a target, each asked of the spec's
kind (its problem module: specgen/bench/problem.py)."""

from __future__ import annotations

from collections.abc import Sequence

from specgen.bench.problem import ProblemShape, ShapeError, problem_for, problem_of
from specgen.spec.models import LayeredSpec

__all__ = ["ProblemShape", "ShapeError", "default_shapes", "parse_shapes", "slot_for", "slot_label"]


def parse_shapes(text: str, kind: str) -> list[ProblemShape]:
    """`--shapes` text as `kind`'s shapes; ShapeError says what is wrong."""
    return problem_for(kind).parse_shapes(text)


def slot_for(spec: LayeredSpec, target: object, shape: Sequence[int]) -> int | None:
    """The variant the launcher picks for `shape` on `target`, or None for the target's default config."""
    return problem_of(spec).slot_for(spec, target, shape)


def slot_label(spec: LayeredSpec, target: object, slot: int | None) -> str:
    return "default" if slot is None else f"variant {slot} ({spec.variants_on(target)[slot].when})"


def default_shapes(spec: LayeredSpec, target: object) -> list[ProblemShape]:
    """The shapes bench and tune time on `target` when none are given (the kind says which)."""
    return problem_of(spec).default_shapes(spec, target)
