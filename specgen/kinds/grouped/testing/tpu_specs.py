"""Grouped spec forms for the Pallas TPU design (specgen/kinds/grouped/designs/pallas): `TPU_FORMS`, one spec per
template branch (both index formats, both tails, both B majors, every epilogue op the kind takes, f32 and bf16),
over 8x128x128 blocks (the smallest PAL001 takes, so that a few rows span several row tiles and groups share them),
served by two TPU generations; `TPU_FP8_FORMS`, fp8 (e5m2, and e4m3 x e5m2 on v7x) with torch._scaled_grouped_mm's
rowwise scales or a per-group column scale, over 32-row blocks. The numerics (tests/backends/pallas/test_grouped_tpu.py) run them in the
interpreter; the name-hardening tests tokenize them."""

from __future__ import annotations

from specgen.kinds.grouped.testing.specs import spec

TPU_TILE = {"m": 8, "n": 128, "k": 128}


def tpu_form(name: str, *, dtype: str = "f32", b: str = "k", index: str = "sizes", tail: str = "zero",
             epilogue: tuple = ()) -> dict:
    """A grouped spec on pallas:tpu_v5e and tpu_v6e (every default spelled out, plain data)."""
    return spec(name, a={"dtype": dtype, "major": "k"}, b={"dtype": dtype, "major": b}, out={"dtype": dtype},
                tile=TPU_TILE, targets=["pallas:tpu_v5e", "pallas:tpu_v6e"], groups={"index": index, "tail": tail},
                epilogue=[dict(op) for op in epilogue])


