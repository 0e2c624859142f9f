"""Boundary cases of the CuTe sm100 design's own rules (specgen/kinds/gemm/designs/cute_sm100/rules.py): each rule on each
side of its boundary, in tests/test_rules.py's form (rule, target, spec overrides, expected); that file
collects every design's cases from beside its tests (tests/backends/*/rule_cases*.py)."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

CASES: list[tuple[str, str, dict, object]] = [
    # MMA002: tcgen05 shapes, 1-CTA and 2-CTA, 8-bit MN-major B
    ("MMA002", "cute:sm100", {"tile": tile(64, 8, 16)}, None),
    ("MMA002", "cute:sm100", {"tile": tile(128, 256, 64)}, None),
    ("MMA002", "cute:sm100", {"tile": tile(256, 128, 64)},
     ("error", ["MMA M = 256 (tile.m 256) is not one of (64, 128) for cta_group::1"], ("tile", "m"))),
    ("MMA002", "cute:sm100", {"tile": tile(96, 128, 64)}, ("error", ["MMA M = 96"], ("tile", "m"))),
    ("MMA002", "cute:sm100", {"tile": tile(64, 16, 64), "cute": {"two_cta": True}}, None),
    ("MMA002", "cute:sm100", {"tile": tile(128, 256, 64), "cute": {"two_cta": True}}, None),
    ("MMA002", "cute:sm100", {"tile": tile(32, 128, 64), "cute": {"two_cta": True}},
     ("error", ["MMA M = 64 (2 x tile.m 32) is not one of (128, 256) for cta_group::2"], ("tile", "m"))),
    ("MMA002", "cute:sm100", {"tile": tile(128, 264, 64)},
     ("error", ["tile.n = 264 is outside tcgen05 N 8..256 step 8"], ("tile", "n"))),
    ("MMA002", "cute:sm100", {"tile": tile(128, 8, 64), "cute": {"two_cta": True}},
     ("error", ["tile.n = 8 is outside tcgen05 N 16..256 step 16"], ("tile", "n"))),
    ("MMA002", "cute:sm100", {"tile": tile(128, 24, 64), "cute": {"two_cta": True}},
     ("error", ["tile.n = 24 is outside tcgen05 N 16..256 step 16"], ("tile", "n"))),
    ("MMA002", "cute:sm100", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 16, 128)}, None),
    ("MMA002", "cute:sm100", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 24, 128)},
     ("error", ["tile.n = 24 is outside tcgen05 N 16..256 step 16"], ("tile", "n"))),
    ("MMA002", "cute:sm100", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 32, 128),
                              "cute": {"two_cta": True}}, None),
    ("MMA002", "cute:sm100", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(128, 48, 128),
                              "cute": {"two_cta": True}},
     ("error", ["tile.n = 48 is outside tcgen05 N 32..256 step 32"], ("tile", "n"))),
    ("MMA002", "cute:sm100", {**FP8, "tile": tile(128, 24, 128)}, None),  # K-major fp8 B: step 8
    ("MMA002", "cute:sm100", {"tile": tile(128, 128, 24)},
     ("error", ["tile.k = 24 is not a multiple of 16 (tcgen05 K for bf16)"], ("tile", "k"))),
    ("MMA002", "cute:sm100", {**FP8, "tile": tile(128, 128, 48)},
     ("error", ["tile.k = 48 is not a multiple of 32 (tcgen05 K for fp8_e4m3)"], ("tile", "k"))),
    # TMEM001: columns x stages <= 512, allocated as a power of two >= 32
    ("TMEM001", "cute:sm100", {"tile": tile(128, 256, 64), "pipeline": {"acc_stages": 2}}, None),
    ("TMEM001", "cute:sm100", {"tile": tile(128, 256, 64), "pipeline": {"acc_stages": 3}},
     ("error", ["accumulator needs 256 columns x 3 stages = 768 (allocated 1024) > 512 TMEM columns"],
      ("pipeline", "acc_stages"))),
    ("TMEM001", "cute:sm100", {"tile": tile(128, 192, 64), "pipeline": {"acc_stages": 2}}, None),  # 384 -> 512
    ("TMEM001", "cute:sm100", {"tile": tile(128, 192, 64), "pipeline": {"acc_stages": 3}},
     ("error", ["192 columns x 3 stages = 576 (allocated 1024)"], ("pipeline", "acc_stages"))),
    # 2-CTA with MMA M = 128 (tile.m 64): N/2 columns per CTA
    ("TMEM001", "cute:sm100", {"tile": tile(64, 256, 64), "cute": {"two_cta": True}, "cluster": {"m": 2},
                               "pipeline": {"acc_stages": 4}}, None),
    ("TMEM001", "cute:sm100", {"tile": tile(64, 256, 64), "cute": {"two_cta": True}, "cluster": {"m": 2},
                               "pipeline": {"acc_stages": 5}},
     ("error", ["128 columns x 5 stages = 640 (allocated 1024) > 512"], ("pipeline", "acc_stages"))),
    # 2-CTA with MMA M = 256 (tile.m 128): N columns per CTA
    ("TMEM001", "cute:sm100", {"tile": tile(128, 256, 64), "cute": {"two_cta": True}, "cluster": {"m": 2},
                               "pipeline": {"acc_stages": 3}},
     ("error", ["256 columns x 3 stages = 768"], ("pipeline", "acc_stages"))),
    # CLU002: 2-CTA MMA pairs CTAs along M
    ("CLU002", "cute:sm100", {"cute": {"two_cta": True}, "cluster": {"m": 2}}, None),
    ("CLU002", "cute:sm100", {"cute": {"two_cta": True}}, ("error", ["cute.two_cta needs an even cluster.m, got 1"],
                                                           ("cluster", "m"))),
    ("CLU002", "cute:sm100", {"cute": {"two_cta": True}, "cluster": {"m": 3}}, ("error", ["got 3"], ("cluster", "m"))),
    ("CLU002", "cute:sm100", {"cluster": {"m": 1}}, None),
    # CUTE101-CUTE103: the sm100 template's tile widths, launchable clusters and TMA store
    ("CUTE101", "cute:sm100", {"tile": tile(128, 48, 64)}, None),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 8, 64)}, None),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 24, 64)}, ("error", ["each CTA 24 rows of a 16-bit K-major B"], ("tile", "n"))),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 200, 64)}, ("error", ["200 rows"], ("tile", "n"))),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 24, 64), "b": {"dtype": "bf16", "major": "mn"}}, None),
    ("CUTE101", "cute:sm100", {**FP8, "tile": tile(128, 24, 128)}, None),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 32, 64), "cute": {"two_cta": True}, "cluster": {"m": 2}}, None),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 16, 64), "cute": {"two_cta": True}, "cluster": {"m": 2}}, None),
    ("CUTE101", "cute:sm100", {"tile": tile(128, 48, 64), "cute": {"two_cta": True}, "cluster": {"m": 2}},
     ("error", ["tile.n = 48 gives each CTA 24 rows"], ("tile", "n"))),
    ("CUTE102", "cute:sm100", {"cluster": {"m": 2, "n": 4}}, None),
    ("CUTE102", "cute:sm100", {"cluster": {"m": 4, "n": 4}}, ("error", ["= 16 CTAs > 8"], ("cluster",))),
    ("CUTE103", "cute:sm100", {"cute": {"tma_store": True}}, None),
    ("CUTE104", "cute:sm100", {"tile": tile(64, 64, 64), "pipeline": {"acc_stages": 2}}, None),
    ("CUTE104", "cute:sm100", {"tile": tile(128, 64, 64), "pipeline": {"acc_stages": 3}}, None),
    ("CUTE104", "cute:sm100", {"tile": tile(64, 64, 64), "pipeline": {"acc_stages": 3}, "cute": {"two_cta": True},
                               "cluster": {"m": 2}}, None),
    ("CUTE104", "cute:sm100", {"tile": tile(64, 64, 64), "pipeline": {"acc_stages": 3}},
     ("error", ["3 accumulator stages of a 1-CTA 64-row tile"], ("pipeline", "acc_stages"))),
    ("CUTE104", "cute:sm100", {"tile": tile(64, 64, 64), "pipeline": {"acc_stages": 4}}, None),  # even: compiles
    ("CUTE104", "cute:sm100", {"tile": tile(64, 64, 64), "pipeline": {"acc_stages": 5}},
     ("error", ["5 accumulator stages of a 1-CTA 64-row tile", "odd count"], ("pipeline", "acc_stages"))),
    ("CUTE105", "cute:sm100", {"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                               "out": {"dtype": "f16"}, "accumulator": "f16"}, None),
    ("CUTE105", "cute:sm100", {"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                               "out": {"dtype": "f32"}, "accumulator": "f16"},
     ("error", ["an f16 accumulator with a f32 output"], ("accumulator",))),
    ("CUTE106", "cute:sm100", {**FP8, "out": {"dtype": "fp8_e4m3"}, "tile": tile(64, 64, 128), "cute": {"two_cta": True},
                               "cluster": {"m": 2}}, None),
    ("CUTE106", "cute:sm100", {"out": {"dtype": "bf16"}, "tile": tile(64, 48, 64), "cute": {"two_cta": True},
                               "cluster": {"m": 2}}, None),
    ("CUTE106", "cute:sm100", {**FP8, "out": {"dtype": "fp8_e4m3"}, "tile": tile(64, 48, 128), "cute": {"two_cta": True},
                               "cluster": {"m": 2}}, ("error", ["64x48 epilogue subtile", "24 bytes"], ("tile", "n"))),
    ("CUTE103", "cute:sm100", {"cute": {"tma_store": False}}, ("warning", ["ignored on cute:sm100"], ("cute", "tma_store"))),
]
