"""Grouped spec forms for the CuTe sm100 design (specgen/kinds/grouped/designs/cute_sm100): `CUTE_SM100_FORMS`, one
spec per template branch on cute:sm100 (both index formats and tails, both B majors, every epilogue op it renders:
a per-group bias and column scale, a router's per-row scale, scalars, activations, clamp, cast; bf16, f16 and f32
outputs; 128- and 64-row tiles, a 256-column tile filling TMEM's 512 columns with two accumulator stages, 16-column
epilogue subtiles with one SMEM buffer; fp8: e5m2 A beside an e4m3 N-major B, the rowwise scales then the chain).
Compiled for sm_100a on the CPU and read in SASS by
tests/grouped/test_cute_sm100.py (no Blackwell GPU runs them); the name-hardening tests tokenize them."""

from __future__ import annotations

from specgen.kinds.grouped.testing.specs import spec

CUTE_SM100 = {"targets": ["cute:sm100"], "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
              "out": {"dtype": "bf16"}}

CUTE_SM100_FORMS: dict[str, dict] = {s["name"]: s for s in (
    spec("gb_offs_untouched_kk", **CUTE_SM100, tile={"m": 128, "n": 128, "k": 64}),
    spec("gb_sizes_zero_kmn", **{**CUTE_SM100, "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "mn"},
                                 "out": {"dtype": "f32"}}, groups={"index": "sizes", "tail": "zero"},
         tile={"m": 128, "n": 64, "k": 64},
         epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "scale", "by": "row", "name": "router"},
                   {"op": "activation", "fn": "silu"}]),
    spec("gb_every_op", **CUTE_SM100, tile={"m": 128, "n": 256, "k": 64},
         epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "scale", "by": "row", "name": "router"},
                   {"op": "scale", "by": "col", "name": "w"}, {"op": "scale", "by": "scalar", "value": 0.5},
                   {"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "activation", "fn": "gelu_tanh"},
                   {"op": "clamp", "min": -2.0, "max": 2.0}, {"op": "cast", "dtype": "f16"}]),
    spec("gb_m64_narrow_mn", **{**CUTE_SM100, "b": {"dtype": "bf16", "major": "mn"}, "out": {"dtype": "f16"}},
         groups={"index": "offs", "tail": "zero"}, tile={"m": 64, "n": 112, "k": 64},
         pipeline={"epilogue_stages": 1}, epilogue=[{"op": "activation", "fn": "relu"}]),
    # fp8 (tcgen05 kind::f8f6f4: the formats mix, an 8-bit B either major): torch._scaled_grouped_mm's rowwise
    # scales on the f32 accumulator, then a per-group bias and SiLU; 128 bytes of K a stage, a 64-row tile. The
    # catalogue's moe_fp8_rowwise (e4m3, K-major, 128x256) compiles with the catalogue (tests/backends/cute/
    # test_cute_sm100.py).
    spec("gb_fp8_mixed_mn", **{**CUTE_SM100, "a": {"dtype": "fp8_e5m2", "major": "k"},
                               "b": {"dtype": "fp8_e4m3", "major": "mn"}, "out": {"dtype": "f16"}},
         groups={"index": "sizes", "tail": "zero"}, tile={"m": 64, "n": 128, "k": 128},
         epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
)}

# The guard tests' kernel (specgen/kinds/grouped/testing/guards.py CASES: f16, offs, a per-group bias, a router
# scale), on cute:sm100.
GUARD_SM100 = spec("gb_guards", targets=["cute:sm100"], tile={"m": 128, "n": 128, "k": 64},
                   epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "scale", "by": "row", "name": "router"}])