TPU_FORMS: dict[str, dict] = {s["name"]: s for s in (
    tpu_form("gt_plain_zero_k"),
    tpu_form("gt_offs_untouched_mn", b="mn", index="offs", tail="untouched",
             epilogue=({"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"})),
    tpu_form("gt_every_op_zero_mn", b="mn", epilogue=(
        {"op": "bias", "dtype": "f32"}, {"op": "scale", "by": "row", "name": "router"},
        {"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "activation", "fn": "gelu_tanh"},
        {"op": "clamp", "min": -2.0, "max": 2.0})),
    tpu_form("gt_bf16_bias_k", dtype="bf16", tail="untouched", epilogue=(
        {"op": "bias", "dtype": "bf16"}, {"op": "scale", "by": "scalar", "value": 0.5}, {"op": "activation", "fn": "relu"},
        {"op": "cast", "dtype": "bf16"})),
    tpu_form("gt_bf16_plain_mn", dtype="bf16", b="mn"),
)}

# The gated epilogue's forms (halves: GRP204): B (G, 2N, K) K-major, SwiGLU with a bias after it and an untouched
# tail over offs, f32; the erf GeGLU, bf16, tail zero; GeGLU-tanh with a router scale after it, f32; and B (G, K, 2N)
# N-major (its launcher takes N a multiple of the block), SwiGLU with a bias after it, f32.
TPU_GATED_FORMS: dict[str, dict] = {s["name"]: s for s in (
    tpu_form("gt_swiglu_bias_offs", index="offs", tail="untouched", epilogue=(
        {"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "f32"})),
    tpu_form("gt_geglu_bf16", dtype="bf16", epilogue=({"op": "gated", "fn": "gelu", "layout": "halves"},)),
    tpu_form("gt_geglu_tanh_router", epilogue=(
        {"op": "gated", "fn": "gelu_tanh", "layout": "halves"}, {"op": "scale", "by": "row", "name": "router"})),
    tpu_form("gt_swiglu_bias_nmajor", b="mn", epilogue=(
        {"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "f32"})),
)}

# fp8 (DT003: e5m2 before v7x, e4m3 and e5m2 on v7x, one of each too): torch._scaled_grouped_mm's rowwise scales
# (scale_a (M,), scale_b (G, N)) then a bias and SiLU, e5m2, B K-major, an untouched tail over offs, bf16 out; and
# e4m3 A x e5m2 B, B N-major, a per-group column scale (G, N) then a router scale, tail zero, f32 out. 32-row blocks:
# PAL001's 8-bit sublane tile.
TPU_FP8_TILE = {"m": 32, "n": 128, "k": 128}
TPU_FP8_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("gt_fp8_e5m2_rowcol_k", a={"dtype": "fp8_e5m2", "major": "k"}, b={"dtype": "fp8_e5m2", "major": "k"},
         out={"dtype": "bf16"}, tile=TPU_FP8_TILE, targets=["pallas:tpu_v5e", "pallas:tpu_v6e"],
         groups={"index": "offs", "tail": "untouched"},
         epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
    spec("gt_fp8_mix_col_mn", a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e5m2", "major": "mn"},
         out={"dtype": "f32"}, tile=TPU_FP8_TILE, targets=["pallas:tpu_v7x"], groups={"index": "sizes", "tail": "zero"},
         epilogue=[{"op": "scale", "by": "col", "name": "expert_scale"}, {"op": "scale", "by": "row", "name": "router"}]),
)}


def tpu_ragged_k_form(name: str, *, dtype: str = "f32", out: str | None = None, a: str = "mn", b: str = "mn",
                      index: str = "sizes", epilogue: tuple = ()) -> dict:
    """A ragged-K grouped spec (groups along K, out (G, M, N)) on pallas:tpu_v5e and tpu_v6e, 8x128x128 blocks where
    K is the sublane dim (M- or N-major operands: x (K, M) and dy (K, N) as stored); a K-major operand has K on the
    lanes, so its forms take 128-row K blocks too."""
    return spec(name, a={"dtype": dtype, "major": a}, b={"dtype": dtype, "major": b}, out={"dtype": out or dtype},
                tile={"m": 128, "n": 128, "k": 8 if a == b == "mn" else 128}, targets=["pallas:tpu_v5e", "pallas:tpu_v6e"],
                groups={"index": index, "ragged": "k"}, epilogue=[dict(op) for op in epilogue])


# The weight gradient's layouts (x (K, M) and dy (K, N) as stored) over 8-row K blocks, so that a few K rows span
# several K tiles and groups share them; K-major A and B (128-row K blocks: K on the lanes), offs, a per-group bias,
# SiLU and a runtime scalar; bf16 into f32, mixed majors.
TPU_RAGGED_K_FORMS: dict[str, dict] = {s["name"]: s for s in (
    tpu_ragged_k_form("gtk_mn_mn"),
    tpu_ragged_k_form("gtk_k_k_bias", a="k", b="k", index="offs", epilogue=(
        {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}, {"op": "scale", "by": "scalar", "name": "alpha"})),
    tpu_ragged_k_form("gtk_bf16_mn_k", dtype="bf16", out="f32", a="mn", b="k"),
)}


def tpu_training_form(name: str, *, save: str, dtype: str = "f32", b: str = "k", index: str = "sizes",
                      tail: str = "zero", epilogue: tuple = ()) -> dict:
    """A ragged-M TPU spec with a `training` section: the forward's 8x128x128 blocks, wgrad's ragged-K GEMM on
    (128, 128, sublane-tile) blocks (its M- and N-major operands put tile.m and tile.n on the lanes and tile.k on the
    sublanes: PAL001)."""
    s = tpu_form(name, dtype=dtype, b=b, index=index, tail=tail, epilogue=epilogue)
    s["training"] = {"save": save, "wgrad": {"tile": {"m": 128, "n": 128, "k": 8 if dtype == "f32" else 16}}}
    return s


def fp8_training_form(name: str, *, a: str, b: str, b_major: str, save: str, targets: list[str], index: str = "sizes",
                      tail: str = "zero", epilogue: tuple = ()) -> dict:
    """An fp8 ragged-M TPU spec (rowwise scales first) with a `training` section: bf16 out, 32x128x128 blocks (an
    8-bit block's sublane tile is 32 rows), wgrad on (128, 128, 32) blocks: it reads the 8-bit A as stored, the
    groups' rows on its sublanes."""
    s = spec(name, a={"dtype": a, "major": "k"}, b={"dtype": b, "major": b_major}, out={"dtype": "bf16"},
             tile=TPU_FP8_TILE, targets=targets, groups={"index": index, "tail": tail}, epilogue=[dict(op) for op in epilogue])
    s["training"] = {"save": save, "wgrad": {"tile": {"m": 128, "n": 128, "k": 32}}}
    return s


# The grouped TPU backward's forms: bias + GELU-tanh saved (preact), B K-major, tail zero; bias + SiLU recomputed,
# B N-major, offs, an untouched tail; bf16 with a bias alone (G = dOut), B K-major; gated (halves: pre and G (rows,
# 2N)): SwiGLU then a bias saved (preact), B (G, 2N, K) K-major, tail zero; GeGLU-tanh recomputed, B (G, K, 2N)
# N-major (N a multiple of the block), offs, an untouched tail; fp8 forwards (a bf16 backward w.r.t. the dequantized
# operands): e4m3 x e5m2 on v7x with a bias and GELU-tanh saved, B K-major; e5m2 on v5e / v6e with SiLU recomputed,
# B N-major, offs, an untouched tail.
TPU_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    tpu_training_form("gtt_bias_gelu_tanh_preact", save="preact", epilogue=(
        {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu_tanh"})),
    tpu_training_form("gtt_bias_silu_recompute_mn", save="recompute", b="mn", index="offs", tail="untouched", epilogue=(
        {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"})),
    tpu_training_form("gtt_bias_bf16", save="preact", dtype="bf16", epilogue=({"op": "bias", "dtype": "bf16"},)),
    tpu_training_form("gtt_swiglu_bias_preact", save="preact", epilogue=(
        {"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "f32"})),
    tpu_training_form("gtt_geglu_tanh_recompute_mn", save="recompute", b="mn", index="offs", tail="untouched", epilogue=(
        {"op": "gated", "fn": "gelu_tanh", "layout": "halves"},)),
    fp8_training_form("gtt_fp8_mix_bias_gelu_tanh_preact", a="fp8_e4m3", b="fp8_e5m2", b_major="k", save="preact",
                      targets=["pallas:tpu_v7x"], epilogue=(
                          {"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu_tanh"})),
    fp8_training_form("gtt_fp8_e5m2_silu_recompute_mn", a="fp8_e5m2", b="fp8_e5m2", b_major="mn", save="recompute",
                      targets=["pallas:tpu_v5e", "pallas:tpu_v6e"], index="offs", tail="untouched", epilogue=(
                          {"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "silu"})),
)}
