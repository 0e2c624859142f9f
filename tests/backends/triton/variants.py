"""The Triton design's test kernels under the CPU interpreter: the numerics variants (every catalogue kernel
as its interpreter variant, bf16 / fp8 -> f16, and as an f32 variant, plus extra specs for what the
catalogue does not cover: every epilogue op, both major modes of A and B in both kernel kinds (one program
per tile with pointer loads; persistent with TMA descriptors; persistent with pointer loads), raster along
N, the subtiled TMA store, an f16 accumulator and int8 -> int32) with their problem shapes, and the
guard tests' kernels by role (specgen/kinds/gemm/testing/guards.py: ROLES)."""

from __future__ import annotations

import json

from kernels import catalogue, interpreter_variant

from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.guards import Call

CATALOGUE = catalogue()
TILE = {"m": 16, "n": 32, "k": 32}  # small, so M = 150 gives 10 row tiles: more than GROUP_M = 8


def is_tma(spec: dict) -> bool:
    return spec["triton"]["tma"]


def f32_variant(spec: dict) -> dict:
    """The same kernel on f32 operands (input_precision ieee), f32 accumulator, f32 out and arguments."""
    spec = json.loads(json.dumps(spec))
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = "f32"
    spec["accumulator"] = "f32"
    for op in spec["epilogue"]:
        if "dtype" in op:
            op["dtype"] = "f32"
    spec["name"] += "_f32"
    return spec


def extra(name: str, *, a: str = "k", b: str = "k", dtype: str = "f16", out: str | None = None,
          acc: str = "f32", epilogue: tuple = (), batch: bool = False, persistent: bool = False,
          tma: bool | None = None, raster: str = "along_m", group_m: int = 8, subtile: bool = False,
          variants: list | None = None) -> dict:
    """An extra spec; `tma` defaults to the schedule's usual form (persistent kernels use TMA); `variants`
    replaces the base spec's size-selected variants (gemm_bf16's decode tiles) where given."""
    base = interpreter_variant(CATALOGUE["gemm_bf16"])
    spec = {
        **base,
        "name": f"x_{name}",
        "description": "",
        "a": {"dtype": dtype, "major": a},
        "b": {"dtype": dtype, "major": b},
        "out": {"dtype": out or dtype},
        "accumulator": acc,
        "batch": batch,
        "epilogue": [dict(op) for op in epilogue],
        "tile": dict(TILE),
        "schedule": {"persistent": persistent, "raster": raster, "group_m": group_m},
        "triton": {"num_warps": 4, "tma": persistent if tma is None else tma, "epilogue_subtile": subtile},
    }
    if variants is not None:
        spec["variants"] = variants
    return GemmSpec.model_validate(spec).model_dump(mode="json")  # with every default spelled out


GATED_DECODE = [{"when": {"m_max": 16}, "tile": {"m": 16, "n": 16, "k": 64}}]  # the "m1" shape runs it

