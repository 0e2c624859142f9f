"""Boundary cases of the CuTe sm90 design's own rules (specgen/kinds/gemm/designs/cute_sm90/rules.py): each rule on each
side of its boundary, in tests/test_rules.py's form (rule, target, spec overrides, expected); that file
collects every design's cases from beside its tests (tests/backends/*/rule_cases*.py)."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import FP8, tile

CASES: list[tuple[str, str, dict, object]] = [
    # PAL001: (sublanes, 128)-divisible blocks; sublanes 8, 16 for bf16 on v7x, 32 for 8-bit
    # CUTE001: one producer + two consumer warpgroups fill the register file; 64 rows per consumer
    ("CUTE001", "cute:sm90", {"tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 2}}, None),
    ("CUTE001", "cute:sm90", {"tile": tile(64, 256, 64), "cute": {"mma_warpgroups": 2}},
     ("error", ["tile.m = 64 is not a multiple of 64 x 2 consumer warpgroups: the warpgroups' stacked 64-row wgmma "
                "atoms cover 128 rows"], ("tile", "m"))),
    # CUTE002: whole 64x32 (one warpgroup) or 128x32 (two) TMA-store subtiles; 16-bit outputs 16 columns wide
    # where tile.n is a multiple of 16 but not of 32 (112 = 14336 / 128 tiles)
    ("CUTE002", "cute:sm90", {"tile": tile(128, 96, 64)}, None),
    ("CUTE002", "cute:sm90", {"tile": tile(128, 112, 64)}, None),
    ("CUTE002", "cute:sm90", {"tile": tile(128, 40, 64)},
     ("error", ["the kernel's tile 128x40 is 40 columns wide: the epilogue's stmatrix copy takes 16 accumulator "
                "columns at a time"], ("tile", "n"))),
    # 8-bit outputs: 64-column subtiles where tile.n allows, else 32 (an fp8 64x160 tile compiles)
    ("CUTE002", "cute:sm90", {**FP8, "out": {"dtype": "fp8_e4m3"}, "tile": tile(64, 160, 128)}, None),
    ("CUTE002", "cute:sm90", {**FP8, "out": {"dtype": "fp8_e4m3"}, "tile": tile(64, 144, 128)},
     ("error", ["tile 64x144 is not a whole number of 64x32 epilogue subtiles"], ("tile",))),
    # swap_ab: the kernel's tile is out^T's, tile.n on wgmma's rows and tile.m on its columns
    ("MMA001", "cute:sm90", {"tile": tile(16, 64, 64), "cute": {"swap_ab": True}}, None),
    ("MMA001", "cute:sm90", {"tile": tile(16, 64, 64)},
     ("error", ["tile.m = 16 is not a multiple of 64 (wgmma M per warpgroup)"], ("tile", "m"))),
    ("MMA001", "cute:sm90", {"tile": tile(16, 96, 64), "cute": {"swap_ab": True}},
     ("error", ["tile.n = 96 (swap_ab: the MMA's rows) is not a multiple of 64"], ("tile", "n"))),
    ("MMA001", "cute:sm90", {"tile": tile(12, 64, 64), "cute": {"swap_ab": True}},
     ("error", ["tile.m = 12 is outside wgmma N 8..256 step 8 (swap_ab: the MMA columns)"], ("tile", "m"))),
    ("CUTE001", "cute:sm90", {"tile": tile(64, 256, 64), "cute": {"swap_ab": True, "mma_warpgroups": 2}}, None),
    ("CUTE001", "cute:sm90", {"tile": tile(64, 64, 64), "cute": {"swap_ab": True, "mma_warpgroups": 2}},
     ("error", ["tile.n = 64 (swap_ab: the kernel's rows) is not a multiple of 64 x 2 consumer warpgroups"],
      ("tile", "n"))),
    # stmatrix moves 16 accumulator columns at a time: 8- and 24-column kernel tiles fail or abort the compile
    ("CUTE002", "cute:sm90", {"tile": tile(16, 64, 64), "cute": {"swap_ab": True}}, None),
    ("CUTE002", "cute:sm90", {"tile": tile(8, 64, 64), "cute": {"swap_ab": True}},
     ("error", ["the kernel's tile 64x8 (out^T: swap_ab) is 8 columns wide: the epilogue's stmatrix copy takes 16 "
                "accumulator columns at a time"], ("tile", "m"))),
    ("CUTE002", "cute:sm90", {"tile": tile(24, 64, 64), "cute": {"swap_ab": True}},
     ("error", ["the kernel's tile 64x24 (out^T: swap_ab) is 24 columns wide"], ("tile", "m"))),
    ("CUTE002", "cute:sm90", {"tile": tile(64, 8, 64), "out": {"dtype": "f32"}},
     ("error", ["the kernel's tile 64x8 is 8 columns wide"], ("tile", "n"))),
    ("CUTE002", "cute:sm90", {"tile": tile(48, 64, 64), "cute": {"swap_ab": True}},
     ("error", ["the kernel's tile 64x48 (out^T: swap_ab) is not a whole number of 64x32 epilogue subtiles"],
      ("tile",))),
    ("CUTE003", "cute:sm90", {"cute": {"tma_store": True}}, None),
    ("CUTE003", "cute:sm90", {"cute": {"tma_store": False}},
     ("warning", ["cute.tma_store = false is ignored on cute:sm90"], ("cute", "tma_store"))),
    # CUTE004: ping-pong warpgroups each own a whole tile; REG001 counts its accumulator over 128 threads
    ("CUTE004", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"schedule": "pingpong", "mma_warpgroups": 1}}, None),
    ("CUTE004", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"schedule": "pingpong", "mma_warpgroups": 2}},
     ("error", ['cute.schedule = "pingpong" gives each of its two consumer warpgroups a whole tile'],
      ("cute", "mma_warpgroups"))),
    # REG001 (the register model's cases: tests/test_rules.py): a SiLU on an f32 output, 128x224 over two warpgroups,
    # is an accept the model makes (135 of 232) and a near verdict (its tanh for the whole tile, 112 more registers,
    # passes 232: `hoist_near`, tests/backends/cute/test_cute_tanh_hoist.py), which check compiles (4 B spilled);
    # 256x224 is refused on the model's own count (247 > 232; cgrid_116_0007, that tile with a SiLU, a clamp and a
    # column scale, spilled 8520 B)
    ("REG001", "cute:sm90", {"tile": tile(128, 224, 64), "cute": {"mma_warpgroups": 2}, "out": {"dtype": "f32"},
                             "epilogue": [{"op": "activation", "fn": "silu"}]}, None),
    ("REG001", "cute:sm90", {"tile": tile(256, 224, 64), "out": {"dtype": "f32"},
                             "epilogue": [{"op": "activation", "fn": "silu"}]},
     ("error", ["about 247 registers (224 accumulator + 22.1 base; 256 threads share the 256x224 accumulator) > the "
                "232 setmaxnreg gives it: ptxas spills"], ("tile",))),
    # CUTE005: split-K as the cluster's third dim: at most 8 CTAs, cooperative, always an ordered sum
    ("CUTE005", "cute:sm90", {"tile": tile(64, 64, 64), "schedule": {"split_k": 4}, "cluster": {"m": 2, "n": 1}}, None),
    ("CUTE005", "cute:sm90", {"tile": tile(64, 64, 64), "schedule": {"split_k": 8}, "cluster": {"m": 2, "n": 1}},
     ("error", ["schedule.split_k = 8 in a 2x1 cluster: 16 CTAs per cluster > 8 (portable)"], ("schedule", "split_k"))),
    ("CUTE005", "cute:sm90", {"tile": tile(128, 128, 64), "schedule": {"split_k": 2}, "cute": {"schedule": "pingpong"}},
     ("error", ['schedule.split_k = 2 with cute.schedule = "pingpong"'], ("schedule", "split_k"))),
    ("CUTE005", "cute:sm90", {"tile": tile(64, 64, 64), "schedule": {"split_k": 2, "split_k_reduction": "atomic"}},
     ("warning", ['schedule.split_k_reduction = "atomic" is ignored on cute:sm90'], ("schedule", "split_k_reduction"))),
    # TRN001 on the CuTe sm90 design: its backward (designs/cute_sm90/training.py) takes 16-bit operands and an
    # output of their dtype (pre and G are stored in it), and no swap_ab or split-K forward
    ("TRN001", "cute:sm90", {"training": {"save": "preact"}, "epilogue": [{"op": "bias"}, {"op": "activation", "fn": "silu"}]},
     None),
    ("TRN001", "cute:sm90", {"training": {"save": "recompute"}, "out": {"dtype": "f32"}},
     ("error", ["training: the CuTe sm90 backward takes f16 or bf16 operands with an output of their dtype (pre and G "
                "are stored in it), or fp8 ones with a bf16 or f16 output; a.dtype = bf16, b.dtype = bf16, out.dtype = f32 "
                "(cute:sm90)"], ("training",))),
    ("TRN001", "cute:sm90", {"training": {"save": "preact"}, "tile": tile(64, 64, 64),
                             "cute": {"swap_ab": True, "mma_warpgroups": 1}},
     ("error", ["training: the CuTe sm90 backward has no swap_ab forward (cute.swap_ab = true)"], ("training",))),
    # a gated epilogue's backward (pre and G of B's 2N columns), either layout and save mode, a bias after the gate; its
    # output of the operands' dtype as every CuTe sm90 backward's
    ("TRN001", "cute:sm90", {"training": {"save": "preact"}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]},
     None),
    ("TRN001", "cute:sm90", {"training": {"save": "recompute"},
                             "epilogue": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias"}]}, None),
    ("TRN001", "cute:sm90", {"training": {"save": "preact"}, "out": {"dtype": "f32"},
                             "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias"}]},
     ("error", ["training: the CuTe sm90 backward takes f16 or bf16 operands with an output of their dtype (pre and G "
                "are stored in it), or fp8 ones with a bf16 or f16 output; a.dtype = bf16, b.dtype = bf16, out.dtype = f32 "
                "(cute:sm90)"], ("training",))),
    # an fp8 forward's (session 32): its rowwise scales, then [bias], [activation] or both; any other chain is refused
    ("TRN001", "cute:sm90", {**FP8, "out": {"dtype": "bf16"}, "tile": tile(128, 128, 128), "training": {"save": "recompute"},
                             "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias"}, {"op": "activation", "fn": "gelu"}]},
     None),
    ("TRN001", "cute:sm90", {**FP8, "out": {"dtype": "bf16"}, "tile": tile(128, 128, 128), "training": {"save": "preact"},
                             "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "residual", "dtype": "bf16"}]},
     ("error", ["training with fp8_e4m3 operands and epilogue ['scale', 'residual'] (an fp8 forward's backward here: its "
                "rowwise scales, then [bias], [activation] or [bias, activation]): the CuTe sm90 design renders no backward "
                "for it on cute:sm90 (the Triton design does)"], ("training",))),
    # the other chains (session 33: the chain pass, chain_pass.jinja), batched too (session 33: each GEMM per batch);
    # an fp8 forward batched too (session 34: the scales shared by the batches)
    ("TRN001", "cute:sm90", {"training": {"save": "recompute"}, "epilogue": [{"op": "bias", "along": "m"}]}, None),
    ("TRN001", "cute:sm90", {"training": {"save": "preact"}, "epilogue": [{"op": "bias", "along": "m"}], "batch": True}, None),
    ("TRN001", "cute:sm90", {**FP8, "out": {"dtype": "bf16"}, "tile": tile(128, 128, 128), "training": {"save": "preact"},
                             "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias"}], "batch": True},
     None),
]
