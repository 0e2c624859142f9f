"""Boundary cases of the grouped CuTe sm90 design's own rules (kinds/grouped/designs/cute_sm90/rules.py: GRP301,
GRP302) in tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

G = {"kind": "grouped", "targets": ["cute:sm90"]}  # MINIMAL_SPEC (bf16, 128x128x64) as a grouped cute spec

CASES: list[tuple[str, str, dict, object]] = [
    # GRP301: ragged M, 16-bit operands, an f32 accumulator, 16- or 32-bit outputs
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "mn"},
                             "out": {"dtype": "f32"}}, None),
    ("GRP301", "cute:sm90", {**G, **FP8, "epilogue": [{"op": "scale", "by": "rowcol"}], "tile": tile(128, 128, 128)},
     ("error", ["A is fp8_e4m3: the grouped cute:sm90 kernel renders bf16 and f16 operands"], ("a", "dtype"))),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                             "out": {"dtype": "f16"}, "accumulator": "f16"},
     ("error", ["accumulator = f16: the grouped cute:sm90 kernel accumulates in f32"], ("accumulator",))),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                             "groups": {"ragged": "k"}},
     ("error", ["groups.ragged = 'k' (the weight gradient) is not rendered on cute:sm90"], ("groups", "ragged"))),
    # GRP302: one CTA a tile, cooperative warpgroups, the tile unswapped
    ("GRP302", "cute:sm90", {**G, "tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 2}}, None),
    ("GRP302", "cute:sm90", {**G, "cluster": {"m": 2, "n": 1}},
     ("error", ["cluster = 2x1: the grouped cute:sm90 kernel runs one CTA a tile"], ("cluster",))),
    ("GRP302", "cute:sm90", {**G, "cute": {"schedule": "pingpong"}},
     ("error", ['cute.schedule = "pingpong" is not rendered by the grouped cute:sm90 kernel'], ("cute", "schedule"))),
    ("GRP302", "cute:sm90", {**G, "tile": tile(64, 128, 64), "cute": {"swap_ab": True}},
     ("error", ["cute.swap_ab is not rendered by the grouped cute:sm90 kernel"], ("cute", "swap_ab"))),
    ("GRP302", "cute:sm90", {**G, "cute": {"tma_store": False}},
     ("note", ["always stores through predicated vector stores"], ("cute", "tma_store"))),
]
