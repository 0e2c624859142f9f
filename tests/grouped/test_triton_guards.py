"""The grouped kind's guard tests (specgen/kinds/grouped/testing/guards.py) on its Triton design's entry, under
the CPU interpreter ('meta' stands for another device): the bf16-style kernel's (a per-group bias, a router
scale) and the fp8 kernel's (torch._scaled_grouped_mm's scale_a (M,) and scale_b (G, N))."""

from __future__ import annotations

from specgen.kinds.grouped.testing.guards import FP8_CASES, GroupedGuardTests
from specgen.kinds.grouped.testing.specs import FP8_GUARD_SPEC, GUARD_SPEC


class TestTritonGroupedGuards(GroupedGuardTests):
    SPEC = GUARD_SPEC


class TestTritonGroupedFp8Guards(GroupedGuardTests):
    SPEC = FP8_GUARD_SPEC
    CASES = FP8_CASES
