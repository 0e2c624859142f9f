"""Boundary cases of the grouped CuTe sm100 design's own rules (kinds/grouped/designs/cute_sm100/rules.py: GRP401,
GRP402) in tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

G = {"kind": "grouped", "targets": ["cute:sm100"]}  # MINIMAL_SPEC (bf16, 128x128x64) as a grouped cute spec

CASES: list[tuple[str, str, dict, object]] = [
    # GRP401: ragged M, 16-bit or fp8 operands (the formats may mix), an f32 accumulator, 16- or 32-bit outputs
    ("GRP401", "cute:sm100", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "mn"},
                              "out": {"dtype": "f32"}}, None),
    ("GRP401", "cute:sm100", {**G, **FP8, "epilogue": [{"op": "scale", "by": "rowcol"}], "tile": tile(128, 128, 128)},
     None),
    ("GRP401", "cute:sm100", {**G, "a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "mn"},
                              "out": {"dtype": "f16"}, "tile": tile(128, 128, 128)}, None),
    ("GRP401", "cute:sm100", {**G, "a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"},
                              "out": {"dtype": "f32"}, "tile": tile(128, 128, 32)},
     ("error", ["A is f32: the grouped cute:sm100 kernel renders bf16, f16 or fp8 (e4m3, e5m2) operands"],
      ("a", "dtype"))),
    ("GRP401", "cute:sm100", {**G, **FP8, "out": {"dtype": "fp8_e4m3"}, "tile": tile(128, 128, 128)},
     ("error", ["out is fp8_e4m3: the grouped cute:sm100 kernel stores bf16, f16 or f32"], ("out", "dtype"))),
    ("GRP401", "cute:sm100", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                              "out": {"dtype": "f16"}, "accumulator": "f16"},
     ("error", ["accumulator = f16: the grouped cute:sm100 kernel accumulates in f32"], ("accumulator",))),
    ("GRP401", "cute:sm100", {**G, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                              "groups": {"ragged": "k"}},
     ("error", ["groups.ragged = 'k' (the weight gradient) is not rendered on cute:sm100"], ("groups", "ragged"))),
    # GRP402: one CTA a tile (1-CTA MMA, no cluster); TMA stores do not apply
    ("GRP402", "cute:sm100", {**G, "tile": tile(64, 256, 64)}, None),
    ("GRP402", "cute:sm100", {**G, "cluster": {"m": 2, "n": 1}, "cute": {"two_cta": True}},
     ("error", ["cute.two_cta = true: the grouped cute:sm100 kernel runs a 1-CTA tcgen05 MMA (tile.m = 128"],
      ("cute", "two_cta"))),
    ("GRP402", "cute:sm100", {**G, "cluster": {"m": 1, "n": 2}},
     ("error", ["cluster = 1x2: the grouped cute:sm100 kernel runs one CTA a tile"], ("cluster",))),
    ("GRP402", "cute:sm100", {**G, "cute": {"tma_store": False}},
     ("note", ["always stores through predicated vector stores"], ("cute", "tma_store"))),
]
