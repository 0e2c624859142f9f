"""Boundary cases of the Pallas design (TPU and Mosaic GPU)'s own rules (specgen/kinds/gemm/designs/pallas/rules.py): each rule on each
side of its boundary, in tests/test_rules.py's form (rule, target, spec overrides, expected); that file
collects every design's cases from beside its tests (tests/backends/*/rule_cases*.py)."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import F16, FP8, tile

CASES: list[tuple[str, str, dict, object]] = [
    # DT003: TPU MXU dtypes per chip
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e5m2"}}, None),
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e5m2"}},
     ("error", ["A is fp8_e4m3: tpu_v5e MXU takes fp8 as fp8_e5m2 only"], ("a", "dtype"))),
    ("DT003", "pallas:tpu_v7x", FP8, None),
    ("DT003", "pallas:tpu_v6e", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}}, None),
    ("DT003", "pallas:tpu_v6e", F16, ("error", ["A is f16: the TPU MXU has no f16 mode"], ("a", "dtype"))),
    ("DT003", "pallas:tpu_v7x", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}},
     ("error", ["A is tf32: the TPU MXU has no tf32 mode"], ("a", "dtype"))),
    # VMEM001: 4 x 8 MiB of A/B + 2 x 8 MiB of out + a 16 MiB f32 accumulator = 64 MiB, v5p's VMEM
    ("VMEM001", "pallas:tpu_v5p", {"tile": tile(2048, 2048, 1024), "pipeline": {"ab_stages": 4}}, None),
    ("VMEM001", "pallas:tpu_v5p", {"tile": tile(2048, 2048, 1024), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 75497472 B of VMEM > 67108864 B on tpu_v5p",
                "A/B 5 x 8388608 = 41943040 + epilogue 16777216 + accumulator+vectors 16777216"], ("tile",))),
    ("VMEM001", "pallas:tpu_v5e", {"tile": tile(2048, 2048, 1024), "pipeline": {"ab_stages": 5}}, None),
    ("VMEM001", "pallas:tpu_v5e", {"tile": tile(512, 512, 512), "pallas": {"vmem_limit_bytes": 4194304}}, None),
    ("VMEM001", "pallas:tpu_v5e", {"tile": tile(512, 512, 512), "pallas": {"vmem_limit_bytes": 4194303}},
     ("error", ["pallas.vmem_limit_bytes = 4194303 < 4194304 B the plan needs"], ("pallas", "vmem_limit_bytes"))),
    ("VMEM001", "pallas:tpu_v7x", {"tile": tile(512, 512, 512), "pallas": {"vmem_limit_bytes": 67108864}}, None),
    ("VMEM001", "pallas:tpu_v7x", {"tile": tile(512, 512, 512), "pallas": {"vmem_limit_bytes": 67108865}},
     ("error", ["pallas.vmem_limit_bytes = 67108865 > 67108864 B of VMEM on tpu_v7x"], ("pallas", "vmem_limit_bytes"))),
    ("PAL001", "pallas:tpu_v5e", {"tile": tile(8, 128, 128)}, None),
    ("PAL001", "pallas:tpu_v5e", {"tile": tile(8, 128, 64)},
     ("error", ["A block 8x64 (bf16) is not divisible by (8, 128) on tpu_v5e"], ("tile",))),
    ("PAL001", "pallas:tpu_v7x", {"tile": tile(16, 128, 128)}, None),
    ("PAL001", "pallas:tpu_v7x", {"tile": tile(8, 128, 128)},
     ("error", ["A block 8x128 (bf16) is not divisible by (16, 128) on tpu_v7x"], ("tile",))),
    ("PAL001", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e5m2"}, "tile": tile(32, 128, 128)},
     None),
    ("PAL001", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e5m2"}, "tile": tile(16, 128, 128)},
     ("error", ["A block 16x128 (fp8_e5m2) is not divisible by (32, 128) on tpu_v5e"], ("tile",))),
    # PAL001 in the stored layout: MN-major A is (k, m), K-major B is (n, k)
    ("PAL001", "pallas:tpu_v5e", {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                                  "tile": tile(128, 128, 8)}, None),
    ("PAL001", "pallas:tpu_v5e", {"a": {"dtype": "bf16", "major": "mn"}, "tile": tile(128, 128, 8)},
     ("error", ["B block 128x8 (bf16) is not divisible by (8, 128) on tpu_v5e"], ("tile",))),
    ("PAL001", "pallas:tpu_v5e", {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                                  "tile": tile(8, 128, 128)},
     ("error", ["A block 128x8 (bf16) is not divisible by (8, 128) on tpu_v5e"], ("tile",))),
    # PAL003: Pallas TPU buffers a block 1 or 2 deep
    ("PAL003", "pallas:tpu_v6e", {"tile": tile(256, 256, 256), "pipeline": {"ab_stages": 2}}, None),
    ("PAL003", "pallas:tpu_v6e", {"tile": tile(256, 256, 256), "pipeline": {"ab_stages": 1}}, None),
    ("PAL003", "pallas:tpu_v6e", {"tile": tile(256, 256, 256), "pipeline": {"ab_stages": 3}},
     ("error", ["pipeline.ab_stages = 3: Pallas TPU buffers a block 1 or 2 deep"], ("pipeline", "ab_stages"))),
    # PAL002: MXU-aligned n and k (warning)
    ("PAL002", "pallas:tpu_v5e", {"tile": tile(128, 128, 128)}, None),
    ("PAL002", "pallas:tpu_v6e", {"tile": tile(128, 256, 256)}, None),
    ("PAL002", "pallas:tpu_v6e", {"tile": tile(128, 128, 256)},
     ("warning", ["tile n=128, k=256 are not multiples of the 256x256 MXU on tpu_v6e"], ("tile",))),
    # PAL004: the Mosaic GPU kernel takes 16-bit and fp8 operands, accumulating in f32
    ("PAL004", "pallas:gpu_sm90", {}, None),
    ("PAL004", "pallas:gpu_sm90", {**FP8, "out": {"dtype": "bf16"}}, None),
    ("PAL004", "pallas:gpu_sm90", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                                   "out": {"dtype": "int32"}},
     ("error", ["A is int8: the pallas:gpu_sm90 kernel takes f16, bf16, fp8_e4m3, fp8_e5m2 operands"], ("a", "dtype"))),
    ("PAL004", "pallas:gpu_sm90", {**F16, "accumulator": "f16"},
     ("error", ["accumulator = f16: the pallas:gpu_sm90 kernel accumulates in f32"], ("accumulator",))),
    ("PAL004", "pallas:gpu_sm90", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e5m2"}},
     ("error", ["A is fp8_e4m3 and B is fp8_e5m2: Mosaic GPU's matmul takes one input dtype"], ("b", "dtype"))),
    # PAL005: a residual is staged in the output's SMEM slot, so it has the output's dtype
    ("PAL005", "pallas:gpu_sm90", {"epilogue": [{"op": "residual", "dtype": "bf16"}]}, None),
    ("PAL005", "pallas:gpu_sm90", {"epilogue": [{"op": "residual", "dtype": "f16"}]},
     ("error", ["residual 'c' is f16 but out is bf16"], ("epilogue", 0, "dtype"))),
    # PAL006: tile.n splits into two wgmma N slices of whole 64-column epilogue subtiles
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(128, 256, 64)}, None),
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(64, 64, 64)}, None),  # 32-column slices: one 64x32 subtile
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(128, 192, 64)},
     ("error", ["a warpgroup's 128x96 slice is not a whole number of 64x64 epilogue subtiles"], ("tile",))),
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(128, 24, 64)},
     ("error", ["tile.n = 24 splits into 2 warpgroup slices of 12"], ("tile", "n"))),
    # PAL007: Mosaic GPU clusters are one CTA or a pair along M or N, whose shared tile splits in two
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 2, "n": 1}}, None),
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 1, "n": 2}}, None),
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 2, "n": 2}},
     ("error", ["cluster 2x2: the pallas:gpu_sm90 kernel launches 1x1, 2x1 or 1x2 clusters"], ("cluster",))),
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 4, "n": 1}},
     ("error", ["cluster 4x1: the pallas:gpu_sm90 kernel launches 1x1, 2x1 or 1x2 clusters"], ("cluster",))),
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 2, "n": 1}, "tile": tile(128, 16, 64)}, None),
    ("PAL007", "pallas:gpu_sm90", {"cluster": {"m": 2, "n": 1}, "tile": tile(128, 24, 64)},
     ("error", ["cluster 2x1 multicasts a 24-wide tile (tile.n) in two halves of 12: not a multiple of 8 rows"],
      ("tile",))),
    # PAL008: one 32/64/128 B swizzle for A and B (MN-major B: each warpgroup's tile.n/2 slice), the output's too
    ("PAL008", "pallas:gpu_sm90", {"b": {"dtype": "bf16", "major": "mn"}, "out": {"dtype": "f32"},
                                   "tile": tile(128, 32, 64)}, None),  # 16-column slices: 32 B
    ("PAL008", "pallas:gpu_sm90", {"b": {"dtype": "bf16", "major": "mn"}, "out": {"dtype": "f32"},
                                   "tile": tile(128, 16, 64)},
     ("error", ["no 32/64/128 B swizzle divides A's (tile.k 64 x 2 B), B's (tile.n/2 8 x 2 B)"], ("tile",))),
    ("PAL008", "pallas:gpu_sm90", {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                                   "tile": tile(128, 128, 16)}, None),  # a 32 B swizzle for both, K in 16s
    ("PAL008", "pallas:gpu_sm90", {"out": {"dtype": "f32"}, "tile": tile(128, 16, 64)}, None),  # 8 x 4 B = 32 B
    ("PAL008", "pallas:gpu_sm90", {"tile": tile(128, 16, 64)},
     ("error", ["the output's 64x8 epilogue subtile rows span 16 B (bf16)"], ("tile", "n"))),
    # PAL009: GELU's erf form has no Mosaic GPU layout rule; the tanh form lowers
    ("PAL009", "pallas:gpu_sm90", {"epilogue": [{"op": "activation", "fn": "gelu_tanh"}]}, None),
    ("PAL009", "pallas:gpu_sm90", {"epilogue": [{"op": "bias"}, {"op": "activation", "fn": "gelu"}]},
     ("error", ["activation gelu (erf form) does not lower on pallas:gpu_sm90"], ("epilogue", 1, "fn"))),
    # ... and an fp8 output after a trailing cast to bf16 (f32 casts after it change nothing)
    ("PAL009", "pallas:gpu_sm90", {"out": {"dtype": "fp8_e4m3"},
                                   "epilogue": [{"op": "cast", "dtype": "bf16"}, {"op": "activation", "fn": "relu"}]},
     None),
    ("PAL009", "pallas:gpu_sm90", {"out": {"dtype": "fp8_e4m3"}, "epilogue": [{"op": "cast", "dtype": "f16"}]}, None),
    ("PAL009", "pallas:gpu_sm90", {"out": {"dtype": "fp8_e5m2"},
                                   "epilogue": [{"op": "cast", "dtype": "bf16"}, {"op": "cast", "dtype": "f32"}]},
     ("error", ["the epilogue ends in a cast to bf16 and out is fp8_e5m2"], ("epilogue", 0, "dtype"))),
    # pallas.swap_ab: each warpgroup's tile.n/2 is wgmma's rows (PAL006, a multiple of 64), tile.m its
    # columns (MMA001: 8..256 step 8); a residual needs tile.m <= 64 (PAL010); Mosaic GPU only (OPT001)
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(16, 128, 128), "pallas": {"swap_ab": True}}, None),
    ("PAL006", "pallas:gpu_sm90", {"tile": tile(16, 64, 128), "pallas": {"swap_ab": True}},
     ("error", ["tile.n = 64 splits into 2 warpgroup slices of 32: with pallas.swap_ab each is wgmma's rows, "
                "a multiple of 64"], ("tile", "n"))),
    ("MMA001", "pallas:gpu_sm90", {"tile": tile(8, 128, 128), "pallas": {"swap_ab": True}}, None),
    ("MMA001", "pallas:gpu_sm90", {"tile": tile(16, 128, 128)},
     ("error", ["tile.m = 16 is not a multiple of 64 (wgmma M per warpgroup)"], ("tile", "m"))),
    ("MMA001", "pallas:gpu_sm90", {"tile": tile(12, 128, 128), "pallas": {"swap_ab": True}},
     ("error", ["tile.m = 12 is outside wgmma N 8..256 step 8 (swap_ab: the MMA columns)"], ("tile", "m"))),
    ("PAL010", "pallas:gpu_sm90", {"tile": tile(16, 128, 128), "pallas": {"swap_ab": True},
                                   "epilogue": [{"op": "residual", "dtype": "bf16"}]}, None),
    ("PAL010", "pallas:gpu_sm90", {"tile": tile(64, 128, 64), "pallas": {"swap_ab": True},
                                   "epilogue": [{"op": "residual", "dtype": "bf16"}]}, None),
    ("PAL010", "pallas:gpu_sm90", {"tile": tile(8, 128, 128), "pallas": {"swap_ab": True}}, None),  # no residual
    ("PAL010", "pallas:gpu_sm90", {"tile": tile(8, 128, 128), "pallas": {"swap_ab": True},
                                   "epilogue": [{"op": "scale", "by": "scalar"}, {"op": "residual", "dtype": "bf16"}]}, None),
    ("PAL010", "pallas:gpu_sm90", {"tile": tile(128, 128, 64), "pallas": {"swap_ab": True},
                                   "epilogue": [{"op": "residual", "dtype": "bf16"}]},
     ("error", ["residual 'c' with pallas.swap_ab and tile.m = 128", "lowers for tile.m <= 64 only"],
      ("epilogue", 0))),
    # PAL011: a backward's gradient stored transposed (dA of an mn-major A, dB of a K-major B) is written in
    # tile.n x tile.m blocks: tile.m on the lanes, a multiple of 128
    ("PAL011", "pallas:tpu_v5e", {"tile": tile(16, 128, 128), "epilogue": [{"op": "activation", "fn": "relu"}],
                                  "training": {"save": "preact", "wgrad": {"tile": tile(128, 128, 128)}}}, None),
    ("PAL011", "pallas:tpu_v5e", {"tile": tile(16, 128, 128), "training": {"save": "recompute"}},
     ("error", ["backward wgrad: dB is stored (N, K): b.major = k, so its kernel writes 128x16 blocks",
                "not divisible by (8, 128) on"], ("training", "wgrad"))),
    ("PAL011", "pallas:tpu_v6e", {"tile": tile(128, 128, 128), "a": {"dtype": "bf16", "major": "mn"},
                                  "training": {"save": "preact", "dgrad": {"tile": tile(64, 128, 128)}}},
     ("error", ["backward dgrad: dA is stored (K, M): a.major = mn, so its kernel writes 128x64 blocks"],
      ("training", "dgrad"))),
    ("OPT001", "pallas:gpu_sm90", {"tile": tile(16, 128, 128), "pallas": {"swap_ab": True}}, None),
    ("OPT001", "pallas:tpu_v5e", {"tile": tile(128, 128, 128), "pallas": {"swap_ab": True}},
     ("error", ["pallas.swap_ab is a Mosaic GPU setting; pallas:tpu_v5e (Mosaic TPU) does not swap"],
      ("pallas", "swap_ab"))),
    # PAL012: the dense Mosaic GPU kernel's gated epilogue, unswapped, unclustered, 16-bit, an interleaved B K-major
    ("PAL012", "pallas:gpu_sm90", {"epilogue": [{"op": "gated", "fn": "silu", "layout": "interleaved"}]}, None),
    ("PAL012", "pallas:gpu_sm90", {"b": {"dtype": "bf16", "major": "mn"},
                                   "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]}, None),
    ("PAL012", "pallas:gpu_sm90", {"b": {"dtype": "bf16", "major": "mn"},
                                   "epilogue": [{"op": "gated", "fn": "silu", "layout": "interleaved"}]},
     ("error", ['a gated epilogue (interleaved) with b.major = "mn": gate column j is B\'s column 2j, 4 B from the next'],
      ("epilogue", 0, "layout"))),
    ("PAL012", "pallas:gpu_sm90", {"tile": tile(64, 128, 64), "pallas": {"swap_ab": True},
                                   "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]},
     ("error", ["pallas.swap_ab with a gated epilogue (silu)"], ("pallas", "swap_ab"))),
    ("PAL012", "pallas:gpu_sm90", {"cluster": {"m": 2, "n": 1}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]},
     ("error", ["cluster 2x1 with a gated epilogue"], ("cluster",))),
]
