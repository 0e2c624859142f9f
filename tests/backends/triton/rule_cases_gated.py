"""Boundary cases of the gated epilogue's rules (specgen/kinds/gemm/shared_rules/gated.py: EPI001 where a design
renders no gated epilogue, EPI002 the Triton kernels' configurations with one), on both kinds, and of the budget
rules that must count a gated tile's doubled B tile and accumulator (SMEM001, REG001), in tests/test_rules.py's
form (rule, target, spec overrides, expected), which that file collects."""

from __future__ import annotations

from specgen.kinds.gemm.testing.rules import tile

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec
SWIGLU = {"op": "gated", "fn": "silu", "layout": "halves"}
GEGLU_IL = {"op": "gated", "fn": "gelu", "layout": "interleaved"}
GATED = {"epilogue": [SWIGLU]}

CASES: list[tuple[str, str, dict, object]] = [
    # EPI001: only the Triton designs (dense and grouped), the grouped CuTe sm90 design, the Mosaic GPU kernels
    # (dense and grouped) and the Pallas TPU kernels (dense and grouped) render a gated epilogue
    ("EPI001", "cute:sm90", {"epilogue": [{"op": "activation", "fn": "silu"}]}, None),
    ("EPI001", "cute:sm90", GATED,
     ("error", ["epilogue[0] is gated (silu, halves): the CuTe sm90 design renders no gated epilogue",
                "(the Pallas and Triton designs do)"], ("epilogue",))),
    ("EPI001", "cute:sm90", {**G, **GATED}, None),  # the grouped CuTe sm90 design renders it (limits: GRP301)
    ("EPI001", "cute:sm100", {"epilogue": [GEGLU_IL]},
     ("error", ["gated (gelu, interleaved): the CuTe sm100 design"], ("epilogue",))),
    # (pallas:gpu_sm90: both kinds' Mosaic GPU kernels render it, EPI001 no longer applies there; limits PAL012, MGP003)
    # (pallas:tpu_*: both Pallas TPU kernels render it too, EPI001 no longer applies there; limits PAL013, GRP204)
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
    # REG001 counts gate and up accumulators: 128x128 f32 over 4 warps is 128 registers a thread, gated 256
    ("REG001", "triton:sm90", {"tile": tile(128, 128, 64), "triton": {"num_warps": 4}}, None),
    ("REG001", "triton:sm90", {**GATED, "tile": tile(128, 128, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread (128 threads)"], ("triton", "num_warps"))),
    ("REG001", "triton:sm100", {**G, "epilogue": [GEGLU_IL], "tile": tile(128, 128, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread (128 threads)"], ("triton", "num_warps"))),
    # on the grouped Mosaic GPU kernel two warpgroups split tile.n: 128x256 is 128 registers a thread, gated 256
    ("REG001", "pallas:gpu_sm90", {**G, "tile": tile(128, 256, 64)}, None),
    ("REG001", "pallas:gpu_sm90", {**GATED, "tile": tile(128, 256, 64)},
     ("error", ["accumulator needs 256 registers per thread (256 threads) > 255"], ("tile",))),
    ("REG001", "pallas:gpu_sm90", {**G, **GATED, "tile": tile(128, 256, 64)},
     ("error", ["accumulator needs 256 registers per thread (256 threads) > 255"], ("tile",))),
]
