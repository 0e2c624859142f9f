"""The grouped CuTe sm100 design's option section: the CuTe backend's `cute` section (the dense designs' model,
kinds/gemm/designs/cute_sm90/options.py, which the grouped spec already takes for cute:sm90), read by this design
too; the MMA family it serves (tcgen05). Imports only the spec models."""

from __future__ import annotations

from specgen.kinds.gemm.designs.cute_sm90.options import BACKEND, OPTIONS, SECTION, CuteOptions

MMA: tuple[str, ...] = ("tcgen05",)

__all__ = ["BACKEND", "MMA", "OPTIONS", "SECTION", "CuteOptions"]
