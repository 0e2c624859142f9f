"""The Triton design's option section, `triton` in a spec (and in a per_target table or a variant on a
triton target): the model the GEMM kind's spec (specgen/kinds/gemm/spec.py) lists among its sections.
Imports only the spec models, so that spec validation reads it without importing the design."""

from __future__ import annotations

from typing import ClassVar

from pydantic import PrivateAttr, StrictBool

from specgen.spec.models import KeysAddedLater, bounded
from specgen.spec.targets import Backend

SECTION = "triton"  # the spec's key for these options
BACKEND = Backend.triton  # the backend whose targets read them (a per_target table of another may not set them)


class TritonOptions(KeysAddedLater):
    # Triton takes at most 32 warps (POW001 says so with the numbers); the bound is a sanity one.
    num_warps: bounded(64) = 8
    # TMA tensor descriptors for A, B and out (sm90+), in either schedule; they need 16-byte aligned
    # leading strides. Off: pointer loads, which take any N and any leading stride.
    tma: StrictBool = True
    # Store the epilogue in two halves along N, halving the SMEM the TMA store stages.
    epilogue_subtile: StrictBool = False
    # Persistent kernels: let Triton pipeline across the tile loop (next tile's loads during this
    # tile's epilogue).
    flatten: StrictBool = False
    # Swap the operands of the MMA: the kernel computes the tile transposed, out^T = B^T A^T, so that
    # tile.n (at least 64) sits on the MMA's row side and a small tile.m (decode: M <= 16) on its
    # column side (Hopper wgmma is 64 rows by 8..256 columns; a tile.m below 64 otherwise falls back
    # to mma.sync). The accumulator is transposed back before the epilogue.
    swap_ab: StrictBool = False

    ADDED_LATER: ClassVar[dict[str, object]] = {"swap_ab": False}
    # Not a spec key: the role of a training spec's backward GEMM these options configure (kinds/gemm/training.py's
    # companions), whose kernel is templates/gemm/triton/backward.jinja's for that role, not the forward's: the
    # design's SMEM plan and TMA boxes follow that kernel's form ("" for a spec's own kernel).
    _backward_role: str = PrivateAttr(default="")

    @property
    def backward_role(self) -> str:
        return self._backward_role

    def for_backward(self, role: str) -> TritonOptions:
        """These options as the backward's `role` kernel reads them (its plan and boxes: design.py's `memory`)."""
        copy = self.model_copy()
        copy._backward_role = role
        return copy


OPTIONS = TritonOptions
