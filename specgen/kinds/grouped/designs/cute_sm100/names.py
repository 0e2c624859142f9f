"""The identifiers the grouped CuTe sm100 design's modules use beyond the dense CuTe designs', the grouped Triton
design's and the grouped CuTe sm90 design's (templates/grouped/cute/grouped_sm100.py.jinja): checked by
tests/test_hardening_names.py's rendered-module tokenizer."""

from __future__ import annotations

MODULE_NAMES: frozenset[str] = frozenset()

# Every other identifier its code uses beyond theirs (an epilogue argument's names must avoid them).
RESERVED: frozenset[str] = frozenset({"subs_m"})  # subtiles of the tile along M (flat_divide's order)

ARG_DERIVED: tuple[str, ...] = ()
