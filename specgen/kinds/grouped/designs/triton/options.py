"""The grouped Triton design's option section, `triton` in a grouped spec: the model the kind's spec
(specgen/kinds/grouped/spec.py) lists among its sections. Imports only the spec models."""

from __future__ import annotations

from specgen.spec.models import Strict, bounded
from specgen.spec.targets import Backend

SECTION = "triton"
BACKEND = Backend.triton


class GroupedTritonOptions(Strict):
    # Triton takes at most 32 warps (POW001 says so with the numbers); the bound is a sanity one.
    num_warps: bounded(64) = 8


OPTIONS = GroupedTritonOptions
