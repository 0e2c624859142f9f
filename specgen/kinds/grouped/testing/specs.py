"""Grouped spec forms the tests render: `spec(**changes)` over a small f16 base (interpreter-safe dtypes, a
16x16x16 tile so that sizes stay small and a tile spans several groups), and `FORMS`, one spec per template
branch (both index formats, both tails, both B majors, every epilogue op the kind takes, f32 and an f16
accumulator, TMA and pointer loads, a swapped size-selected variant, fp8 operands with per-row and per-group column
scales, gated epilogues of both layouts), which the name-hardening tests tokenize and the numerics run; and
`RAGGED_K_FORMS`, the ragged-K kernel's (tests/grouped/test_ragged_k.py); the CuTe sm90 design's (`CUTE_FORMS`,
`CUTE_FP8_FORMS`, `CUTE_RAGGED_K_FORMS`)."""

from __future__ import annotations

import copy

from specgen.kinds.grouped.spec import GroupedSpec

BASE: dict = {
    "name": "grouped",
    "kind": "grouped",
    "a": {"dtype": "f16", "major": "k"},
    "b": {"dtype": "f16", "major": "k"},
    "out": {"dtype": "f16"},
    "tile": {"m": 16, "n": 16, "k": 16},
    "targets": ["triton:sm90", "triton:sm100"],
    "triton": {"num_warps": 4},
}

EVERY_OP = [
    {"op": "bias", "dtype": "f16"},
    {"op": "scale", "by": "row", "name": "router"},
    {"op": "scale", "by": "scalar", "value": 0.5},
    {"op": "scale", "by": "scalar", "name": "alpha"},
    {"op": "activation", "fn": "gelu_tanh"},
    {"op": "clamp", "min": -2.0, "max": 2.0},
    {"op": "cast", "dtype": "f16"},
]


def spec(name: str, **changes: object) -> dict:
    """The base with `changes`, named `name`, every default spelled out (plain data)."""
    s = copy.deepcopy(BASE)
    s.update(copy.deepcopy(changes))
    s["name"] = name
    return GroupedSpec.model_validate(s).model_dump(mode="json")


FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("g_offs_untouched_kk"),
    spec("g_offs_zero_kmn", b={"dtype": "f16", "major": "mn"}, groups={"index": "offs", "tail": "zero"},
         epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
    spec("g_sizes_zero_kk", groups={"index": "sizes", "tail": "zero"}, epilogue=EVERY_OP),
    spec("g_sizes_untouched_kmn", b={"dtype": "f16", "major": "mn"}, groups={"index": "sizes"},
         epilogue=[{"op": "scale", "by": "row"}, {"op": "activation", "fn": "relu"}]),
    spec("g_f32", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "k"}, out={"dtype": "f32"},
         tile={"m": 16, "n": 16, "k": 8}, epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu"}]),
    spec("g_acc16", accumulator="f16", epilogue=[{"op": "bias", "dtype": "f16"}]),
    # masked pointer loads (triton.tma = false) on an N-major B
    spec("g_pointer_kmn", b={"dtype": "f16", "major": "mn"}, groups={"index": "offs", "tail": "zero"},
         triton={"num_warps": 4, "tma": False}, epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "silu"}]),
    # gated epilogues (SwiGLU, GeGLU): B (G, K, 2N), both layouts, TMA and pointer loads, both B majors
    spec("g_gated_halves_kk", epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "f16"},
                                        {"op": "scale", "by": "row", "name": "router"}]),
    spec("g_gated_il_kmn", b={"dtype": "f16", "major": "mn"}, groups={"index": "offs", "tail": "zero"},
         epilogue=[{"op": "gated", "fn": "gelu", "layout": "interleaved"}]),
    spec("g_gated_pointer_halves_kmn", b={"dtype": "f16", "major": "mn"}, triton={"num_warps": 4, "tma": False},
         epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "halves"}, {"op": "clamp", "min": -1.0, "max": 1.0}]),
    spec("g_gated_pointer_il_kk", groups={"index": "sizes", "tail": "zero"}, triton={"num_warps": 4, "tma": False},
         epilogue=[{"op": "gated", "fn": "silu", "layout": "interleaved"}, {"op": "scale", "by": "scalar", "value": 0.5}]),
    spec("g_gated_f32", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "mn"}, out={"dtype": "f32"},
         tile={"m": 16, "n": 16, "k": 8}, epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}]),
    spec("g_gated_acc16", accumulator="f16", epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}],
         variants=[{"when": {"m_max": 40}, "tile": {"m": 16, "n": 32, "k": 16}}]),
    # a swapped size-selected variant (decode's): the launcher picks it by M, every group's rows
    spec("g_swap_variant", groups={"index": "sizes", "tail": "untouched"},
         epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "scale", "by": "row"}],
         variants=[{"when": {"m_max": 40}, "tile": {"m": 16, "n": 32, "k": 16}, "triton": {"num_warps": 4, "swap_ab": True}}]),
)}

