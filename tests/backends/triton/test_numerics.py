"""The GEMM kind's numerics tests (specgen/kinds/gemm/testing/numerics.py) on the Triton design, under the
CPU interpreter: every catalogue kernel (as its interpreter variant and as an f32 variant) and the extra
specs of backends/triton/variants.py, on every shape there (ragged M / N / K, M = 1, N = 1, K < tile.k,
K = 1, deep K with a tail, more row tiles than GROUP_M), strided and dense."""

from __future__ import annotations

import pytest

from backends.triton.variants import EXACT, SHAPES, VARIANTS, is_tma
from specgen.kinds.gemm.testing.data import Problem
from specgen.kinds.gemm.testing.numerics import NumericsTests

# The interpreter evaluates sigmoid's exp in numpy, which warns when exp(-x) overflows to inf (the
# sigmoid is still exactly 0 there).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


class TestTritonNumerics(NumericsTests):
    VARIANTS = VARIANTS
    SHAPES = SHAPES
    EXACT = frozenset(EXACT)

    def problem(self, spec: dict, shape: str) -> Problem:
        """(M, N for pointer kernels, N for TMA kernels, K, layout): TMA needs 16-byte rows and strides."""
        M, n_ptr, n_tma, K, layout = SHAPES[shape]
        tma = is_tma(spec)
        return Problem(spec, M, n_tma if tma else n_ptr, K, layout, aligned=tma, exact=spec["name"] in EXACT,
                       vectors_2d=shape == "ksmall", tag=shape)

    def check_module(self, spec: dict, module: object) -> None:
        with open(module.__file__) as f:  # the spec says TMA exactly when the module builds descriptors
            assert is_tma(spec) == ("a_desc" in f.read())
