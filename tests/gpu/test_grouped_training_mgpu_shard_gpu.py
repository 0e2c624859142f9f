"""On an H100/H200 with jax[cuda]: the grouped Mosaic GPU training entry (its jax.custom_vjp, the real kernels) inside
jax.shard_map on a one-device mesh (issue 38), in both vma modes: the step of tests/backends/pallas/grouped_mgpu_shard.py
(A's rows, dOut and the group index sharded over "x", B and the bias replicated, an untouched tail's caller `out` with
the rows; check_vma=True: the mesh's loss, B's and the bias's gradients summed by the entry's casts' transposes;
False: the step's psums) gives jax.grad under jax.jit's gradients, which match float64 torch autograd of the per-group
loop. Forms: the catalogue's moe_up_gelu_train_mgpu (bias + GELU-tanh preact), a halves SwiGLU + bias preact and an
interleaved GeGLU-tanh recompute (f16, an untouched tail), at M, N, K off the tiles with empty groups and rows past the
last group. On a one-device mesh the casts run (check_vma=True types every array over "x") but no psum sums anything
across devices; four devices with the kernels as jnp models: tests/backends/pallas/test_grouped_training_mgpu_shard.py.
Not run on a GPU until the lead reports it (session 28). Marked `gpu`: CI (CPU only) deselects them. Under ~60 s on
an H200: python3 -m pytest -m gpu -q tests/gpu/test_grouped_training_mgpu_shard_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backends.pallas.grouped_mgpu_shard import layout, local_loss, step_fn
from backends.pallas.test_grouped_mgpu import render
from backends.pallas.test_grouped_training_mgpu import CATALOGUE, _reference

from specgen.compile import load_rendered
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_GATED_TRAINING_FORMS
from specgen.spec.load import load_paths

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
NAMES = [CATALOGUE, "gmt_swiglu_bias_preact_k", "gmt_geglu_il_recompute_k_f16"]
M, K, SIZES = 300, 136, (0, 130, 0, 97, 41)  # 268 rows in groups, 32 past them; K off the 64-wide K tile


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("grouped_mgpu_shard_gpu")
    (ls,) = [x for x in load_paths([ROOT / "specs" / "training.toml"]) if x.name == CATALOGUE]
    out = {CATALOGUE: (load_rendered(ROOT / "generated" / "pallas" / "gpu_sm90" / f"{CATALOGUE}.py",
                                     f"_gmt_shard_gpu_{CATALOGUE}"), ls.spec.model_dump(mode="json"))}
    return out | {name: (render(MGPU_GATED_TRAINING_FORMS[name], tmp), MGPU_GATED_TRAINING_FORMS[name])
                  for name in NAMES[1:]}


@pytest.mark.parametrize("name", NAMES)
def test_grad_inside_shard_map_matches_jit_and_float64_autograd(modules, name) -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mod, spec = modules[name]
    assert jax.default_backend() == "gpu"
    n = 100 if layout(spec) else 200  # N (a gated B: 2N columns) off the 128-wide N tile
    bias, untouched = any(op["op"] == "bias" for op in spec["epilogue"]), spec["groups"]["tail"] == "untouched"
    case = {"bias": bias, "untouched": untouched}
    rng = np.random.default_rng(5)
    g, nb = len(SIZES), 2 * n if layout(spec) else n
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16}[spec["a"]["dtype"]]
    x = {"a": jnp.asarray(rng.standard_normal((M, K)) * 0.5, dt),
         "b": jnp.asarray(rng.standard_normal((g, nb, K) if spec["b"]["major"] == "k" else (g, K, nb)) / np.sqrt(K), dt)}
    if bias:
        x["bias"] = jnp.asarray(rng.standard_normal((g, n)), {"bf16": jnp.bfloat16, "f32": jnp.float32}[
            next(op["dtype"] for op in spec["epilogue"] if op["op"] == "bias")])
    if untouched:
        x["out"] = jnp.asarray(rng.standard_normal((M, n)), dt)
    index = np.cumsum(SIZES) if spec["groups"]["index"] == "offs" else np.asarray(SIZES)
    dout = rng.standard_normal((M, n)).astype(np.float32)
    args = [*x.values(), jnp.asarray(index.reshape(1, g), jnp.int32), jnp.asarray(dout)]
    mesh = jax.make_mesh((1,), ("x",))
    rows = P("x", None)
    specs = (rows, P(), *([P()] if bias else []), *([rows] if untouched else []), rows, rows)
    placed = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip(args, specs, strict=True)]
    plain = jax.jit(jax.grad(local_loss(mod._call, case), argnums=tuple(range(len(x)))))(*args)  # no shard_map
    want = _reference(spec, x["a"], x["b"], np.asarray(SIZES), x.get("bias"), dout, x.get("out"))
    for j, (got, ref) in enumerate(zip(plain, [want[i] for i in sorted(want)], strict=True)):
        got = np.asarray(got, np.float64)
        assert got.shape == ref.shape and np.isfinite(got).all(), (name, j)
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(got, ref, rtol=3e-2, atol=2e-2 * scale, err_msg=f"{name} jit gradient {j}")
    for check_vma in (True, False):
        f = jax.jit(jax.shard_map(step_fn(mod._call, case, check_vma), mesh=mesh, in_specs=specs, out_specs=specs[:-2],
                                  check_vma=check_vma))
        for j, (got, ref) in enumerate(zip(f(*placed), plain, strict=True)):
            got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
            diff = float(np.abs(got - ref).max())
            print(f"{name} shard_map check_vma={check_vma} gradient {j}: max |shard_map - jit| {diff:.3g}")
            assert got.shape == ref.shape and np.isfinite(got).all(), (name, check_vma, j)
            assert diff <= 1e-2 * max(float(np.abs(ref).max()), 1.0), (name, check_vma, j, diff)
