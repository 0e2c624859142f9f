"""The shared guard tests (tests/shared/guards.py) on the Triton design's modules."""

from __future__ import annotations

import pytest
from shared.guards import GuardTests

# The interpreter's sigmoid (in the legal-layout calls) warns where exp overflows; the result is exact.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


class TestTritonGuards(GuardTests):
    pass
