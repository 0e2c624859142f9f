"""The grouped Triton design's option section, `triton` in a grouped spec: the model the kind's spec
(specgen/kinds/grouped/spec.py) lists among its sections. Imports only the spec models."""

from __future__ import annotations

from specgen.spec.models import Strict, bounded
from specgen.spec.targets import Backend

SECTION = "triton"
# The MMA families of this backend whose targets the design serves (sm90 and sm100): the spec refuses the
# others without importing the design (tests/grouped/test_kind.py pins them to the design's keys).
MMA: tuple[str, ...] = ("wgmma", "tcgen05")
BACKEND = Backend.triton


class GroupedTritonOptions(Strict):
    # Triton takes at most 32 warps (POW001 says so with the numbers); the bound is a sanity one.
    num_warps: bounded(64) = 8
    # A and B load through host-built TMA descriptors (A over every group's rows, B one box of one expert's
    # weight), the output through masked pointer stores; false: masked pointer loads too (the H200's record:
    # bench/results/2026-11-27-h200-grouped-triton.md, "How it got there").
    tma: bool = True
    # The MMA computes the tile transposed (out^T = B^T A^T): tile.n on its row side, a group's few rows on its
    # column side, where wgmma goes down to 8 (and Triton's tl.dot to 16): decode's configs, a few rows an expert.
    swap_ab: bool = False


OPTIONS = GroupedTritonOptions
