"""Boundary cases of the grouped kind's rules (specgen/kinds/grouped/rules.py: GRP001-GRP003, and the GEMM's
rules it shares, on a grouped spec) and of its Triton design's own (designs/triton/rules.py: GRP101, GRP102, GRP103), in
tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec: bf16, 128x128x64, triton:sm90

CASES: list[tuple[str, str, dict, object]] = [
    # GRP001: the ragged rows may not be A's contiguous dim (group starts on 16-byte boundaries: device-only)
    ("GRP001", "triton:sm90", {**G}, None),
    ("GRP001", "triton:sm90", {**G, "a": {"dtype": "bf16", "major": "mn"}},
     ("error", ["A is M-major", "a multiple of 8 bf16 rows"], ("a", "major"))),
    ("GRP001", "triton:sm100", {**G, "a": {"dtype": "f32", "major": "mn"}, "b": {"dtype": "f32"}},
     ("error", ["a multiple of 4 f32 rows"], ("a", "major"))),
    ("GRP001", "triton:sm90", {**G, "a": {"dtype": "bf16", "major": "mn"}, "groups": {"ragged": "k"}}, None),  # groups along K
    # GRP103: the ragged-K kernel loads by TMA (masked pointers, with tma = false, a note) and computes its tiles
    # unswapped
    ("GRP103", "triton:sm90", {**G, "groups": {"ragged": "k"}, "triton": {"tma": True}}, None),
    ("GRP103", "triton:sm90", {**G, "triton": {"swap_ab": True}}, None),  # ragged M: swapped decode tiles render
    ("GRP103", "triton:sm90", {**G, "triton": {"tma": False}}, None),  # ragged M: masked pointers, no note
    ("GRP103", "triton:sm90", {**G, "groups": {"ragged": "k"}, "triton": {"tma": False}},
     ("note", ["triton.tma = false with groups.ragged = 'k'", "masked pointers at every K step"], ("triton", "tma"))),
    ("GRP103", "triton:sm100", {**G, "groups": {"ragged": "k"}, "triton": {"tma": True, "swap_ab": True}},
     ("error", ["triton.swap_ab with groups.ragged = 'k'"], ("triton", "swap_ab"))),
    # GRP002: always persistent (a warning where the spec says otherwise); no split-K
    ("GRP002", "triton:sm90", {**G, "schedule": {"persistent": True, "raster": "along_n"}}, None),
    ("GRP002", "triton:sm90", {**G, "schedule": {"persistent": False}},
     ("warning", ["schedule.persistent = false is ignored"], ("schedule", "persistent"))),
    ("GRP002", "triton:sm100", {**G, "schedule": {"persistent": True, "split_k": 2}},
     ("error", ["schedule.split_k = 2: no grouped design renders split-K"], ("schedule", "split_k"))),
    # GRP003: 16- and 32-bit float operands, and fp8 (torch._scaled_grouped_mm's); no integer ones
    ("GRP003", "triton:sm90", {**G, "a": {"dtype": "f16"}, "b": {"dtype": "f16"}, "out": {"dtype": "f32"}}, None),
    ("GRP003", "triton:sm90", {**G, "a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "out": {"dtype": "f32"}}, None),
    ("GRP003", "triton:sm90", {**G, **FP8, "tile": tile(128, 128, 128), "epilogue": [{"op": "scale", "by": "rowcol"}]},
     None),
    ("GRP003", "triton:sm100", {**G, "a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e4m3"}, "tile": tile(128, 128, 128)},
     None),
    ("GRP003", "triton:sm90", {**G, "a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                               "out": {"dtype": "int32"}, "tile": tile(128, 128, 128)},
     ("error", ["A is int8: grouped GEMMs take f16, bf16, f32, tf32, fp8_e4m3, fp8_e5m2 operands"], ("a", "dtype"))),
    ("GRP003", "triton:sm100", {**G, "a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                                "out": {"dtype": "int32"}},
     ("error", ["B is int8"], ("b", "dtype"))),
    # GRP102: an 8-bit B is K-major on sm90 (wgmma; Triton would transpose it in registers, unpipelined)
    ("GRP102", "triton:sm90", {**G, **FP8, "tile": tile(128, 128, 128)}, None),
    ("GRP102", "triton:sm90", {**G, "b": {"dtype": "bf16", "major": "mn"}}, None),  # 16-bit: wgmma transposes it
    ("GRP102", "triton:sm90", {**G, **FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 128, 128)},
     ("error", ["B is fp8_e4m3 and N-major", "each 128x128 B tile in registers"], ("b", "major"))),
    ("GRP102", "triton:sm100", {**G, **FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 128, 128)},
     None),  # tcgen05 reads it N-major
    # GRP101: tl.dot's minimum shapes in the grouped kernel; fewer than 64 rows is a warning on sm90
    ("GRP101", "triton:sm90", {**G, "tile": tile(64, 16, 16)}, None),
    ("GRP101", "triton:sm90", {**G, "tile": tile(64, 64, 8)},
     ("error", ["tile.k = 8 < 16, tl.dot's minimum K for bf16"], ("tile", "k"))),
    ("GRP101", "triton:sm100", {**G, "a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "tile": tile(64, 64, 8)}, None),
    ("GRP101", "triton:sm100", {**G, "tile": tile(8, 64, 64)}, ("error", ["tile.m = 8 < 16"], ("tile", "m"))),
    ("GRP101", "triton:sm100", {**G, "tile": tile(32, 64, 64)}, None),  # sm100: no wgmma to miss
    ("GRP101", "triton:sm90", {**G, "tile": tile(32, 64, 64)},
     ("warning", ["tile.m = 32 < 64: Triton will not use wgmma on sm90"], ("tile", "m"))),
    # the GEMM's rules the grouped kind shares, on a grouped spec
    ("DT001", "triton:sm90", {**G, "b": {"dtype": "f16"}}, ("error", ["A is bf16 but B is f16"], ("b", "dtype"))),
    ("SMEM001", "triton:sm90", {**G, "tile": tile(256, 128, 64), "pipeline": {"ab_stages": 4}}, None),  # 196608 B
    ("SMEM001", "triton:sm90", {**G, "tile": tile(256, 256, 64), "pipeline": {"ab_stages": 4}},
     ("error", ["needs 262144 B of SMEM > 232448 B", "A/B 4 x 65536"], ("pipeline", "ab_stages"))),
    ("POW001", "triton:sm100", {**G, "tile": tile(96, 128, 64)}, ("error", ["tile.m = 96 is not a power of two"],
                                                                     ("tile", "m"))),
]
