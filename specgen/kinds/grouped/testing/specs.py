"""Grouped spec forms the tests render: `spec(**changes)` over a small f16 base (interpreter-safe dtypes, a
16x16x16 tile so that sizes stay small and a tile spans several groups), and `FORMS`, one spec per template
branch (both index formats, both tails, both B majors, every epilogue op the kind takes, f32 and an f16
accumulator, TMA and pointer loads, a swapped size-selected variant, gated epilogues of both layouts), which the
name-hardening tests tokenize and the numerics run."""

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

# The guard tests' kernel (guards.py): offs, a per-group f16 bias and a per-row scale named `router`.
GUARD_SPEC = spec("g_guards", epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "scale", "by": "row", "name": "router"}])
