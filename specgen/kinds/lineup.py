"""The kernel kinds' line-up: `KINDS`, one line per kind package, and `DESIGN_PACKAGES`, every kind's designs
in order, which specgen/registry.py, the rule table and the names check read. This module and the kind
packages import nothing else, so that spec validation can read them without importing a design."""

from __future__ import annotations

from specgen.kinds import gemm

KINDS = (gemm,)
DESIGN_PACKAGES: tuple[str, ...] = tuple(p for kind in KINDS for p in kind.DESIGN_PACKAGES)
