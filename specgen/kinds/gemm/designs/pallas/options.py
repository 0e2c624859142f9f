"""The Pallas design's option section, `pallas` in a spec (and in a per_target table or a variant on a
pallas target, TPU or Mosaic GPU): the model the GEMM kind's spec (specgen/kinds/gemm/spec.py) lists among
its sections. Imports only the spec models, so that spec validation reads it without importing the design."""

from __future__ import annotations

from typing import ClassVar

from pydantic import StrictBool

from specgen.spec.models import KeysAddedLater, bounded
from specgen.spec.targets import Backend

SECTION = "pallas"  # the spec's key for these options
BACKEND = Backend.pallas  # the backend whose targets read them (a per_target table of another may not set them)

MAX_VMEM_LIMIT = 1 << 30  # a sanity bound: a TPU core has at most 128 MiB of VMEM


class PallasOptions(KeysAddedLater):
    # Scoped VMEM limit to request; default: what the plan needs plus 25%, capped at the chip's VMEM.
    vmem_limit_bytes: bounded(MAX_VMEM_LIMIT) | None = None
    # Mosaic GPU: swap the operands of the MMA, as triton.swap_ab and cute.swap_ab do: the kernel computes
    # out^T = B^T A^T, so each consumer warpgroup's tile.n/2 columns sit on wgmma's 64-row side and a small
    # tile.m (decode: M <= 64) on its 8..256-column side, and stores out's tiles through a transposed SMEM view.
    swap_ab: StrictBool = False

    ADDED_LATER: ClassVar[dict[str, object]] = {"swap_ab": False}


OPTIONS = PallasOptions
