"""Grouped spec forms for the Pallas Mosaic GPU design (specgen/kinds/grouped/designs/pallas_mgpu): `MGPU_FORMS`,
one spec per template branch (both index formats, both tails, both B majors, every epilogue op it renders, bf16,
f16 and fp8 (e4m3 and e5m2, with their rowwise scales), a 64-row and a 128-row tile, size-selected variants, gated epilogues of both layouts), on pallas:gpu_sm90; and `MGPU_RAGGED_K_FORMS`, the ragged-K kernel's (the weight gradient:
both majors of A and B, both index formats, a per-group bias and the chain after it, a size-selected variant).
Lowered for CUDA on the CPU by
tests/backends/pallas/test_grouped_mgpu.py, run on the GPU by tests/gpu/test_grouped_mgpu_gpu.py; the
name-hardening tests tokenize them."""

from __future__ import annotations

from specgen.kinds.grouped.testing.specs import spec

MGPU_TILE = {"m": 128, "n": 128, "k": 64}


def mgpu_form(name: str, *, dtype: str = "bf16", out: str | None = None, b: str = "k", index: str = "sizes",
              tail: str = "zero", tile: dict | None = None, epilogue: tuple = (), variants: tuple = ()) -> dict:
    """A grouped spec on pallas:gpu_sm90 (every default spelled out, plain data); out is `dtype` unless given."""
    extra = {"variants": [dict(v) for v in variants]} if variants else {}
    return spec(name, a={"dtype": dtype, "major": "k"}, b={"dtype": dtype, "major": b}, out={"dtype": out or dtype},
                tile=tile or MGPU_TILE, targets=["pallas:gpu_sm90"], triton={"num_warps": 4},
                groups={"index": index, "tail": tail}, epilogue=[dict(op) for op in epilogue], **extra)


# Size-selected variants, picked by M (every group's rows): decode's 64-row tile, then one that changes every other
# config key the kernel reads (tile, depth, visit order), over the catalogue's 128x256 default.
MGPU_VARIANTS = (
    {"when": {"m_max": 64}, "tile": {"m": 64, "n": 256, "k": 64}},
    {"when": {"m_max": 256}, "tile": {"m": 64, "n": 128, "k": 64}, "pipeline": {"ab_stages": 6},
     "schedule": {"raster": "along_n", "group_m": 4}},
)


