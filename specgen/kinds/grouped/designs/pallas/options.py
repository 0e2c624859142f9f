"""The grouped Pallas TPU design's option section, `pallas` in a grouped spec (and in a per_target table of a
pallas target): the model the kind's spec (specgen/kinds/grouped/spec.py) lists among its sections. The dense
kind's `pallas` section less its Mosaic GPU key (`swap_ab`: no grouped Mosaic GPU design yet), so that the
dense VMEM001 rule reads it as it reads the dense one. Imports only the spec models."""

from __future__ import annotations

from specgen.kinds.gemm.designs.pallas.options import MAX_VMEM_LIMIT
from specgen.spec.models import Strict, bounded
from specgen.spec.targets import Backend

SECTION = "pallas"
# The MMA families of this backend whose targets the design serves (the TPUs; no grouped Mosaic GPU design yet): the spec refuses the
# others without importing the design (tests/grouped/test_kind.py pins them to the design's keys).
MMA: tuple[str, ...] = ("mxu",)
BACKEND = Backend.pallas


class GroupedPallasOptions(Strict):
    # Scoped VMEM limit to request; default: what the plan needs plus 25%, capped at the chip's VMEM.
    vmem_limit_bytes: bounded(MAX_VMEM_LIMIT) | None = None


OPTIONS = GroupedPallasOptions
