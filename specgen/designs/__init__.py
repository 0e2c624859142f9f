"""The design registry: DESIGNS[(kind, backend)]. A backend without a design is "checked only"."""

from __future__ import annotations

from specgen.designs.base import Design
from specgen.designs.gemm_cute_sm90 import CuteSm90Gemm
from specgen.designs.gemm_pallas import PallasGemmDesign
from specgen.designs.gemm_triton import TritonGemm
from specgen.targets import Backend

DESIGNS: dict[tuple[str, Backend], Design] = {
    ("gemm", Backend.triton): TritonGemm(),
    ("gemm", Backend.pallas): PallasGemmDesign(),
    ("gemm", Backend.cute): CuteSm90Gemm(),  # Hopper renders; Blackwell stays checked only (its layout below)
}


def design_for(kind: str, backend: Backend) -> Design | None:
    return DESIGNS.get((kind, backend))
