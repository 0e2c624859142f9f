"""The grouped Pallas designs' option section, `pallas` in a grouped spec (and in a per_target table of a
pallas target): the model the kind's spec (specgen/kinds/grouped/spec.py) lists among its sections, read by the
TPU design (this package) and the Mosaic GPU one (designs/pallas_mgpu, which has no options of its own). The dense
kind's `pallas` section less its Mosaic GPU key (`swap_ab`: the grouped Mosaic GPU kernel never swaps), so that
the dense VMEM001 and OPT001 rules read it as they read the dense one. Imports only the spec models."""

from __future__ import annotations

from specgen.kinds.gemm.designs.pallas.options import MAX_VMEM_LIMIT
from specgen.spec.models import Strict, bounded
from specgen.spec.targets import Backend

SECTION = "pallas"
# The MMA families of this backend whose targets the grouped Pallas designs serve (the TPUs, and Hopper's wgmma:
# designs/pallas_mgpu): the spec refuses the others without importing a design (tests/grouped/test_kind.py pins
# them to the designs' keys).
MMA: tuple[str, ...] = ("mxu", "wgmma")
BACKEND = Backend.pallas


class GroupedPallasOptions(Strict):
    # Scoped VMEM limit to request; default: what the plan needs plus 25%, capped at the chip's VMEM.
    vmem_limit_bytes: bounded(MAX_VMEM_LIMIT) | None = None


OPTIONS = GroupedPallasOptions
