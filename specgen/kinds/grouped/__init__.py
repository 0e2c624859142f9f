"""The grouped GEMM kind (`kind = "grouped"`): one GEMM per group (a mixture-of-experts layer's experts) over
a ragged batch of rows, out[rows of group g] = epilogue(A[rows of g] @ B[g]). Its designs live under designs/,
one package per (backend, MMA family).

`DESIGN_PACKAGES` is this kind's line-up, as the GEMM kind's is (specgen/kinds/gemm/__init__.py says what a
design package holds). This module imports nothing, so that spec validation can read the designs' names.py
without importing a design.
"""

from __future__ import annotations

KIND = "grouped"  # the spec's `kind` (GroupedSpec's literal)

DESIGN_PACKAGES: tuple[str, ...] = (
    "specgen.kinds.grouped.designs.triton",
    "specgen.kinds.grouped.designs.cute_sm90",
    "specgen.kinds.grouped.designs.cute_sm100",  # Blackwell (tcgen05): compiled for sm_100a and read in SASS only
    "specgen.kinds.grouped.designs.pallas",
    "specgen.kinds.grouped.designs.pallas_mgpu",
)
