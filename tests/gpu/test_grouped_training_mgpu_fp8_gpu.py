"""On an H100/H200 with jax[cuda]: an fp8 forward's backward on the grouped Mosaic GPU design (pallas:gpu_sm90,
session 29; MGPU_FP8_TRAINING_FORMS: e4m3 with a bias and GELU-tanh saved, tail zero; e5m2 with SiLU recomputed, an
untouched tail; e4m3 with an f32 bias alone into f16, an untouched tail), the real kernels: jax.grad under jax.jit of
sum(W * entry(...)) against float64 torch autograd on the CPU of the per-group loop over the dequantized operands A
scale_a and B[g] scale_b[g] (tests/backends/pallas/test_grouped_training_mgpu_fp8.py's `problem`, `expected` and
`check`): dA, dB, dbias and (an untouched tail) the caller's `out`, whose rows inside the groups are NaN (the forward
overwrites them); dA exactly 0 past the groups, an empty group's dB and dbias exactly 0, the scales' gradients zeros.
Cases: empty groups first, in the middle and last with rows past the last group and M, N, K off the tiles; M = 1;
every row in a group. And one case inside jax.shard_map on a one-device mesh (check_vma=True). Not run on a GPU until
the lead reports it (session 29). Marked `gpu`: CI (CPU only) deselects them. Each case small (under ~20 s with its
compile on an H200):
python3 -m pytest -m gpu -q tests/gpu/test_grouped_training_mgpu_fp8_gpu.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backends.pallas.test_grouped_mgpu import render
from backends.pallas.test_grouped_training_mgpu_fp8 import arrays, check, loss_fn, problem

from specgen.kinds.grouped.testing.mgpu_specs import MGPU_FP8_TRAINING_FORMS

pytestmark = pytest.mark.gpu

# (M, N, K, sizes): rows past the last group where the sizes' sum is under M
CASES = {
    "empty_first_middle_last": (517, 300, 200, (0, 130, 0, 250, 77, 0)),
    "m_1": (1, 48, 136, (0, 1, 0)),
    "every_row": (192, 256, 128, (64, 0, 128)),
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("grouped_mgpu_fp8_train_gpu")
    return {name: (render(s, tmp), s) for name, s in MGPU_FP8_TRAINING_FORMS.items()}


@pytest.mark.parametrize(("name", "case"), [(name, case) for name in MGPU_FP8_TRAINING_FORMS for case in CASES])
def test_grad_under_jit_against_float64_autograd(modules, name, case) -> None:
    mod, spec = modules[name]
    assert jax.default_backend() == "gpu"
    m, n, k, sizes = CASES[case]
    x = problem(spec, seed=11, shape=(m, n, k), sizes=np.array(sizes, np.int32))
    loss, argnums, xs = loss_fn(mod, x)
    got, y = jax.jit(jax.grad(loss, argnums=argnums, has_aux=True))(*xs)
    check(spec, x, got[:-2], f"{name} {case}")
    assert np.isfinite(np.asarray(y)).all()  # an untouched tail's out was NaN in the groups' rows: overwritten
    dscales = got[-2:]
    assert [d.shape for d in dscales] == [(m,), (len(sizes), n)] and not any(np.asarray(d).any() for d in dscales)


def test_inside_shard_map(modules) -> None:
    """The e4m3 preact form on a one-device mesh, check_vma=True (A, scale_a and W by rows; B, scale_b, the bias and
    the index replicated): the mesh's loss's gradients in A, B and the bias, B's and the bias's through the entry's
    casts' transposes."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mod, spec = modules["gmt_fp8_bias_gelu_tanh_preact"]
    m, n, k, sizes = CASES["empty_first_middle_last"]
    x = problem(spec, seed=5, shape=(m, n, k), sizes=np.array(sizes, np.int32))
    mesh = jax.make_mesh((1,), ("x",))
    rows = P("x", None)
    specs = (rows, P(), P(), P("x"), P(), P(), rows)

    def step(a, b, index, sa, sb, bias, w):
        def local(a, b, bias):
            y = mod._call(a, b, index, sa, sb, bias, None).astype(jnp.float32)
            return jnp.sum(jnp.where(jnp.isnan(w), 0.0, w * y))

        return jax.grad(lambda *ys: jax.lax.psum(local(*ys), "x"), argnums=(0, 1, 2))(a, b, bias)

    xs = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip([*arrays(x), jnp.asarray(x["w"])], specs, strict=True)]
    fn = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=(rows, P(), P()),
                               check_vma=True))
    check(spec, x, fn(*xs), "shard_map")