MGPU_FORMS: dict[str, dict] = {s["name"]: s for s in (
    mgpu_form("gm_plain_zero_k"),
    mgpu_form("gm_plain_untouched_mn", b="mn", index="offs", tail="untouched"),
    mgpu_form("gm_bias_silu_f16_mn", dtype="f16", b="mn", epilogue=(
        {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"})),
    mgpu_form("gm_every_op_k", index="offs", tile={"m": 64, "n": 256, "k": 64}, epilogue=(
        {"op": "bias", "dtype": "bf16"}, {"op": "scale", "by": "row", "name": "router"},
        {"op": "scale", "by": "col", "name": "colw"}, {"op": "scale", "by": "scalar", "name": "alpha"},
        {"op": "scale", "by": "scalar", "value": 0.5}, {"op": "activation", "fn": "gelu_tanh"},
        {"op": "clamp", "min": -2.0, "max": 2.0}, {"op": "cast", "dtype": "bf16"})),
    mgpu_form("gm_variants_untouched_k", index="offs", tail="untouched", tile={"m": 128, "n": 256, "k": 64},
              epilogue=({"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "silu"}), variants=MGPU_VARIANTS),
    # fp8 (wgmma reads 8-bit operands K-major only: MAJ001): the rowwise scales first, then the rest of the chain;
    # a decode variant of 64-row tiles and 256 bytes of K, as the catalogue's
    mgpu_form("gm_fp8_rowcol_silu_k", dtype="fp8_e4m3", out="bf16", index="offs", tail="untouched",
              tile={"m": 128, "n": 256, "k": 128}, epilogue=({"op": "scale", "by": "rowcol"},
                                                             {"op": "activation", "fn": "silu"}),
              variants=({"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 256}},)),
    mgpu_form("gm_fp8_e5m2_rowcol_zero_k", dtype="fp8_e5m2", out="bf16", tile={"m": 64, "n": 128, "k": 128},
              epilogue=({"op": "scale", "by": "rowcol"},)),
    # gated epilogues (SwiGLU, GeGLU): B (G, K, 2N), a gate and an up tile a step, two accumulators; halves on both B
    # majors, interleaved on a K-major B (MGP003), with and without a following bias, bf16 and f16
    mgpu_form("gm_gated_halves_bias_k", epilogue=({"op": "gated", "fn": "silu", "layout": "halves"},
                                                  {"op": "bias", "dtype": "bf16"})),
    mgpu_form("gm_gated_il_f16_k", dtype="f16", index="offs", tail="untouched", tile={"m": 64, "n": 128, "k": 64},
              epilogue=({"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"},)),
    mgpu_form("gm_gated_halves_mn", b="mn", index="offs", tail="untouched",
              epilogue=({"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "scale", "by": "row", "name": "router"})),
)}


def mgpu_ragged_k_form(name: str, *, dtype: str = "bf16", out: str | None = None, a: str = "mn", b: str = "mn",
                       index: str = "sizes", tile: dict | None = None, epilogue: tuple = (), variants: tuple = ()) -> dict:
    """A ragged-K grouped spec (groups along K, out (G, M, N)) on pallas:gpu_sm90, plain data."""
    extra = {"variants": [dict(v) for v in variants]} if variants else {}
    return spec(name, a={"dtype": dtype, "major": a}, b={"dtype": dtype, "major": b}, out={"dtype": out or dtype},
                tile=tile or {"m": 128, "n": 256, "k": 64}, targets=["pallas:gpu_sm90"], triton={"num_warps": 4},
                groups={"index": index, "ragged": "k"}, epilogue=[dict(op) for op in epilogue], **extra)


# The weight gradient's layouts (x (K, M) and dy (K, N) as stored: M- and N-major) with the catalogue's 128x256x64
# tile; K-major A and B with a 64-row tile, f16 into f32, and the per-group bias, an activation and a runtime scalar;
# mixed majors with K tiles of 128 and a variant (K <= 256: every group's rows) of 2 stages, whose K loops of one step
# run the pipeline with no delayed release.
MGPU_RAGGED_K_FORMS: dict[str, dict] = {s["name"]: s for s in (
    mgpu_ragged_k_form("gkm_mn_mn"),
    mgpu_ragged_k_form("gkm_k_k_bias_f16", dtype="f16", out="f32", a="k", b="k", index="offs",
                       tile={"m": 64, "n": 128, "k": 64}, epilogue=(
                           {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"},
                           {"op": "scale", "by": "scalar", "name": "alpha"})),
    mgpu_ragged_k_form("gkm_mn_k_variant", b="k", index="offs", tile={"m": 128, "n": 128, "k": 128},
                       variants=({"when": {"k_max": 256}, "tile": {"m": 64, "n": 128, "k": 64},
                                  "pipeline": {"ab_stages": 2}},)),
)}


def mgpu_training_form(name: str, *, save: str, dtype: str = "bf16", b: str = "k", index: str = "sizes",
                       tail: str = "zero", tile: dict | None = None, epilogue: tuple = (), out: str | None = None,
                       **training: object) -> dict:
    """A ragged-M grouped spec with `training` on pallas:gpu_sm90 (the backward's companions at `training`'s configs);
    out is `dtype` unless given."""
    s = mgpu_form(name, dtype=dtype, out=out, b=b, index=index, tail=tail, tile=tile, epilogue=epilogue)
    return spec(name, **{k: v for k, v in s.items() if k != "name"}, training={"save": save, **training})


# The grouped Mosaic GPU backward (designs/pallas_mgpu/training.py): both save modes, both B majors, both index formats
# and tails, bf16 and f16, a bias of the operands' dtype and of f32, a tanh GELU, SiLU and ReLU (its step derivative),
# no activation (G = dOut), and backward configs of their own (a 64-row dgrad tile, a 3-stage wgrad).
MGPU_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    mgpu_training_form("gmt_bias_gelu_tanh_preact_k", save="preact", index="offs", tile={"m": 128, "n": 256, "k": 64},
                       epilogue=({"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"})),
    mgpu_training_form("gmt_bias_silu_recompute_mn", save="recompute", dtype="f16", b="mn", tail="untouched",
                       epilogue=({"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"})),
    mgpu_training_form("gmt_bias_untouched_mn", save="preact", b="mn", index="offs", tail="untouched",
                       epilogue=({"op": "bias", "dtype": "bf16"},),
                       dgrad={"tile": {"m": 64, "n": 128, "k": 64}, "ab_stages": 3}),
    mgpu_training_form("gmt_relu_preact_k_f16", save="preact", dtype="f16", epilogue=({"op": "activation", "fn": "relu"},),
                       wgrad={"ab_stages": 3}),
)}


# The gated backward (act(gate) * up, then at most a bias; pre and G over B's 2N columns in the forward's layout): a
# halves SwiGLU + bf16 bias preact (B K-major), an interleaved GeGLU-tanh recompute (f16, B K-major, offs, an untouched
# tail, a 64-row tile: the layout, index and tail of the catalogue's moe_gate_up_swiglu_bf16), a halves SwiGLU preact
# with an f32 bias (B N-major, offs, an untouched tail).
MGPU_GATED_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    mgpu_training_form("gmt_swiglu_bias_preact_k", save="preact",
                       epilogue=({"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "bf16"})),
    mgpu_training_form("gmt_geglu_il_recompute_k_f16", save="recompute", dtype="f16", index="offs", tail="untouched",
                       tile={"m": 64, "n": 128, "k": 64},
                       epilogue=({"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"},)),
    mgpu_training_form("gmt_swiglu_f32_bias_preact_mn", save="preact", b="mn", index="offs", tail="untouched",
                       epilogue=({"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "f32"})),
)}


# An fp8 forward's backward (session 29: in the output's dtype, w.r.t. the dequantized operands A scale_a and B[g]
# scale_b[g]; the forward reads B K-major only, MAJ001): e4m3 with a bf16 bias and GELU-tanh saved (offs, tail zero);
# e5m2 with SiLU recomputed (an untouched tail, a 64-row tile); e4m3 with an f32 bias alone (G = dOut, no pre kernel),
# an f16 output, an untouched tail. No e4m3 x e5m2 mix: the forward refuses it (PAL004: one input dtype up to jax 0.10). dgrad and wgrad are 16-bit GEMMs (the output's dtype) on tiles of their
# own: the forward's 128-byte K rows hold 64 of their elements.
FP8_BACKWARD = {"dgrad": {"tile": {"m": 128, "n": 128, "k": 64}}, "wgrad": {"tile": {"m": 128, "n": 128, "k": 64}}}
FP8_TILE = {"m": 128, "n": 128, "k": 128}
MGPU_FP8_TRAINING_FORMS: dict[str, dict] = {s["name"]: s for s in (
    mgpu_training_form("gmt_fp8_bias_gelu_tanh_preact", save="preact", dtype="fp8_e4m3", out="bf16", index="offs",
                       tile=FP8_TILE, epilogue=({"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                                                {"op": "activation", "fn": "gelu_tanh"}), **FP8_BACKWARD),
    mgpu_training_form("gmt_fp8_e5m2_silu_recompute", save="recompute", dtype="fp8_e5m2", out="bf16", tail="untouched",
                       tile={"m": 64, "n": 128, "k": 128},
                       epilogue=({"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "silu"}), **FP8_BACKWARD),
    mgpu_training_form("gmt_fp8_bias_f16", save="preact", dtype="fp8_e4m3", out="f16",
                       tail="untouched", tile=FP8_TILE,
                       epilogue=({"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}), **FP8_BACKWARD),
)}
