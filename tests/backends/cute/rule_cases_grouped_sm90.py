"""Boundary cases of the grouped CuTe sm90 design's own rules (kinds/grouped/designs/cute_sm90/rules.py: GRP301,
GRP302), and of the dense design's wgmma rules it shares on fp8 (MAJ001, MMA001), in tests/test_rules.py's form
(rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

G = {"kind": "grouped", "targets": ["cute:sm90"]}  # MINIMAL_SPEC (bf16, 128x128x64) as a grouped cute spec

CASES: list[tuple[str, str, dict, object]] = [
    # GRP301: 16-bit or fp8 operands (e4m3 and e5m2 may mix), an f32 accumulator, 16- or 32-bit outputs
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "mn"},
                             "out": {"dtype": "f32"}}, None),
    ("GRP301", "cute:sm90", {**G, **FP8, "epilogue": [{"op": "scale", "by": "rowcol"}], "tile": tile(128, 128, 128)}, None),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e4m3"}, "tile": tile(64, 128, 32)}, None),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                             "tile": tile(128, 128, 32)},
     ("error", ["A is f32: the grouped cute:sm90 kernel renders bf16, f16 or fp8 (e4m3, e5m2) operands"], ("a", "dtype"))),
    # the dense design's wgmma rules on the grouped tile: an fp8 B K-major only (MAJ001: wgmma's transpose bits take
    # 16-bit operands only), fp8's K a multiple of 32 (MMA001: m64nNk32)
    ("MAJ001", "cute:sm90", {**G, **FP8, "tile": tile(128, 128, 128)}, None),
    ("MAJ001", "cute:sm90", {**G, "a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3", "major": "mn"},
                             "tile": tile(128, 128, 128)},
     ("error", ["B is fp8_e4m3 and MN-major: wgmma transposes only 16-bit operands"], ("b", "major"))),
    ("MMA001", "cute:sm90", {**G, **FP8, "tile": tile(128, 128, 32)}, None),
    ("MMA001", "cute:sm90", {**G, **FP8, "tile": tile(128, 128, 16)},
     ("error", ["tile.k = 16 is not a multiple of 32 (wgmma K for fp8_e4m3)"], ("tile", "k"))),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                             "out": {"dtype": "f16"}, "accumulator": "f16"},
     ("error", ["accumulator = f16: the grouped cute:sm90 kernel accumulates in f32"], ("accumulator",))),
    # ragged K (the weight gradient, since session 26): 16-bit operands in either major render; 32-bit ones are the
    # Triton design's there too
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                             "groups": {"ragged": "k"}}, None),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                             "out": {"dtype": "f32"}, "groups": {"index": "sizes", "ragged": "k"}}, None),
    ("GRP301", "cute:sm90", {**G, "a": {"dtype": "f32", "major": "mn"}, "b": {"dtype": "f32", "major": "mn"},
                             "out": {"dtype": "f32"}, "groups": {"ragged": "k"}, "tile": tile(128, 128, 32)},
     ("error", ["A is f32: the grouped cute:sm90 kernel renders bf16, f16 or fp8", "here the weight gradient "
                "(groups.ragged = 'k')"], ("a", "dtype"))),
    # GRP302: one CTA a tile, cooperative warpgroups, the tile unswapped
    ("GRP302", "cute:sm90", {**G, "tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 2}}, None),
    ("GRP302", "cute:sm90", {**G, "cluster": {"m": 2, "n": 1}},
     ("error", ["cluster = 2x1: the grouped cute:sm90 kernel runs one CTA a tile"], ("cluster",))),
    ("GRP302", "cute:sm90", {**G, "cute": {"schedule": "pingpong"}},
     ("error", ['cute.schedule = "pingpong" is not rendered by the grouped cute:sm90 kernel'], ("cute", "schedule"))),
    ("GRP302", "cute:sm90", {**G, "tile": tile(64, 128, 64), "cute": {"swap_ab": True}},
     ("error", ["cute.swap_ab is not rendered by the grouped cute:sm90 kernel"], ("cute", "swap_ab"))),
    ("GRP302", "cute:sm90", {**G, "cute": {"tma_store": False}},
     ("warning", ["cute.tma_store = false is ignored by the grouped cute:sm90 kernel: every epilogue subtile inside "
                  "its group's rows is stored by TMA"], ("cute", "tma_store"))),
    ("GRP302", "cute:sm90", {**G, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                             "groups": {"ragged": "k"}, "cute": {"tma_store": False}},
     ("warning", ["cute.tma_store = false is ignored by the grouped cute:sm90 kernel's ragged K: out[g] is written "
                  "whole, by TMA"], ("cute", "tma_store"))),
]