# fp8 operands (the interpreter converts them before its dot: they run right there, unlike bf16), f16 outs as the
# forms above; tile.k = 32, tl.dot's minimum for 8-bit operands (GRP101).
FP8_TILE = {"m": 16, "n": 16, "k": 32}
FP8_FORMS: dict[str, dict] = {s["name"]: s for s in (
    # torch._scaled_grouped_mm's meaning: e4m3, B K-major (the (G, N, K) weight transposed), rowwise scales, TMA
    spec("g_fp8_rowcol", a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"},
         tile=FP8_TILE, epilogue=[{"op": "scale", "by": "rowcol"}]),
    # e5m2 A beside an e4m3 B (fp8 formats mix), pointer loads, a named per-group column scale, then the rest
    spec("g_fp8_col_pointer", a={"dtype": "fp8_e5m2", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"},
         tile=FP8_TILE, groups={"index": "sizes", "tail": "zero"}, triton={"num_warps": 4, "tma": False},
         epilogue=[{"op": "scale", "by": "col", "name": "w_scale"}, {"op": "bias", "dtype": "f16"},
                   {"op": "activation", "fn": "silu"}]),
    # an N-major fp8 B: sm100 only (GRP102 refuses it on sm90), and the swapped decode variant
    spec("g_fp8_kmn_sm100", a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "mn"},
         tile=FP8_TILE, targets=["triton:sm100"], epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "scale", "by": "row"}],
         variants=[{"when": {"m_max": 40}, "tile": {"m": 16, "n": 32, "k": 32}, "triton": {"num_warps": 4, "swap_ab": True}}]),
)}
FORMS.update(FP8_FORMS)

# The guard tests' kernels (guards.py): offs, a per-group f16 bias and a per-row scale named `router`; and fp8 with
# torch._scaled_grouped_mm's rowwise scales.
GUARD_SPEC = spec("g_guards", epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "scale", "by": "row", "name": "router"}])
FP8_GUARD_SPEC = FP8_FORMS["g_fp8_rowcol"]

