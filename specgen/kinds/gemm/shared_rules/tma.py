"""TMA box limits, over the boxes each design says its module builds (resolve.py asks it)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.rules.base import Finding, RuleContext, RuleSet, is_gpu, uses_tma_boxes

RULES = RuleSet()

# --- TMA ------------------------------------------------------------------------------------------------
@RULES.rule("TMA001", "TMA inner box bytes are a multiple of 16", is_gpu)
def tma_inner_box(ctx: RuleContext) -> Iterator[Finding]:
    """cuTensorMapEncodeTiled: the inner box dimension in bytes must be a multiple of 16 (Driver API).
    Applies wherever tiles move by TMA: CuTe, Mosaic GPU, Triton's persistent descriptor kernel."""
    for box in ctx.tma_boxes:
        name, inner, nbytes = box.operand, box.inner, box.elem_bytes
        if inner * nbytes % 16:
            yield Finding("TMA001", "error", f"{name}'s TMA box has {inner} x {nbytes} B = {inner * nbytes} B along its "
                          "contiguous dim, not a multiple of 16", "", (*box.field, "major") if name != "out" else ("tile", "n"))


@RULES.rule("TMA002", "TMA box dims are at most 256", uses_tma_boxes)
def tma_box_dims(ctx: RuleContext) -> Iterator[Finding]:
    """cuTensorMapEncodeTiled: each box dimension is 1..256 elements (Driver API). CuTe issues one box
    per tile; Mosaic GPU one per tile in its tiled GMEM view, (outer / 8, inner / swizzle, 8, swizzle)
    (the design's `tma_boxes` dims: a 320-row tile is 40 row tiles); Triton splits larger blocks itself,
    so it is exempt."""
    for box in ctx.tma_boxes:
        dims = box.dims or (box.outer, box.inner)
        for extent in dims:
            if extent > 256:
                shape = "x".join(map(str, dims))
                yield Finding("TMA002", "error", f"{box.operand}'s TMA box {shape} has a dim {extent} > 256",
                              "", ("tile",))
                break
