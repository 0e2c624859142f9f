"""Boundary cases of the grouped Pallas Mosaic GPU design's own rules (designs/pallas_mgpu/rules.py: MGP001-MGP003), and the shared MAJ001 on a grouped fp8 B in
tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects; the dense rules it
shares are tested over grouped Mosaic GPU specs in test_grouped_mgpu.py."""

from __future__ import annotations

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec
T = "pallas:gpu_sm90"
BF16 = {"a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}}
FP8 = {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"}, "out": {"dtype": "bf16"},
       "tile": {"m": 128, "n": 256, "k": 128}}

CASES: list[tuple[str, str, dict, object]] = [
    # MGP001: groups of rows only
    ("MGP001", T, {**G, "groups": {"ragged": "m"}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}},
     ("error", ["groups.ragged = 'k': the pallas:gpu_sm90 grouped kernel groups rows (ragged M) only"],
      ("groups", "ragged"))),
    # MGP002: a subtile row of out spans a multiple of 128 B (64 bf16 columns: tile.n >= 128)
    ("MGP002", T, {**G, **BF16, "tile": {"m": 128, "n": 128, "k": 64}}, None),
    ("MGP002", T, {**G, **BF16, "tile": {"m": 128, "n": 64, "k": 64}},
     ("error", ["an output subtile row is 32 x 2 B = 64 B"], ("tile", "n"))),
    # MGP003: 1x1 clusters (fp8 with its rowwise scales renders: no finding)
    ("MGP003", T, {**G, **BF16}, None),
    ("MGP003", T, {**G, **FP8, "epilogue": [{"op": "scale", "by": "rowcol"}]}, None),
    ("MGP003", T, {**G, **BF16, "cluster": {"m": 2, "n": 1}},
     ("error", ["cluster 2x1: the pallas:gpu_sm90 grouped kernel launches one CTA per cluster"], ("cluster",))),
    # MAJ001 (the GEMM kind's, shared): an fp8 B is read K-major, (G, N, K) as stored (torch._scaled_grouped_mm's
    # column-major B); an MN-major one is refused (jax mosaic/gpu/wgmma.py: "Only f16 WGMMA supports transposes")
    ("MAJ001", T, {**G, **FP8}, None),
    ("MAJ001", T, {**G, **FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}},
     ("error", ["B is fp8_e4m3 and MN-major: wgmma transposes only 16-bit operands (fp8_e4m3: 8-bit)"], ("b", "major"))),
]