# Ragged K (the weight gradient, groups.ragged = "k"): A (M, K) either major (M-major: an input x passed as x.T),
# B (K, N) either major, out (G, M, N); each index format; a per-group bias with the chain after it; an f32 output.
RAGGED_K_FORMS: dict[str, dict] = {s["name"]: s for s in (
    # TMA loads (the default): each group's whole K tiles by box, its last partial tile one box masked in registers
    spec("gk_tma_offs_mn_mn", a={"dtype": "f16", "major": "mn"}, b={"dtype": "f16", "major": "mn"},
         groups={"index": "offs", "ragged": "k"}),
    spec("gk_sizes_k_k", groups={"index": "sizes", "ragged": "k"}, out={"dtype": "f32"}, tile={"m": 16, "n": 32, "k": 16},
         epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "gelu_tanh"},
                   {"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "clamp", "min": -3.0, "max": 3.0}]),
    spec("gk_f32_variant", a={"dtype": "f32", "major": "mn"}, b={"dtype": "f32", "major": "k"}, out={"dtype": "f32"},
         tile={"m": 16, "n": 16, "k": 8}, groups={"ragged": "k"},
         variants=[{"when": {"k_max": 40}, "tile": {"m": 32, "n": 16, "k": 16}}]),
    # masked pointer loads (triton.tma = false)
    spec("gk_offs_mn_mn", a={"dtype": "f16", "major": "mn"}, b={"dtype": "f16", "major": "mn"},
         groups={"index": "offs", "ragged": "k"}, triton={"num_warps": 4, "tma": False}),
    spec("gk_ptr_sizes_k_k", groups={"index": "sizes", "ragged": "k"}, out={"dtype": "f32"}, tile={"m": 16, "n": 32, "k": 16},
         triton={"num_warps": 4, "tma": False}, epilogue=[{"op": "bias", "dtype": "f16"}]),
)}


# The grouped CuTe sm90 design's forms (cute:sm90 only): both index formats and tails, both B majors, every epilogue
# op it renders (a per-group bias and column scale, a router's per-row scale, scalars, activations, clamp, cast),
# one and two consumer warpgroups, 16-column epilogue subtiles, f16 and f32 outputs. Compiled for sm_90a on the CPU
# (tests/grouped/test_cute_sm90.py) and run on the GPU (tests/gpu/test_grouped_cute_gpu.py).
CUTE = {"targets": ["cute:sm90"], "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
        "out": {"dtype": "bf16"}}
CUTE_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("cg_offs_untouched_kk", **CUTE, tile={"m": 128, "n": 128, "k": 64}),
    spec("cg_sizes_zero_kmn", **{**CUTE, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "mn"},
                                 "out": {"dtype": "f16"}}, groups={"index": "sizes", "tail": "zero"},
         tile={"m": 128, "n": 64, "k": 64}, epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
    spec("cg_every_op", **CUTE, tile={"m": 128, "n": 256, "k": 64},
         epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "scale", "by": "row", "name": "router"},
                   {"op": "scale", "by": "col", "name": "w"}, {"op": "scale", "by": "scalar", "value": 0.5},
                   {"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "activation", "fn": "gelu_tanh"},
                   {"op": "clamp", "min": -2.0, "max": 2.0}, {"op": "cast", "dtype": "f16"}]),
    spec("cg_f32_out_zero", **{**CUTE, "out": {"dtype": "f32"}}, groups={"index": "offs", "tail": "zero"},
         tile={"m": 64, "n": 128, "k": 64}, epilogue=[{"op": "activation", "fn": "gelu"}]),
    spec("cg_narrow_kmn", **{**CUTE, "b": {"dtype": "bf16", "major": "mn"}}, tile={"m": 128, "n": 112, "k": 64},
         pipeline={"epilogue_stages": 1}, epilogue=[{"op": "activation", "fn": "relu"}]),
    # a decode variant's shape (a 64-row tile on one warpgroup, as the catalogue's; 64 deep here, 128 there) bounded
    # past every case's rows, so that every numerics case runs it (the default config compiles beside it)
    spec("cg_decode_variant", **CUTE, tile={"m": 128, "n": 256, "k": 64},
         epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "silu"}],
         variants=[{"when": {"m_max": 1 << 20}, "tile": {"m": 64, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 1}}]),
    # gated epilogues (SwiGLU, GeGLU): B (G, K, 2N), K-major, both layouts, gate and up accumulators beside each other
    spec("cg_gated_halves", **CUTE, groups={"index": "sizes", "tail": "zero"}, tile={"m": 128, "n": 128, "k": 64},
         cute={"mma_warpgroups": 2}, epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "bf16"}]),
    spec("cg_gated_il_f16", **{**CUTE, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                               "out": {"dtype": "f16"}}, tile={"m": 64, "n": 128, "k": 64},
         epilogue=[{"op": "gated", "fn": "gelu", "layout": "interleaved"}, {"op": "scale", "by": "row", "name": "router"}]),
)}

# The grouped CuTe sm90 design's ragged-K forms (the weight gradient: groups along K, out (G, M, N);
# templates/grouped/cute/ragged_k_sm90.jinja): the training wgrad's layout (A M-major: x passed as x.T, B N-major: dy
# as it is) on two warpgroups, with a per-group bias and a chain after it; and K-major A and B (each group's first K
# row an arbitrary element of the contiguous dim), the sizes index, f32 out on one warpgroup and a 64-row tile.
# Compiled for sm_90a on the CPU (tests/grouped/test_cute_sm90_ragged_k.py) and run on the GPU
# (tests/gpu/test_grouped_cute_ragged_k_gpu.py) on RaggedKNumericsTests' cases.
CUTE_RAGGED_K_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("cgk_offs_mn_mn", **{**CUTE, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"}},
         groups={"index": "offs", "ragged": "k"}, tile={"m": 128, "n": 128, "k": 64}, cute={"mma_warpgroups": 2},
         epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"},
                   {"op": "scale", "by": "scalar", "name": "alpha"}]),
    spec("cgk_sizes_k_k", **{**CUTE, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                             "out": {"dtype": "f32"}}, groups={"index": "sizes", "ragged": "k"},
         tile={"m": 64, "n": 128, "k": 64}, cute={"mma_warpgroups": 1}),
)}

# The grouped CuTe sm90 design's fp8 forms (wgmma m64nNk32, K-major A and B, MAJ001): torch._scaled_grouped_mm's
# meaning (e4m3, rowwise scale_a (M,) and scale_b (G, N) on the f32 accumulator) on the catalogue's two-warpgroup
# 128x256x128 tile; and e5m2 A beside an e4m3 B (the formats mix), the sizes index with a zeroed tail, 64 bytes of K
# a stage (a 64-byte swizzle), the scales then a per-group bias and SiLU, f16 out, on one warpgroup. Checked and
# rendered on the CPU (the catalogue's moe_fp8_rowwise is the fp8 module compiled there, tests/backends/cute/
# test_cute_compile.py) and run on the GPU (tests/gpu/test_grouped_cute_gpu.py).
CUTE_FP8 = {"targets": ["cute:sm90"], "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
            "out": {"dtype": "bf16"}}
