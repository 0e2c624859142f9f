"""Boundary cases of the grouped Pallas Mosaic GPU design's own rules (designs/pallas_mgpu/rules.py: MGP001-MGP003), and the shared MAJ001 on a grouped fp8 B in
tests/test_rules.py's form (rule, target, spec overrides, expected), which that file collects; the dense rules it
shares are tested over grouped Mosaic GPU specs in test_grouped_mgpu.py."""

from __future__ import annotations

G = {"kind": "grouped"}  # MINIMAL_SPEC as a grouped spec
T = "pallas:gpu_sm90"
BF16 = {"a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}}
RK_MN = {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"}}  # the weight gradient's x, dy
FP8 = {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"}, "out": {"dtype": "bf16"},
       "tile": {"m": 128, "n": 256, "k": 128}}

CASES: list[tuple[str, str, dict, object]] = [
    # MGP001: the ragged-K kernel masks a group's edge K rows in the wgmma layout (rows in 64s): tile.k a multiple
    # of 64 where A or B is stored with K along its rows (M- or N-major); K-major ones take any tile.k (MMA001's)
    ("MGP001", T, {**G, "groups": {"ragged": "m"}, "tile": {"m": 128, "n": 128, "k": 32}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, **RK_MN, "tile": {"m": 128, "n": 128, "k": 128}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, "tile": {"m": 128, "n": 128, "k": 32}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, **RK_MN, "tile": {"m": 128, "n": 128, "k": 32}},
     ("error", ["tile.k = 32 with A and B stored K-rows-first", "rows come in groups of 64"], ("tile", "k"))),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, "b": {"dtype": "bf16", "major": "mn"},
                   "tile": {"m": 128, "n": 128, "k": 32}},
     ("error", ["tile.k = 32 with B stored K-rows-first"], ("tile", "k"))),
    # ... and a K-major B's warpgroup half has tile.n / 2 rows: 64 (tile.n 128) masks, 32 does not
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, **RK_MN, "tile": {"m": 128, "n": 64, "k": 64}}, None),
    ("MGP001", T, {**G, "groups": {"ragged": "k"}, "tile": {"m": 64, "n": 64, "k": 64}},
     ("error", ["tile.n = 64 with B stored K-major", "32 x 64 half"], ("tile", "n"))),
    # MGP002: a subtile row of out spans a multiple of 128 B (64 bf16 columns: tile.n >= 128)
    ("MGP002", T, {**G, **BF16, "tile": {"m": 128, "n": 128, "k": 64}}, None),
    ("MGP002", T, {**G, **BF16, "tile": {"m": 128, "n": 64, "k": 64}},
     ("error", ["an output subtile row is 32 x 2 B = 64 B"], ("tile", "n"))),
    # ... not the ragged-K kernel's (whole subtiles from a slot's start: tile.n = 64 lowers there)
    ("MGP002", T, {**G, **RK_MN, "groups": {"ragged": "k"}, "tile": {"m": 128, "n": 64, "k": 64}}, None),
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
