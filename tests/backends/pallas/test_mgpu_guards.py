"""The GEMM kind's guard tests (specgen/kinds/gemm/testing/guards.py) on the Mosaic GPU (pallas:gpu_sm90)
modules' torch entry on this CPU machine: past the GPU check (`require_gpu`, patched), CPU tensors take the
DLPack path to the jitted call (the direct path declines them), whose trace-time checks refuse every bad
argument naming it before the kernel is built (the tripwire stands in for `_build`). The kernels run on
the H200 (tests/gpu/test_numerics_gpu.py)."""

from __future__ import annotations

import pytest
from kernels import guard_kernels

from backends.pallas.test_mgpu_module import render
from specgen.kinds.gemm.testing.guards import DLPACK_JAX, Call, GuardTests, Tripwire

KERNELS = guard_kernels("mgpu_guard", "pallas:gpu_sm90", {"m": 64, "n": 128, "k": 64})


@pytest.fixture(scope="module")
def mgpu_modules(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("mgpu_guards")
    cache: dict = {}

    def get(spec: dict):
        if spec["name"] not in cache:
            cache[spec["name"]] = render(spec, folder)[0]
        return cache[spec["name"]]

    return get


class TestMosaicGpuGuards(GuardTests):
    KERNELS = KERNELS
    FACE = DLPACK_JAX

    @pytest.fixture
    def module(self, mgpu_modules):
        return mgpu_modules

    def trip(self, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(call.module._mg, "require_gpu", lambda fn: None)
        call.module._call.clear_cache()
        monkeypatch.setattr(call.module, "_build", Tripwire())
