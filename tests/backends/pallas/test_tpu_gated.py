"""The dense Pallas TPU kernel's gated epilogue (halves: PAL013) in Pallas's strict TPU interpreter on the CPU (no TPU
here: uninitialized VMEM and reads past an array's end are NaN, so an unmasked tail shows), against float64, and
lowered for TPU on the CPU by the design's compile hook (Mosaic MLIR in a tpu_custom_call; libtpu's compile needs a
TPU). B ([batch,] 2N, K) K-major: SwiGLU with a bias after it (f32) and the erf GeGLU, batched, bf16; M, N and K off
the 8x128x128 blocks, and M = 1. B ([batch,] K, 2N) N-major (gate block j, up block j + N / tile.n): GeGLU-tanh with
a bias, batched, f32, N = 256, and N = 130 refused naming N and the block."""

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
    spec("tg_geglu_nmajor_batched", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "mn"},
         out={"dtype": "f32"}, tile=TILE, targets=["pallas:tpu_v5e"], batch=True,
         epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "halves"}, {"op": "bias", "along": "n", "dtype": "f32"}]),
)}
K_MAJOR = [name for name, s in FORMS.items() if s["b"]["major"] == "k"]
N_MAJOR = "tg_geglu_nmajor_batched"


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("tpu_gated")
    return {name: render_module(s, folder) for name, s in FORMS.items()}


@pytest.mark.parametrize("name", K_MAJOR)
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


def test_n_major_halves_read_blocks_j_and_j_plus_n_over_the_block(modules):
    """B (batch, K, 2N) N-major as stored: the gate block j and the up block j + N / tile.n, N = 256 (two blocks a
    half), M = 21 and K = 200 off their blocks (M = 1 is the K-major forms': the same row blocks); N = 130 is refused
    when the call traces, naming N and the block (and the K-major layout that takes any N)."""
    s, fn = FORMS[N_MAJOR], getattr(modules[N_MAJOR], N_MAJOR)
    data = Data(s, 21, 256, 200, batch=2)
    a, b = data.operands()
    args = data.epilogue_args()
    got = np.asarray(fn(a, b, *(v for _, v in args)))
    want = reference(s, a, b, args).numpy()
    assert got.shape == want.shape == (2, 21, 256) and not np.isnan(got).any()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    data = Data(s, 21, 130, 200, batch=2)
    with pytest.raises(ValueError, match=r"N = 130 must be a multiple of the blocks along N \(128,\) \(store b K-major"):
        fn(*data.operands(), *(v for _, v in data.epilogue_args()))


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_lower_to_mosaic_for_tpu(modules, name):
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    module = modules[name]
    assert module.METADATA["gated"] == "halves" and "N2 = 2N" in module.__doc__
    assert hasattr(module, "N_BLOCKS") == (FORMS[name]["b"]["major"] == "mn")  # the hook lowers N two blocks then
    result = compile_module(module, TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error
