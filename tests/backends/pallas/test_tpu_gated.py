"""The dense Pallas TPU kernel's gated epilogue (halves, B ([batch,] 2N, K) K-major: PAL013) in Pallas's strict TPU
interpreter on the CPU (no TPU here: uninitialized VMEM and reads past an array's end are NaN, so an unmasked tail
shows), against float64, and lowered for TPU on the CPU by the design's compile hook (Mosaic MLIR in a
tpu_custom_call; libtpu's compile needs a TPU). Two forms: SwiGLU with a bias after it (f32) and the erf GeGLU,
batched, bf16; M, N and K off the 8x128x128 blocks, and M = 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.pallas.common import Data, reference, render_module
from specgen.kinds.gemm.spec import GemmSpec

TILE = {"m": 8, "n": 128, "k": 128}


def spec(name: str, **fields: object) -> dict:
    return GemmSpec.model_validate({"name": name, "kind": "gemm", **fields}).model_dump(mode="json")

FORMS = {s["name"]: s for s in (
    spec("tg_swiglu_bias", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "k"}, out={"dtype": "f32"},
         tile=TILE, targets=["pallas:tpu_v5e"],
         epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "along": "n", "dtype": "f32"}]),
    spec("tg_geglu_bf16_batched", a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "k"},
         out={"dtype": "bf16"}, tile=TILE, targets=["pallas:tpu_v6e"], batch=True,
         epilogue=[{"op": "gated", "fn": "gelu", "layout": "halves"}]),
)}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("tpu_gated")
    return {name: render_module(s, folder) for name, s in FORMS.items()}


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_match_float64(modules, name):
    """out = fn(A @ gate) * (A @ up) (+ bias) at M = 21, N = 130, K = 200 (every dim off its block) and M = 1."""
    s = FORMS[name]
    tol = {"atol": 2e-2, "rtol": 2e-2} if s["out"]["dtype"] == "bf16" else {"atol": 1e-5, "rtol": 1e-5}
    for m in (21, 1):
        data = Data(s, m, 130, 200, batch=2)
        a, b = data.operands()
        args = data.epilogue_args()
        got = np.asarray(getattr(modules[name], name)(a, b, *(v for _, v in args)).astype(np.float32))
        want = reference(s, a, b, args).numpy()
        assert got.shape == want.shape == (*data.batch, m, 130) and not np.isnan(got).any()
        np.testing.assert_allclose(got, want, err_msg=f"M = {m}", **tol)
    if not s["batch"]:  # the torch entry: B (K, 2N) as torch lays out the gate_up weight's transpose, the same kernel
        b_torch = torch.from_numpy(np.array(b)).T
        got_torch = getattr(modules[name], f"{name}_torch")(torch.from_numpy(np.array(a)), b_torch,
                                                            *(torch.from_numpy(np.array(v)) for _, v in args))
        np.testing.assert_array_equal(got_torch.numpy(), got)
        assert modules[name]._build.cache_info().currsize == 2  # M = 21 and M = 1: no third kernel


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_lower_to_mosaic_for_tpu(modules, name):
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    module = modules[name]
    assert module.METADATA["gated"] == "halves" and "N2 = 2N" in module.__doc__
    result = compile_module(module, TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error
