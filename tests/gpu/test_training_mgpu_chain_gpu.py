"""The other chains' backward on the dense Mosaic GPU design (pallas:gpu_sm90, session 33) on a Hopper GPU with
jax[cuda]: the CPU tests' four bf16 forms (tests/backends/pallas/test_training_mgpu_chain.py: scale by col, bias,
GELU-tanh, residual beta 0.5, recompute; bias along m, scale by rowcol, sigmoid, cast to f16, recompute, B mn-major;
a runtime scalar, a residual before pre, clamp [-1, 2], ReLU, scale by row and by 0.5, a residual after pre, preact,
A mn-major; a residual beta 2 and bias along m, no pre GEMM), rendered here, give through `jax.grad` under `jax.jit` of
the module's JAX entry every argument's gradient (its dtype and shape) within bf16's rounding of float64 autograd of the
chain (pre rounded to bf16 where forward_pre saves it), the runtime scalar's zero, the forward's output within
rounding, no NaN; shapes off every tile, M = 1, N under one tile; and a NaN in dOut giving float64's NaN pattern in dA
and dB.

Marked `gpu`: CI (CPU only) deselects them. Written in session 33, **not run on a GPU** until the lead reports it.
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
        from backends.pallas.test_training_mgpu_chain import SPECS

        _MODULES[name] = render(SPECS[name], Path(tmp_path_factory.mktemp(name)))[0]
    return _MODULES[name]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["mch_col", "mch_rowcol", "mch_clamp", "mch_nopre"])
def test_gradients_match_float64_autograd(name: str, shape: tuple[int, int, int], tmp_path_factory) -> None:
    import jax
    import jax.numpy as jnp
    import torch
    from backends.pallas.test_training_mgpu_chain import FORMS, SPECS, inputs
    from backends.pallas.test_training_tpu_chain import check_grads, close, reference

    from specgen.kinds.gemm.spec import GemmSpec

    mod, s = module(name, tmp_path_factory), SPECS[name]
    names = ["a", "b", *(a.name for a in GemmSpec.model_validate(s).runtime_args())]
    arrays, dout = inputs(name, shape, sum(shape))
    fn = getattr(mod, name)
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32))  # noqa: E731
    out, grads = jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*arrays)
    start = FORMS[name][4]
    want_out, want = reference(s, names, arrays, dout, start, torch.bfloat16 if s["training"]["save"] == "preact" else None)
    close(out, want_out, 2e-2, "out")
    check_grads(names, grads, arrays, want, 3e-2)


def test_a_nan_in_dout_spreads_as_float64s(tmp_path_factory) -> None:
    import jax
    import jax.numpy as jnp
    import torch
    from backends.pallas.test_training_mgpu_chain import FORMS, SPECS, inputs
    from backends.pallas.test_training_tpu_chain import reference

    from specgen.kinds.gemm.spec import GemmSpec

    name = "mch_clamp"
    mod, s = module(name, tmp_path_factory), SPECS[name]
    names = ["a", "b", *(a.name for a in GemmSpec.model_validate(s).runtime_args())]
    arrays, dout = inputs(name, (136, 72, 200), 1)
    dout = dout.at[3, 5].set(jnp.nan)
    fn = getattr(mod, name)
    grads = jax.jit(jax.grad(lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32)),
                             argnums=(0, 1)))(*arrays)
    _, want = reference(s, names, arrays, dout, FORMS[name][4], torch.bfloat16)
    for n, g in zip(("a", "b"), grads, strict=True):
        assert np.array_equal(np.isnan(np.asarray(g.astype(jnp.float32))), want[n].isnan().numpy()), n
