"""The GEMM kind's guard tests (specgen/kinds/gemm/testing/guards.py) on the Pallas TPU modules' torch entry
(`<name>_torch`: torch tensors through DLPack to the JAX entry, run in the strict TPU interpreter on the
CPU): every bad argument refused naming it, before the kernel is built (the tripwire stands in for
`_build`); legal odd layouts (offset bases, padded strides, strided vectors) give the plain call's bits."""

from __future__ import annotations

import pytest
from kernels import guard_kernels

from backends.pallas.common import render_module
from specgen.kinds.gemm.testing.guards import DLPACK_JAX, Call, GuardTests, StagingTests, Tripwire

KERNELS = guard_kernels("tpu_guard", "pallas:tpu_v5e", {"m": 16, "n": 128, "k": 128}, {"m": 128, "n": 128, "k": 128})


@pytest.fixture(scope="module")
def tpu_modules(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("pallas_guards")
    cache: dict = {}

    def get(spec: dict):
        if spec["name"] not in cache:
            cache[spec["name"]] = render_module(spec, folder)
        return cache[spec["name"]]

    return get


class TestPallasTpuGuards(GuardTests, StagingTests):
    KERNELS = KERNELS
    FACE = DLPACK_JAX

    @pytest.fixture
    def module(self, tpu_modules):
        return tpu_modules

    def trip(self, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
        """The kernel is built (`_build`) after every check, at trace time: trace afresh."""
        call.module._call.clear_cache()
        monkeypatch.setattr(call.module, "_build", Tripwire())
