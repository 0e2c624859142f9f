"""The formula table's special values through a Pallas TPU kernel (interpret mode): a bias carrying
NaN, +-inf and huge values gives each column the float64 reference's class (NaN stays NaN through
relu and clamp; -inf through gelu, gelu_tanh and silu is NaN, as in torch)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from specials import BIAS_SPECIALS, CHAINS, assert_same_classes, chain_id, full

from backends.pallas.common import reference, render_module
from specgen.kinds.gemm.spec import GemmSpec


@pytest.mark.parametrize("chain", CHAINS, ids=chain_id)
def test_tpu_kernel_keeps_the_tables_specials(chain: list[dict], tmp_path) -> None:
    spec = GemmSpec.model_validate({
        "name": f"xs_{chain_id(chain).replace('-', 'm').replace('.', 'p')}", "kind": "gemm",
        "a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"}, "out": {"dtype": "f32"},
        "tile": {"m": 16, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e"],
        "epilogue": [{"op": "bias", "along": "n", "dtype": "f32"}, *chain],
    }).model_dump(mode="json")
    fn = getattr(render_module(spec, tmp_path), spec["name"])
    rng = np.random.default_rng(5)
    m, n, k = 8, 24, 16
    a = jnp.asarray(rng.standard_normal((m, k)) * 0.1, jnp.float32)
    b = jnp.asarray(rng.standard_normal((n, k)) * 0.1, jnp.float32)  # K-major: (N, K)
    bias = jnp.asarray((BIAS_SPECIALS * (n // len(BIAS_SPECIALS) + 1))[:n], jnp.float32)

    out = torch.from_numpy(np.asarray(fn(a, b, bias), dtype=np.float64))

    want = reference(spec, a, b, [("bias", bias)], epilogue=[spec["epilogue"][0], *full(chain)])
    x = torch.from_numpy(np.asarray(a, np.float64) @ np.asarray(b, np.float64).T + np.asarray(bias, np.float64))
    assert_same_classes(out, want, x, rtol=1e-5, atol=1e-6, what=chain_id(chain))
    if chain[0].get("fn") == "relu" or chain[0]["op"] == "clamp":
        assert out[:, 0].isnan().all(), "NaN dropped"
