"""The dense GEMM kind (`kind = "gemm"`): out = epilogue(A @ B), batched or not. Its designs live under
designs/, one package per (backend, MMA family), each holding all it knows.

`DESIGN_PACKAGES` is this kind's line-up: adding a design of the kind is adding its package here, one
line. A package holds `design.py` (its `DESIGN`: config, memory layout, register model, TMA boxes, plan,
render, compile hook), and where it has them `rules.py` (its envelope rules, a `RuleSet` named `RULES`)
and `names.py` (the identifiers its generated modules use: `MODULE_NAMES`, `RESERVED`, `ARG_DERIVED`).
This module imports nothing, so that spec validation can read the names modules without importing any
design (specgen/registry.py imports them). designs/cute_export is no design: the C++ export both CuTe
designs name as their `export_hook`.

Order matters once: a checked-only design (it lays out memory and carries rules, but renders nothing)
comes after the rendering designs, which take its targets over when they serve them.
"""

from __future__ import annotations

KIND = "gemm"  # the spec's `kind` (GemmSpec's literal)

DESIGN_PACKAGES: tuple[str, ...] = (
    "specgen.kinds.gemm.designs.triton",
    "specgen.kinds.gemm.designs.pallas",
    "specgen.kinds.gemm.designs.cute_sm90",
    "specgen.kinds.gemm.designs.cute_sm100",  # Blackwell (tcgen05)
)