CUTE_FP8_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("cg_fp8_rowcol", **CUTE_FP8, tile={"m": 128, "n": 256, "k": 128}, epilogue=[{"op": "scale", "by": "rowcol"}]),
    spec("cg_fp8_mixed_zero", **{**CUTE_FP8, "a": {"dtype": "fp8_e5m2", "major": "k"}, "out": {"dtype": "f16"}},
         groups={"index": "sizes", "tail": "zero"}, tile={"m": 64, "n": 128, "k": 64},
         epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
)}

# The grouped CuTe sm90 design's training (its backward: designs/cute_sm90/training.py): save = "preact" with a per-group
# bias and GELU (tanh form), offs, B K-major, a zeroed tail; save = "recompute" with ReLU and no bias, the sizes index,
# B N-major on a 64x128 one-warpgroup tile; the plain GEMM (G = dOut) with a bias only, f16; two gated forms (below).
CUTE_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("cgt_preact_bias_gelu", **CUTE, groups={"index": "offs", "tail": "zero"}, tile={"m": 128, "n": 128, "k": 64},
         epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}], training={"save": "preact"}),
    spec("cgt_recompute_relu", **{**CUTE, "b": {"dtype": "bf16", "major": "mn"}}, groups={"index": "sizes"},
         tile={"m": 64, "n": 128, "k": 64}, epilogue=[{"op": "activation", "fn": "relu"}], training={"save": "recompute"}),
    spec("cgt_bias_only", **{**CUTE, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                             "out": {"dtype": "f16"}}, groups={"index": "offs"}, tile={"m": 128, "n": 128, "k": 64},
         epilogue=[{"op": "bias", "dtype": "f16"}], training={"save": "preact"}),
    # a gated op (issue 38): SwiGLU in halves with a bias after it, preact, offs, a zeroed tail; GeGLU (tanh) interleaved,
    # recompute, the sizes index, f16, a 64-row tile (B K-major: the gated forward's EPI003; two accumulators: REG001)
    spec("cgt_swiglu_halves_bias", **CUTE, groups={"index": "offs", "tail": "zero"}, tile={"m": 128, "n": 128, "k": 64},
         cute={"mma_warpgroups": 2},
         epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "bf16"}],
         training={"save": "preact"}),
    spec("cgt_geglu_il_recompute", **{**CUTE, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
                                      "out": {"dtype": "f16"}}, groups={"index": "sizes"}, tile={"m": 64, "n": 128, "k": 64},
         epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}], training={"save": "recompute"}),
)}

# The grouped CuTe sm90 design's backward of an fp8 forward (session 32; designs/cute_sm90/training.py): e4m3 with the
# rowwise scales, a per-group bias and GELU-tanh, preact (offs, a zeroed tail) and recompute (the sizes index, an
# untouched tail, a 64-row tile); e5m2 with SiLU into f16, preact; e4m3 A x e5m2 B (the formats mix) with an f32 bias
# alone into f16 (no activation: U = dOut). B K-major (wgmma reads 8-bit operands K-major only: MAJ001); dgrad and
# wgrad are the 16-bit companions at the forward's tile (its 128 K a stage: 256 bytes in 16 bits, 3 stages).
# tests/grouped/test_cute_sm90_training_fp8.py (CPU), tests/gpu/test_grouped_training_cute_fp8_gpu.py (GPU).
FP8_BIAS_GELU = [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}]
CUTE_FP8_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("cgt_fp8_e4m3_gelu_preact", **CUTE_FP8, groups={"index": "offs", "tail": "zero"},
         tile={"m": 128, "n": 128, "k": 128}, epilogue=FP8_BIAS_GELU, training={"save": "preact"}),
    spec("cgt_fp8_e4m3_gelu_recompute", **CUTE_FP8, groups={"index": "sizes"}, tile={"m": 64, "n": 128, "k": 128},
         epilogue=FP8_BIAS_GELU, training={"save": "recompute"}),
    spec("cgt_fp8_e5m2_silu_f16", **{**CUTE_FP8, "a": {"dtype": "fp8_e5m2", "major": "k"},
                                     "b": {"dtype": "fp8_e5m2", "major": "k"}, "out": {"dtype": "f16"}},
         groups={"index": "offs"}, tile={"m": 128, "n": 128, "k": 128},
         epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "silu"}], training={"save": "preact"}),
    spec("cgt_fp8_mixed_bias_only", **{**CUTE_FP8, "b": {"dtype": "fp8_e5m2", "major": "k"}, "out": {"dtype": "f16"}},
         groups={"index": "offs", "tail": "zero"}, tile={"m": 128, "n": 128, "k": 128},
         epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}], training={"save": "preact"}),
)}
