"""The identifiers the grouped CuTe sm90 design's modules use beyond the dense CuTe and grouped Triton designs'
(templates/grouped/cute/): checked by tests/test_hardening_names.py's rendered-module tokenizer."""

from __future__ import annotations

# (K_ALIGN: ragged K's 16-byte row count of a K-major operand)
# A training module's (train_sm90.jinja): each backward GEMM's kernel, host and fake arguments under its suffix, the
# columns pass, the GEMMs' pre helper and the 3-D buffer checks of wgrad's output (and the autograd layer's `_run`
# call, which reads the sizes index's name at the top level).
MODULE_NAMES: frozenset[str] = frozenset({
    "K_ALIGN", "grouped_host", "grouped_kernel", "VARIANT_CONFIGS", "COLS_THREADS", "COLS_UNROLL", "COLS_VEC", "COLS_VEC_THREADS",
    "_cols_fake_args", "_cols_host",
    "_cols_kernel", "_fake_args_dgrad", "_fake_args_pre", "_fake_args_wgrad", "_pre",
    "group_sizes", "grouped_host_dgrad", "grouped_host_pre", "grouped_host_wgrad", "grouped_kernel_dgrad",
    "grouped_kernel_pre", "grouped_kernel_wgrad",
})

# Every other identifier its code uses beyond the dense CuTe and grouped Triton designs' (an epilogue argument's
# names must avoid them): the group cursor, the predicated store's copy and coordinates and out's view for it (the TMA
# store's are the dense design's), the persistent grid's bound;
# a gated epilogue's up tile, its SMEM, fragments and accumulator, and the output's width (B holds 2N columns);
# ragged K's cursor (a work index's group, its K rows, the first K tile's row and lead), its boundary tile's barrier and
# zeroed rows' end, a wgmma block's rows, a tile's last row; the columns pass's gated bias (act_rows), its fragment
# and G's gate / up pairs, the fake arguments' 2N; an fp8 forward's backward (session 32): the columns pass's second G
# (wgrad's G_a), its scales' fragments, the 16-bit copies of A and B, the unread GEMM arguments' stand-ins.
RESERVED: frozenset[str] = frozenset({
    "a16", "b16", "dst2", "mDst2", "mScaleA", "mScaleB", "row_scales", "stubs", "y2",
    "N2", "acc_up", "bias_frag", "g_pairs", "gbias", "mBias", "vectors", "wide", "fake", "mDst", "bound", "ctas", "e", "gU", "gi", "gw", "k_len", "live", "mIndex", "mOutPred", "max_ctas", "mt", "nt",
    "num_bits_per_copy", "per_row", "r_up", "rc", "row_end", "rows_m", "s2g", "sU", "st_crd", "store_vector", "subs_n",
    "tCrU", "tG", "tRS_up", "tS", "tUgU", "tUsU", "thr_s2g", "tiles_m", "tiles_mn", "tiles_n", "zero_barrier", "z_end",
})

ARG_DERIVED: tuple[str, ...] = ()