EXTRAS = [
    # One program per tile, pointer loads.
    extra("ptr_mn_k", a="mn", b="k", raster="along_n", group_m=2, epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16", "name": "bias_m"},
        {"op": "scale", "by": "row"},
        {"op": "activation", "fn": "silu"},
        {"op": "clamp", "min": -0.1, "max": 0.6},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("ptr_k_mn", a="k", b="mn", epilogue=(
        {"op": "scale", "by": "scalar", "value": 0.5},
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "activation", "fn": "sigmoid"},
        {"op": "scale", "by": "col"},
        {"op": "clamp", "max": 0.4},
    )),
    extra("ptr_mn_mn", a="mn", b="mn", epilogue=(
        {"op": "scale", "by": "rowcol"},
        {"op": "activation", "fn": "gelu"},
        {"op": "residual", "dtype": "f16", "beta": -0.5},
    )),
    # Persistent, TMA descriptors.
    extra("tma_mn_k", a="mn", b="k", persistent=True, raster="along_n", subtile=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "scale", "by": "col", "name": "gain"},
        {"op": "activation", "fn": "gelu"},
        {"op": "residual", "dtype": "f16", "beta": 0.5},
        {"op": "clamp", "min": -0.25},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("tma_mn_mn", a="mn", b="mn", persistent=True, group_m=4, epilogue=(
        {"op": "scale", "by": "scalar"},
        {"op": "activation", "fn": "silu"},
        {"op": "residual", "dtype": "f32", "beta": -1.0, "name": "skip"},
        {"op": "clamp", "min": -1.0, "max": 1.0},
    )),
    extra("tma_k_mn", a="k", b="mn", persistent=True, epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16"},
        {"op": "scale", "by": "row"},
        {"op": "activation", "fn": "sigmoid"},
        {"op": "clamp", "max": 0.5},
    )),
    extra("tma_k_k_relu", persistent=True, subtile=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "relu"},
    )),
    # Persistent, pointer loads (triton.tma = false).
    extra("pptr_mn_mn", a="mn", b="mn", persistent=True, tma=False, raster="along_n", epilogue=(
        {"op": "bias", "along": "m", "dtype": "f32"},
        {"op": "activation", "fn": "relu"},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("pptr_k_k", persistent=True, tma=False, epilogue=(
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "scale", "by": "scalar", "name": "gain"},
    )),
    # Batched: one program per tile; persistent pointer; persistent TMA with the subtiled store.
    extra("bmm_ptr_mn_k", a="mn", b="k", batch=True, raster="along_n", epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "residual", "dtype": "f16"},
    )),
    extra("bmm_pptr_k_mn", a="k", b="mn", batch=True, persistent=True, tma=False, epilogue=(
        {"op": "scale", "by": "scalar"},
        {"op": "residual", "dtype": "f16", "beta": 0.5},
        {"op": "activation", "fn": "relu"},
    )),
    extra("bmm_tma_mn_k", a="mn", b="k", batch=True, persistent=True, subtile=True, epilogue=(
        {"op": "scale", "by": "rowcol"},
        {"op": "residual", "dtype": "f16"},
        {"op": "clamp", "min": -1.0, "max": 1.0},
    )),
    extra("bmm_tma_k_mn", a="k", b="mn", batch=True, persistent=True, raster="along_n", epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16"},
        {"op": "activation", "fn": "sigmoid"},
    )),
    # One program per tile, TMA descriptors.
    extra("tile_tma_k_k", tma=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "gelu_tanh"},
    )),
    extra("tile_tma_mn_mn", a="mn", b="mn", tma=True, raster="along_n", subtile=True, epilogue=(
        {"op": "residual", "dtype": "f16", "beta": 2.0},
    )),
    extra("bmm_tile_tma_k_mn", a="k", b="mn", batch=True, tma=True, epilogue=(
        {"op": "scale", "by": "rowcol"},
    )),
    # A gated epilogue (SwiGLU, GeGLU): B (K, 2N), both layouts, in each kernel form; a decode-sized variant
    # of its own (gemm_bf16's swap A and B or split K, which EPI002 refuses with a gated op).
    extra("gated_ptr_halves", variants=GATED_DECODE, epilogue=(
        {"op": "gated", "fn": "silu", "layout": "halves"},
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "clamp", "min": -2.0, "max": 2.0},
    )),
    extra("gated_ptr_il_mn", variants=GATED_DECODE, a="mn", b="mn", raster="along_n", group_m=2, epilogue=(
        {"op": "gated", "fn": "gelu", "layout": "interleaved"},
        {"op": "scale", "by": "col"},
    )),
    extra("gated_pptr_il_k", variants=GATED_DECODE, persistent=True, tma=False, epilogue=(
        {"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"},
    )),
    extra("gated_tma_halves_mn", variants=GATED_DECODE, b="mn", persistent=True, subtile=True, epilogue=(
        {"op": "gated", "fn": "gelu_tanh", "layout": "halves"},
        {"op": "residual", "dtype": "f16", "beta": 0.5},
    )),
    extra("gated_tma_il_k", variants=GATED_DECODE, a="mn", persistent=True, epilogue=(
        {"op": "gated", "fn": "silu", "layout": "interleaved"},
        {"op": "scale", "by": "row"},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("gated_tile_tma_halves_k", variants=GATED_DECODE, tma=True, epilogue=(
        {"op": "gated", "fn": "gelu", "layout": "halves"},
    )),
    extra("gated_tile_tma_il_mn", variants=GATED_DECODE, b="mn", tma=True, raster="along_n", epilogue=(
        {"op": "gated", "fn": "silu", "layout": "interleaved"},
        {"op": "bias", "along": "m", "dtype": "f32"},
    )),
    extra("gated_bmm_tma_halves", variants=GATED_DECODE, a="mn", batch=True, persistent=True, epilogue=(
        {"op": "gated", "fn": "silu", "layout": "halves"},
        {"op": "residual", "dtype": "f16"},
    )),
    extra("gated_bmm_ptr_il_mn", variants=GATED_DECODE, b="mn", batch=True, epilogue=(
        {"op": "gated", "fn": "gelu", "layout": "interleaved"},
    )),
    extra("gated_f16acc", variants=GATED_DECODE, b="mn", acc="f16", epilogue=({"op": "gated", "fn": "silu", "layout": "halves"},)),
    # Accumulator and operand types.
    extra("f16acc", b="mn", acc="f16", epilogue=({"op": "bias", "along": "n", "dtype": "f16"},)),
    extra("int8_ptr", dtype="int8", out="int32", acc="int32"),
    extra("int8_tma", dtype="int8", out="int32", acc="int32", persistent=True),
    # f32 out with a rounding cast in the middle of the chain (on exactly representable data, below).
    extra("cast_f32", a="mn", b="k", dtype="f32", epilogue=(
        {"op": "cast", "dtype": "f16"},
        {"op": "bias", "along": "n", "dtype": "f32"},
    )),
    extra("cast_f32_tma", a="k", b="mn", dtype="f32", persistent=True, epilogue=(
        {"op": "activation", "fn": "relu"},
        {"op": "cast", "dtype": "f16"},
    )),
]

VARIANTS: dict[str, dict] = {}
for _name, _spec in CATALOGUE.items():
    if not any(t.startswith("triton:") for t in _spec["targets"]):  # TPU-only specs: no Triton kernel
        continue
    VARIANTS[f"{_name}-f16"] = interpreter_variant(_spec, tile=dict(TILE))
    VARIANTS[f"{_name}-f32"] = f32_variant(VARIANTS[f"{_name}-f16"])
for _spec in EXTRAS:
    VARIANTS[_spec["name"]] = _spec
# The f32 forms tell gelu from gelu_tanh and catch an f32 epilogue rounding anywhere in the chain.
for _key in ("x_ptr_mn_k", "x_ptr_mn_mn", "x_tma_mn_k", "x_tma_mn_mn", "x_bmm_tma_mn_k", "x_gated_ptr_il_mn",
             "x_gated_tma_halves_mn", "x_gated_pptr_il_k"):
    VARIANTS[_key + "_f32"] = f32_variant(VARIANTS[_key])
# Exactly representable data (the f32 accumulation is exact, so a cast rounds like the reference's).
EXACT = {"x_cast_f32", "x_cast_f32_tma"}

# Problem shapes: (M, N for pointer kernels, N for TMA kernels, K, layout). "strided": every operand's
# leading stride is wider than its extent (the padding poisoned); "dense": as tight as the kernel allows.
SHAPES = {
    "ragged": (70, 45, 56, 40, "dense"),  # M, N, K all off the tile; K = 32 + a tail
    "m1": (1, 40, 40, 72, "strided"),
    "n1": (33, 1, 8, 50, "strided"),  # TMA rows must be 16 bytes: N = 8 there
    "ksmall": (20, 24, 24, 5, "strided"),  # K < tile.k, odd; vectors passed as (M, 1) and (1, N)
    "groups": (150, 40, 40, 24, "dense"),  # 10 row tiles of 16: two GROUP_M groups, the second partial
    "k1": (17, 9, 16, 1, "strided"),
    "deepk": (40, 33, 40, 100, "dense"),  # four K steps, the last a tail of 4
}


# ---------------------------------------------------------------------------------------------------
# The guard tests' kernels, by role


def _variant(base: str, name: str, **changes: object) -> dict:
    spec = interpreter_variant(CATALOGUE[base], name=name, tile=dict(TILE), **changes)
    return GemmSpec.model_validate(spec).model_dump(mode="json")


KERNELS = {
    # pointer loads, A mn-major, B k-major, scalar alpha, residual c
    "ptr": _variant("gemm_residual_bf16", "guard_residual"),
    # pointer loads, A k-major, B mn-major
    "relu": _variant("gemm_relu_f16", "guard_relu", triton={"num_warps": 8, "tma": False}),
    # persistent TMA, both k-major, scale_a (M,) and scale_b (N,)
    "tma": _variant("gemm_fp8_rowwise", "guard_rowwise"),
    # persistent TMA with a bias (N,)
    "bias": _variant("gemm_bias_gelu_bf16", "guard_bias_gelu"),
    # batched persistent TMA, B mn-major
    "bmm": _variant("bmm_bf16", "guard_bmm"),
    # batched, one program per tile, pointer loads, with a batched residual
    "bmm_res": _variant("bmm_bf16", "guard_bmm_residual", schedule={"persistent": False}, triton={"tma": False},
                        epilogue=[{"op": "residual", "dtype": "f16", "beta": 0.5}]),
}


def guard_call(key: str, load_kernel) -> Call:
    """A valid call of the guard kernel `key` (its Triton module, loaded through `load_kernel`)."""
    return Call(KERNELS[key], load_kernel(KERNELS[key]))
