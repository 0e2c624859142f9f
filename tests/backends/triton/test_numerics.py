"""The shared numerics tests (tests/shared/numerics.py) on the Triton design, under the CPU interpreter."""

from __future__ import annotations

import pytest
from shared.numerics import NumericsTests, is_tma

# The interpreter evaluates sigmoid's exp in numpy, which warns when exp(-x) overflows to inf (the
# sigmoid is still exactly 0 there).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


class TestTritonNumerics(NumericsTests):
    def check_module(self, spec: dict, module: object) -> None:
        with open(module.__file__) as f:  # the spec says TMA exactly when the module builds descriptors
            assert is_tma(spec) == ("a_desc" in f.read())
