"""The CuTe designs' option section, `cute` in a spec (and in a per_target table or a variant on a cute
target): the model the GEMM kind's spec (specgen/kinds/gemm/spec.py) lists among its sections.

It lives here, with the first CuTe design, and serves both: the section is the CuTe backend's, and both
the sm90 (wgmma) and the sm100 (tcgen05) design read it (a key one ignores is documented as the other's).
One module per section, so that the kind lists it once; cute_sm100 builds on cute_sm90 already (its design
imports this design's), so it has no options module of its own. Imports only the spec models, so that spec
validation reads it without importing either design."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import StrictBool

from specgen.spec.models import KeysAddedLater, bounded
from specgen.spec.targets import Backend

SECTION = "cute"  # the spec's key for these options
BACKEND = Backend.cute  # the backend whose targets read them (a per_target table of another may not set them)


class CuteOptions(KeysAddedLater):
    # Blackwell 2-CTA (cta_group::2) MMA: the cluster's CTA pair shares one MMA.
    two_cta: StrictBool = False
    # Hopper: consumer warpgroups splitting the tile along M (1 or 2).
    mma_warpgroups: bounded(2) | None = None
    # Hopper: how the consumer warpgroups share the work. "cooperative": they split each tile along M
    # (its epilogue runs after its mainloop); "pingpong": two warpgroups each own a whole tile and
    # alternate, one's epilogue running under the other's mainloop.
    schedule: Literal["cooperative", "pingpong"] = "cooperative"
    tma_store: StrictBool = True
    # Hopper: swap the operands of the MMA, as triton.swap_ab does: the kernel computes out^T = B^T A^T,
    # so that tile.n sits on wgmma's 64-row side and a small tile.m (decode: M <= 64) on its 8..256-column
    # side, and stores out^T tiles (M-major in the kernel's terms) by TMA.
    swap_ab: StrictBool = False

    ADDED_LATER: ClassVar[dict[str, object]] = {"swap_ab": False}


OPTIONS = CuteOptions
