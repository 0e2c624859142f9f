"""An fp8 forward's backward on the dense Mosaic GPU design (pallas:gpu_sm90, session 32) on a Hopper GPU with
jax[cuda]: the CPU tests' three forms (tests/backends/pallas/test_training_mgpu_fp8.py: e4m3 + bf16 bias + GELU-tanh
preact; e5m2 + f32 bias + SiLU recompute into f16, pre in f32; e4m3 with the bias alone), rendered here, give through
`jax.grad` under `jax.jit` of the module's JAX entry the gradients of the dequantized operands A scale_a[:, None] and
B scale_b[None, :] (in the output's dtype, A's and B's shapes) and of the bias within the 16-bit backward's rounding of
float64 autograd of act(A_d @ B_d + bias); the scales' gradients zeros; the forward's output within rounding too; on
shapes off every tile, M = 1 and N under one tile.

Marked `gpu`: CI (CPU only) deselects them; passed on an H200 (session 32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(300, 520, 200), (1, 48, 40), (256, 384, 512)]
_MODULES: dict[str, object] = {}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        from backends.pallas.test_mgpu_module import render
        from backends.pallas.test_training_mgpu_fp8 import FORMS

        _MODULES[name] = (render(FORMS[name], Path(tmp_path_factory.mktemp(name)))[0], FORMS[name])
    return _MODULES[name]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["e4m3_bias_gelu_preact", "e5m2_bias_silu_recompute", "e4m3_bias"])
def test_gradients_are_the_dequantized_operands(name: str, shape: tuple[int, int, int], tmp_path_factory) -> None:
    import jax
    import jax.numpy as jnp

    mod, spec = module(name, tmp_path_factory)
    M, N, K = shape
    jt = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2, "bf16": jnp.bfloat16, "f16": jnp.float16,
          "f32": jnp.float32}
    fp8, out_dt = jt[spec["a"]["dtype"]], jt[spec["out"]["dtype"]]
    rng = np.random.default_rng(M + N + K)
    args = [jnp.asarray(rng.standard_normal((M, K)) * 2, fp8), jnp.asarray(rng.standard_normal((N, K)) * 2, fp8),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32),
            jnp.asarray(rng.standard_normal(N), jt[spec["epilogue"][1]["dtype"]])]
    dout = jnp.asarray(rng.standard_normal((M, N)), out_dt)
    fn = getattr(mod, spec["name"])
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32))  # noqa: E731
    out, grads = jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(5)))(*xs)))(*args)
    from backends.pallas.test_training_mgpu_fp8 import dequantized_reference, f64

    x, want = dequantized_reference(spec, args, dout)
    for what, got, ref, dtype in (("out", out, x, out_dt), ("a", grads[0], want["a"], out_dt),
                                  ("b", grads[1], want["b"], out_dt), ("bias", grads[4], want["bias"], args[4].dtype)):
        g = f64(got)
        assert got.dtype == dtype and g.shape == ref.shape, (what, got.dtype, g.shape)
        assert not g.isnan().any(), what
        err = (g - ref).abs().max().item()
        assert err <= 2e-2 * max(ref.abs().max().item(), 1.0), (what, err)
    assert not jnp.any(grads[2]) and not jnp.any(grads[3])  # the scales get no gradient (the rule's None)
