"""Boundary cases of the grouped Pallas TPU design's own rules (designs/pallas/rules.py: GRP201, GRP204, GRP205; GRP202 and GRP203 retired) in tests/test_rules.py's
form (rule, target, spec overrides, expected), which that file collects; the dense rules it shares are tested over
a grouped TPU spec in test_grouped_tpu_rules.py."""

from __future__ import annotations

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec

CASES: list[tuple[str, str, dict, object]] = [
    # GRP002 on a TPU target: the static grid's wording
    ("GRP002", "pallas:tpu_v5e", {**G, "schedule": {"persistent": False}},
     ("warning", ["runs a static grid over every group's tile visits"], ("schedule", "persistent"))),
    # GRP201: the TPU kernel accumulates in an f32 VMEM scratch
    ("GRP201", "pallas:tpu_v5e", {**G, "accumulator": "f32"}, None),
    ("GRP201", "pallas:tpu_v6e", {**G, "accumulator": "f16", "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16"},
                                  "out": {"dtype": "f16"}},
     ("error", ["accumulator = f16: the pallas:tpu_v6e grouped kernel accumulates in an f32 VMEM scratch"],
      ("accumulator",))),
    # TRN001: the TPU grouped design renders a ragged-M spec's backward (session 26), a gated op's too and an fp8
    # forward's (session 27: halves, B either major, a bias after the gate or not; the rowwise scales first)
    ("TRN001", "pallas:tpu_v6e", {**G, "training": {"save": "preact"}, "epilogue": [
        {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]}, None),
    ("TRN001", "pallas:tpu_v5e", {**G, "training": {"save": "recompute"}, "epilogue": [
        {"op": "gated", "fn": "silu", "layout": "halves"}]}, None),
    ("TRN001", "pallas:tpu_v6e", {**G, "training": {"save": "preact"}, "b": {"dtype": "bf16", "major": "mn"},
                                  "epilogue": [{"op": "gated", "fn": "gelu_tanh", "layout": "halves"},
                                               {"op": "bias", "dtype": "f32"}]}, None),
    ("TRN001", "pallas:tpu_v7x", {**G, "training": {"save": "preact"}, "a": {"dtype": "fp8_e4m3", "major": "k"},
                                  "b": {"dtype": "fp8_e4m3", "major": "k"}, "out": {"dtype": "bf16"},
                                  "epilogue": [{"op": "scale", "by": "rowcol"}]}, None),
    # GRP205: an fp8 forward's backward reads the 8-bit A as stored in wgrad: 32-row blocks
    ("GRP205", "pallas:tpu_v7x", {**G, "training": {"save": "preact", "wgrad": {"tile": {"m": 128, "n": 128, "k": 32}}},
                                  "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"},
                                  "out": {"dtype": "bf16"}, "tile": {"m": 32, "n": 128, "k": 128},
                                  "epilogue": [{"op": "scale", "by": "rowcol"}]}, None),
    ("GRP205", "pallas:tpu_v5e", {**G, "training": {"save": "recompute", "wgrad": {"tile": {"m": 128, "n": 128, "k": 16}}},
                                  "a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"},
                                  "out": {"dtype": "bf16"}, "tile": {"m": 32, "n": 128, "k": 128},
                                  "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "silu"}]},
     ("error", ["training.wgrad: the backward reads A (fp8_e5m2) as stored in blocks of 16 rows (tile.k = 16), not a "
                "multiple of the 32-row sublane tile of an 8-bit block on pallas:tpu_v5e"], ("training", "wgrad", "tile", "k"))),
    # GRP204: a gated B as halves (K-major: two (tile.n, tile.k) blocks of B's (G, 2, N, K) view; N-major: blocks j and
    # j + N / tile.n of B (G, K, 2N), N checked by the launcher); interleaved refused; no gated op: nothing
    ("GRP204", "pallas:tpu_v5e", {**G, "b": {"dtype": "bf16", "major": "mn"}}, None),
    ("GRP204", "pallas:tpu_v5e", {**G, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"},
                                                    {"op": "bias", "dtype": "f32"}]}, None),
    ("GRP204", "pallas:tpu_v6e", {**G, "epilogue": [{"op": "gated", "fn": "gelu", "layout": "interleaved"}]},
     ("error", ["a gated epilogue (gelu, interleaved): gate column j is B's row 2j",
                "a block of 1 row on the sublane dim of a (G, N, 2, K) view"], ("epilogue", 0, "layout"))),
    ("GRP204", "pallas:tpu_v5e", {**G, "b": {"dtype": "bf16", "major": "mn"},
                                  "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]}, None),
    ("GRP204", "pallas:tpu_v5e", {**G, "b": {"dtype": "bf16", "major": "mn"},
                                  "epilogue": [{"op": "gated", "fn": "silu", "layout": "interleaved"}]},
     ("error", ["a gated epilogue (silu, interleaved): gate column j is B's row 2j"], ("epilogue", 0, "layout"))),
]
