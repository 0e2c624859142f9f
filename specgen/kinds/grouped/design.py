"""What every grouped GEMM design shares beside the core's protocol: the dense GEMM kind's design base
(kinds/gemm/design.py: stages with `auto` sized from the design's memory, accumulator registers, the MMA tile,
TMA boxes), read over the same sections (tile, pipeline, schedule), which the grouped spec takes from the GEMM's
sections.py. A grouped design subclasses GroupedDesign and overrides what differs, as a GEMM design does."""

from __future__ import annotations

from specgen.kinds.gemm.design import GemmDesign


class GroupedDesign(GemmDesign):
    """The grouped kind's defaults: the GEMM's, one tile of one group at a time (a tile never spans groups, so
    the tile, its stages and its registers are a dense tile's). Size-selected variants render where a design
    says so (`renders_variants`: the Triton design's launcher picks one by M, every group's rows; CFG003 refuses
    them elsewhere); no split-K (GRP002)."""
