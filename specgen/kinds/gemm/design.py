"""What every GEMM design shares beside the core's protocol (specgen/design.py): the kind's TMA boxes (A, B
and the output tile, by each operand's major mode), the tile its MMA computes, and the bytes one pipeline
stage of A and B holds. Each design under designs/ subclasses GemmDesign and overrides what differs."""

from __future__ import annotations

from specgen.design import DesignBase
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolved import TmaBox
from specgen.targets import TargetInfo

DEFAULT_EPILOGUE_STAGES = 2


def tma_boxes(spec: GemmSpec) -> tuple[TmaBox, ...]:
    """Every TMA-moved tile: (outer, inner) in elements, by the operand's major mode."""
    t = spec.tile
    a = (t.m, t.k) if spec.a.major == "k" else (t.k, t.m)
    b = (t.n, t.k) if spec.b.major == "k" else (t.k, t.n)
    return (TmaBox("A", *a, spec.a.dtype.bytes, ("a",)), TmaBox("B", *b, spec.b.dtype.bytes, ("b",)),
            TmaBox("out", t.m, t.n, spec.out.dtype.bytes, ("out",)))


def ab_stage_bytes(spec: GemmSpec) -> int:
    """One pipeline stage: an A tile and a B tile."""
    t = spec.tile
    return t.m * t.k * spec.a.dtype.bytes + t.k * t.n * spec.b.dtype.bytes


def epilogue_stages(spec: GemmSpec) -> int:
    s = spec.pipeline.epilogue_stages
    return DEFAULT_EPILOGUE_STAGES if s == "auto" else s


class GemmDesign(DesignBase):
    """The GEMM kind's defaults for the protocol's kind-shaped hooks."""

    def tma_boxes(self, spec: GemmSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """The boxes the module moves by TMA: one per tile where the target moves raw boxes, else none."""
        return tma_boxes(spec) if target.tma_boxes else ()

    def mma_tile(self, spec: GemmSpec) -> tuple[tuple[int, str], tuple[int, str]]:
        """The output tile, (rows, field) by (columns, field); a design that swaps A and B says its transpose."""
        return (spec.tile.m, "m"), (spec.tile.n, "n")
