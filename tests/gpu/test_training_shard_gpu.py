"""The JAX training entries' custom_vjps under jax.jit and inside jax.shard_map on a Hopper GPU (issue 38): the CuTe
sm90 entry (the catalogue's linear_gelu_train_cute_bf16, and the gated backward's custom_vjp: a halves SwiGLU + bias
in preact, an interleaved GeGLU-tanh + bias in recompute with A mn-major) and the Mosaic GPU entry (the catalogue's
linear_gelu_train_mgpu, a halves SwiGLU + bias in preact with B mn-major), the real kernels at M, N, K off the tiles:
jax.grad under jax.jit against float64 autograd of the reference, and the same step inside jax.shard_map on a
one-device mesh in both vma modes (tests/backends/shard_grads.py's step: check_vma=True sums the replicated weights'
gradients by the casts' transposes, False by the step's psum) giving the jit step's gradients. The CPU side (four
devices, kernels as jnp models): tests/backends/test_training_shard_map.py.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["linear_gelu_train_cute_bf16", "cjs_swiglu_pre", "cjs_geglu_il_rec", "linear_gelu_train_mgpu", "mjs_swiglu_pre"]
_MODULES: dict = {}


def entry(name: str, tmp_path_factory):
    """(the JAX entry, its spec, the shape it runs): N and K off the tiles, N odd in 16-byte units where gated."""
    from backends.test_training_shard_map import cases

    if name not in _MODULES:
        kind, spec, _, _ = cases()[name]
        gated = spec["epilogue"][0]["op"] == "gated"
        if name.startswith("linear_gelu"):
            from specgen.compile import load_rendered

            sub = "pallas/gpu_sm90" if kind == "mgpu" else "cute"
            mod = load_rendered(ROOT / "generated" / sub / f"{name}.py", f"_specgen_shard_gpu_{name}")
        elif kind == "mgpu":
            from backends.pallas.test_mgpu_module import render

            mod = render(spec, Path(tmp_path_factory.mktemp(name)))[0]
        else:
            from kernels import load_target_module

            mod = load_target_module(spec, "cute:sm90", Path(tmp_path_factory.mktemp(name)), "_specgen_shard_gpu_")[0]
        fn = getattr(mod, f"{name}_jax" if kind == "cute" else name)
        _MODULES[name] = (fn, spec, (300, 100, 136) if gated else (300, 200, 136))
    return _MODULES[name]


@pytest.mark.parametrize("name", NAMES)
def test_grad_under_jit_and_inside_shard_map(name: str, tmp_path_factory) -> None:
    import jax
    import jax.numpy as jnp
    from backends.shard_grads import inputs, sharded_grads

    from gpu.test_training_mgpu_gpu import err, reference

    fn, spec, shape = entry(name, tmp_path_factory)
    args, dout = inputs(spec, shape, seed=3)
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32))  # noqa: E731
    jitted = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))(*args)
    _, want = reference(spec, args, dout)
    mesh = jax.make_mesh((1,), ("x",))
    for what, g, w, x in zip(("da", "db", "dbias"), jitted, want, args, strict=False):
        assert g.shape == x.shape and g.dtype == x.dtype, (name, what)
        e, scale = err(g, w)
        print(f"{name} jit {what}: error {e:.3g} of {scale:.3g}")
        assert e <= 2e-2 * scale, f"{name} {what}: error {e:.3g} of {scale:.3g}"
    for check_vma in (True, False):
        f, placed = sharded_grads(fn, args, dout, spec, mesh, check_vma)
        for what, g, j in zip(("da", "db", "dbias"), f(*placed), jitted, strict=False):
            diff = float(np.abs(np.asarray(g, np.float64) - np.asarray(j, np.float64)).max())
            print(f"{name} shard_map check_vma={check_vma} {what}: max |shard_map - jit| {diff:.3g}")
            assert g.shape == j.shape and np.isfinite(np.asarray(g, np.float64)).all(), (name, what)
            assert diff <= 1e-2 * max(float(np.abs(np.asarray(j, np.float64)).max()), 1.0), (name, check_vma, what, diff)
