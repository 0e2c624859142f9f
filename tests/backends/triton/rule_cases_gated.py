"""Boundary cases of the gated epilogue's rules (specgen/kinds/gemm/shared_rules/gated.py: EPI001 where a design
renders no gated epilogue, EPI002 the Triton kernels' configurations with one, EPI003 the CuTe kernels'), on both
kinds, and of the budget rules that must count a gated tile's doubled B tile and accumulator (SMEM001, REG001,
TMEM001), in tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import tile

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec
SWIGLU = {"op": "gated", "fn": "silu", "layout": "halves"}
GEGLU_IL = {"op": "gated", "fn": "gelu", "layout": "interleaved"}
GATED = {"epilogue": [SWIGLU]}

CASES: list[tuple[str, str, dict, object]] = [
    # EPI001: every shipped design renders a gated epilogue (the CuTe ones and the Pallas TPU kernels since session 25),
    # so it applies to no shipped target: tests/test_rules.py's test_epi001_refuses_a_design_without_a_gated_epilogue
    # shows both sides on a made-up design; the limits are EPI002 (Triton), EPI003 (CuTe), PAL012 / MGP003 (Mosaic
    # GPU), PAL013 / GRP204 (TPU)
    # EPI002: a gated Triton kernel takes no split-K (dense) and no swap_ab (both kinds)
    ("EPI002", "triton:sm90", {**GATED, "tile": tile(64, 64, 64), "schedule": {"persistent": True}}, None),
    ("EPI002", "triton:sm90", {**GATED, "tile": tile(64, 64, 64), "schedule": {"split_k": 2}},
     ("error", ["schedule.split_k = 2 with a gated epilogue"], ("schedule", "split_k"))),
    ("EPI002", "triton:sm100", {**GATED, "tile": tile(16, 64, 64), "triton": {"swap_ab": True}},
     ("error", ["triton.swap_ab = true with a gated epilogue"], ("triton", "swap_ab"))),
    ("EPI002", "triton:sm90", {"tile": tile(16, 64, 64), "triton": {"swap_ab": True}}, None),  # no gated op
    ("EPI002", "triton:sm90", {**G, **GATED}, None),
    ("EPI002", "triton:sm90", {**G, "epilogue": [GEGLU_IL], "tile": tile(16, 64, 64), "triton": {"swap_ab": True}},
     ("error", ["triton.swap_ab = true with a gated epilogue"], ("triton", "swap_ab"))),
    # EPI003: the CuTe kernels (both kinds, sm90 and sm100) load a gated B K-major; the dense sm90 kernel's swap_ab
    # and split-K and the dense sm100 kernel's 2-CTA MMA handle one accumulator
    ("EPI003", "cute:sm90", {**GATED, "cute": {"mma_warpgroups": 2}}, None),
    ("EPI003", "cute:sm90", {**GATED, "b": {"dtype": "bf16", "major": "mn"}},
     ("error", ['a gated epilogue (halves) with b.major = "mn"', "K-major B"], ("b", "major"))),
    ("EPI003", "cute:sm100", {**G, "epilogue": [GEGLU_IL], "b": {"dtype": "bf16", "major": "mn"}},
     ("error", ['a gated epilogue (interleaved) with b.major = "mn"'], ("b", "major"))),
    ("EPI003", "cute:sm90", {"b": {"dtype": "bf16", "major": "mn"}}, None),  # no gated op
    ("EPI003", "cute:sm90", {**GATED, "tile": tile(128, 64, 64), "cute": {"swap_ab": True}},
     ("error", ["cute.swap_ab = true with a gated epilogue"], ("cute", "swap_ab"))),
    ("EPI003", "cute:sm90", {**GATED, "tile": tile(64, 128, 64), "schedule": {"split_k": 2}},
     ("error", ["schedule.split_k = 2 with a gated epilogue"], ("schedule", "split_k"))),
    ("EPI003", "cute:sm100", {**GATED, "tile": tile(128, 64, 64), "cluster": {"m": 2, "n": 1},
                              "cute": {"two_cta": True}},
     ("error", ["cute.two_cta = true with a gated epilogue"], ("cute", "two_cta"))),
    ("EPI003", "cute:sm100", {**GATED, "tile": tile(128, 64, 64), "cluster": {"m": 2, "n": 1}}, None),
    # SMEM001 counts a gated tile's 2 tile.n B columns: 128x256x64 bf16 at 3 stages fits (near: the model accepts)
    # as a plain GEMM, but its gated stages hold 16 KiB of A and 64 KiB of B each
    ("SMEM001", "triton:sm90", {"tile": tile(128, 256, 64), "pipeline": {"ab_stages": 3}}, None),
    ("SMEM001", "triton:sm90", {**GATED, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 3}},
     ("error", ["A/B 3 x 81920 = 245760"], ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm100", {**G, **GATED, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 3}},
     ("error", ["A/B 3 x 81920 = 245760"], ("pipeline", "ab_stages"))),
    # ... and the grouped Mosaic GPU kernel's gate and up B buffers: 128x128x64 bf16 at 5 stages fits plainly (5 x 32784
    # B), gated each stage is 16 KiB of A and two 16 KiB B tiles
    ("SMEM001", "pallas:gpu_sm90", {**G, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}}, None),
    ("SMEM001", "pallas:gpu_sm90", {**G, **GATED, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 278608 B of SMEM > 232448 B", "A/B 5 x 49168 = 245840"], ("pipeline", "ab_stages"))),
    # ... and the dense Mosaic GPU kernel's (the same figure: the dense memory model serves both kinds)
    ("SMEM001", "pallas:gpu_sm90", {**GATED, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 278608 B of SMEM > 232448 B", "A/B 5 x 49168 = 245840"], ("pipeline", "ab_stages"))),
    ("SMEM001", "pallas:gpu_sm90", {**GATED, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 4}}, None),
    # ... and the CuTe kernels' up tile (its own buffer, sU): 128x128x64 bf16 at 5 stages fits plainly (5 x 32768 B),
    # gated each stage is 16 KiB of A and two 16 KiB B tiles, on sm90 and sm100, dense and grouped
    ("SMEM001", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"mma_warpgroups": 2}, "pipeline": {"ab_stages": 5}},
     None),
    ("SMEM001", "cute:sm90", {**GATED, "tile": tile(128, 128, 64), "cute": {"mma_warpgroups": 2},
                              "pipeline": {"ab_stages": 5}},
     ("error", ["needs 264192 B of SMEM > 232448 B", "A/B 5 x 49152 = 245760"], ("pipeline", "ab_stages"))),
    ("SMEM001", "cute:sm100", {"tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}}, None),
    ("SMEM001", "cute:sm100", {**GATED, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 264192 B of SMEM > 232448 B", "A/B 5 x 49152 = 245760"], ("pipeline", "ab_stages"))),
    ("SMEM001", "cute:sm100", {**G, **GATED, "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["A/B 5 x 49152 = 245760"], ("pipeline", "ab_stages"))),
    # TMEM001 counts the CuTe sm100 kernels' gate and up TMEM accumulators side by side: a 128x256 tile's two
    # stages fill the 512 columns plainly, gated one stage does (auto takes one)
    ("TMEM001", "cute:sm100", {"tile": tile(128, 256, 64), "pipeline": {"acc_stages": 2}}, None),
    ("TMEM001", "cute:sm100", {**GATED, "tile": tile(128, 256, 64), "pipeline": {"acc_stages": 2}},
     ("error", ["accumulator needs 512 columns x 2 stages = 1024 (allocated 1024) > 512"], ("pipeline", "acc_stages"))),
    ("TMEM001", "cute:sm100", {**GATED, "tile": tile(128, 256, 64)}, None),
    ("TMEM001", "cute:sm100", {**G, "epilogue": [GEGLU_IL], "tile": tile(128, 256, 64), "pipeline": {"acc_stages": 2}},
     ("error", ["accumulator needs 512 columns x 2 stages"], ("pipeline", "acc_stages"))),
    # REG001 counts gate and up accumulators: 128x128 f32 over 4 warps is 128 registers a thread, gated 256
    ("REG001", "triton:sm90", {"tile": tile(128, 128, 64), "triton": {"num_warps": 4}}, None),
    ("REG001", "triton:sm90", {**GATED, "tile": tile(128, 128, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread (128 threads)"], ("triton", "num_warps"))),
    ("REG001", "triton:sm100", {**G, "epilogue": [GEGLU_IL], "tile": tile(128, 128, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread (128 threads)"], ("triton", "num_warps"))),
    # on the dense CuTe sm90 kernel: a 128x128 tile on one warpgroup is 128 accumulator registers a thread, gated
    # 256 (over the 232 setmaxnreg gives); on two warpgroups 128
    ("REG001", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"mma_warpgroups": 1}}, None),
    ("REG001", "cute:sm90", {**GATED, "tile": tile(128, 128, 64), "cute": {"mma_warpgroups": 1}},
     ("error", ["256 accumulator", "> the 232 setmaxnreg gives it"], ("tile",))),
    ("REG001", "cute:sm90", {**GATED, "tile": tile(128, 128, 64), "cute": {"mma_warpgroups": 2}}, None),
    # on the grouped Mosaic GPU kernel two warpgroups split tile.n: 128x256 is 128 registers a thread, gated 256
    ("REG001", "pallas:gpu_sm90", {**G, "tile": tile(128, 256, 64)}, None),
    ("REG001", "pallas:gpu_sm90", {**GATED, "tile": tile(128, 256, 64)},
     ("error", ["accumulator needs 256 registers per thread (256 threads) > 255"], ("tile",))),
    ("REG001", "pallas:gpu_sm90", {**G, **GATED, "tile": tile(128, 256, 64)},
     ("error", ["accumulator needs 256 registers per thread (256 threads) > 255"], ("tile",))),
]
