"""The identifiers the grouped CuTe sm90 design's modules use beyond the dense CuTe and grouped Triton designs'
(templates/grouped/cute/): checked by tests/test_hardening_names.py's rendered-module tokenizer."""

from __future__ import annotations

MODULE_NAMES: frozenset[str] = frozenset({"grouped_host", "grouped_kernel", "VARIANT_CONFIGS"})

# Every other identifier its code uses beyond the dense CuTe and grouped Triton designs' (an epilogue argument's
# names must avoid them): the group cursor, the predicated store's copy and coordinates, the persistent grid's bound;
# a gated epilogue's up tile, its SMEM, fragments and accumulator, and the output's width (B holds 2N columns).
RESERVED: frozenset[str] = frozenset({
    "N2", "acc_up", "bound", "ctas", "e", "gU", "gi", "live", "mIndex", "max_ctas", "mt", "nt",
    "num_bits_per_copy", "per_row", "r_up", "rc", "rows_m", "s2g", "sU", "st_crd", "store_vector", "subs_n", "tCrU",
    "tG", "tRS_up", "tS", "tUgU", "tUsU", "thr_s2g", "tiles_n",
})

ARG_DERIVED: tuple[str, ...] = ()
