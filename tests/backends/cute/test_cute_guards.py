"""The GEMM kind's guard tests (specgen/kinds/gemm/testing/guards.py) on the CuTe modules (sm90 and sm100:
the shared torch host part) on this CPU machine. The guards want CUDA tensors: the arguments are
`cuda_like` CPU tensors (torch.Tensors that say they sit on cuda:0; 'meta' stands for any other device),
and the call takes the full check (`_check` / `_validate`; TVM_FFI off: with it, the compiled function
checks the rest at launch, which needs a GPU). Every bad argument is refused naming it before the launcher
is touched (the tripwire stands in for `_launcher`). The kernels run on the H200
(tests/gpu/test_numerics_gpu.py)."""

from __future__ import annotations

import pytest
from kernels import guard_kernels, load_target_module

from specgen.kinds.gemm.testing.autograd import cuda_like
from specgen.kinds.gemm.testing.guards import Call, GuardTests, Tripwire

TILE = {"m": 128, "n": 128, "k": 64}
CUDA_WORDS = {"device": "cuda:0", "a_device": "a CUDA device"}


@pytest.fixture(scope="module")
def cute_modules(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cute_guards")
    cache: dict = {}

    def get(spec: dict):
        if spec["name"] not in cache:
            (target,) = spec["targets"]
            cache[spec["name"]] = load_target_module(spec, target, folder, "_specgen_cute_guard_")[0]
        return cache[spec["name"]]

    return get


class CuteGuards(GuardTests):
    DEVICE_WORDS = CUDA_WORDS

    @pytest.fixture
    def module(self, cute_modules):
        return cute_modules

    def place(self, x: object) -> object:
        return cuda_like(x)

    def trip(self, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(call.module, "TVM_FFI", False)
        monkeypatch.setattr(call.module, "_launcher", Tripwire())


class TestCuteSm90Guards(CuteGuards):
    KERNELS = guard_kernels("cute90_guard", "cute:sm90", TILE)


class TestCuteSm100Guards(CuteGuards):
    KERNELS = guard_kernels("cute100_guard", "cute:sm100", TILE)
