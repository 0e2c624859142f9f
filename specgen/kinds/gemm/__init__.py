"""Designs: one package per (kernel kind, backend, MMA family), each holding all it knows.

`DESIGN_PACKAGES` is the registry's list: adding a design is adding its package here, one line. A
package holds `design.py` (its `DESIGN`: config, memory layout, register model, TMA boxes, plan,
render, compile hook), and where it has them `rules.py` (its envelope rules, a `RuleSet` named
`RULES`) and `names.py` (the identifiers its generated modules use: `MODULE_NAMES`, `RESERVED`,
`ARG_DERIVED`). This module imports nothing, so that spec validation can read the names modules
without importing any design (specgen/registry.py imports them).

Order matters once: a checked-only design (it lays out memory and carries rules, but renders nothing)
comes after the rendering designs, which take its targets over when they serve them.
"""

from __future__ import annotations

DESIGN_PACKAGES: tuple[str, ...] = (
    "specgen.designs.gemm_triton",
    "specgen.designs.gemm_pallas",
    "specgen.designs.gemm_cute_sm90",
    "specgen.designs.gemm_cute_sm100",  # Blackwell (tcgen05)
)
