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
