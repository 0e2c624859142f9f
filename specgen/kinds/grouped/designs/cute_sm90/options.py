"""The grouped CuTe sm90 design's option section: the CuTe backend's `cute` section, the dense designs' model
(kinds/gemm/designs/cute_sm90/options.py), read by this design too; the MMA families it serves (wgmma: the
spec refuses cute:sm100 for a grouped kernel without importing a design). Imports only the spec models."""

from __future__ import annotations

from specgen.kinds.gemm.designs.cute_sm90.options import BACKEND, OPTIONS, SECTION, CuteOptions

MMA: tuple[str, ...] = ("wgmma",)

__all__ = ["BACKEND", "MMA", "OPTIONS", "SECTION", "CuteOptions"]
