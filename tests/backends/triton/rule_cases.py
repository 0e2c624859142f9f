"""Boundary cases of the Triton design's own rules (specgen/kinds/gemm/designs/triton/rules.py): each rule on each
side of its boundary, in tests/test_rules.py's form (rule, target, spec overrides, expected); that file
collects every design's cases from beside its tests (tests/backends/*/rule_cases*.py)."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import F16, FP8, tile

CASES: list[tuple[str, str, dict, object]] = [
    # MMA003: tl.dot minimum K per width, M and N >= 16; M < 64 on sm90 is a warning
    ("MMA003", "triton:sm90", {"tile": tile(64, 16, 16)}, None),
    ("MMA003", "triton:sm90", {"tile": tile(64, 64, 8)},
     ("error", ["tile.k = 8 < 16, tl.dot's minimum K for bf16"], ("tile", "k"))),
    ("MMA003", "triton:sm90", {**FP8, "tile": tile(64, 64, 32)}, None),
    ("MMA003", "triton:sm90", {**FP8, "tile": tile(64, 64, 16)},
     ("error", ["tile.k = 16 < 32, tl.dot's minimum K for fp8_e4m3"], ("tile", "k"))),
    ("MMA003", "triton:sm100", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "tile": tile(64, 64, 8)}, None),
    ("MMA003", "triton:sm100", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "tile": tile(64, 64, 4)},
     ("error", ["tile.k = 4 < 8, tl.dot's minimum K for f32"], ("tile", "k"))),
    ("MMA003", "triton:sm100", {"tile": tile(64, 8, 64)}, ("error", ["tile.n = 8 < 16, tl.dot's minimum"], ("tile", "n"))),
    ("MMA003", "triton:sm100", {"tile": tile(16, 64, 64)}, None),
    ("MMA003", "triton:sm100", {"tile": tile(8, 64, 64)}, ("error", ["tile.m = 8 < 16"], ("tile", "m"))),
    ("MMA003", "triton:sm90", {"tile": tile(32, 64, 64)},
     ("warning", ["tile.m = 32 < 64: Triton will not use wgmma on sm90"], ("tile", "m"))),
    # MMA004: tl.dot's fallbacks from wgmma / tcgen05: mma_v2 (M < 64 on sm100, < 4 warps), FMA (f32 ieee)
    ("MMA004", "triton:sm100", {"tile": tile(64, 64, 64)}, None),
    ("MMA004", "triton:sm100", {"tile": tile(32, 64, 64)},
     ("warning", ["tile.m = 32 < 64: Triton falls back from tcgen05 to mma_v2 on triton:sm100"], ("tile", "m"))),
    ("MMA004", "triton:sm90", {"tile": tile(32, 64, 64)}, None),  # MMA003 says it on sm90
    ("MMA004", "triton:sm90", {"triton": {"num_warps": 4}}, None),
    ("MMA004", "triton:sm90", {"triton": {"num_warps": 2}},
     ("warning", ["triton.num_warps = 2 < 4 (one warpgroup): Triton falls back from wgmma to mma_v2"],
      ("triton", "num_warps"))),
    ("MMA004", "triton:sm90", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "out": {"dtype": "f32"}}, None),
    ("MMA004", "triton:sm100", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"}},
     ("warning", ["A and B are f32 (ieee): tl.dot runs on FMA units on triton:sm100, no tcgen05"], ("a", "dtype"))),
    # POW001: Triton block dims and num_warps are powers of two, m*n <= 1048576
    ("POW001", "triton:sm90", {"tile": tile(1024, 1024, 16), "triton": {"num_warps": 32}}, None),
    ("POW001", "triton:sm90", {"tile": tile(2048, 1024, 16)},
     ("error", ["tile m*n = 2097152 > 1048576 elements"], ("tile",))),
    ("POW001", "triton:sm90", {"tile": tile(96, 128, 64)},
     ("error", ["tile.m = 96 is not a power of two"], ("tile", "m"))),
    ("POW001", "triton:sm90", {"tile": tile(128, 128, 48)}, ("error", ["tile.k = 48 is not a power of two"], ("tile", "k"))),
    ("POW001", "triton:sm100", {"triton": {"num_warps": 1}}, None),
    ("POW001", "triton:sm100", {"triton": {"num_warps": 64}},
     ("error", ["triton.num_warps = 64 is not a power of two in 1..32"], ("triton", "num_warps"))),
    ("POW001", "triton:sm100", {"triton": {"num_warps": 6}},
     ("error", ["triton.num_warps = 6"], ("triton", "num_warps"))),
    ("SPK002", "triton:sm90", {"schedule": {"split_k": 64}}, None),
    ("SPK002", "triton:sm90", {**F16, "accumulator": "f16", "schedule": {"split_k": 2}},
     ("error", ["schedule.split_k = 2 sums f32 partials; the accumulator is f16"], ("schedule", "split_k"))),
    ("SPK003", "triton:sm100", {"schedule": {"split_k": 1}}, None),
    ("SPK003", "triton:sm100", {"schedule": {"split_k": 2}},
     ("warning", ["schedule.split_k = 2 on a config that serves every M", "128x128 tiles", "2 f32 partial tiles"],
      ("schedule", "split_k"))),
]
