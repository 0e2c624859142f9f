"""The grouped kind's guard tests (specgen/kinds/grouped/testing/guards.py) on its Triton design's entry, under
the CPU interpreter ('meta' stands for another device)."""

from __future__ import annotations

from specgen.kinds.grouped.testing.guards import GroupedGuardTests
from specgen.kinds.grouped.testing.specs import GUARD_SPEC


class TestTritonGroupedGuards(GroupedGuardTests):
    SPEC = GUARD_SPEC
