"""The JAX training entries' custom_vjps under jax.jit and inside jax.shard_map on a Hopper GPU (issue 38): the CuTe
sm90 entry (the catalogue's linear_gelu_train_cute_bf16, and the gated backward's custom_vjp: a halves SwiGLU + bias
in preact, an interleaved GeGLU-tanh + bias in recompute with A mn-major) and the Mosaic GPU entry (the catalogue's
linear_gelu_train_mgpu, a halves SwiGLU + bias in preact with B mn-major), the real kernels at M, N, K off the tiles:
jax.grad under jax.jit against float64 autograd of the reference, and the same step inside jax.shard_map on a
one-device mesh in both vma modes (tests/backends/shard_grads.py's step: check_vma=True sums the replicated weights'
gradients by the casts' transposes, False by the step's psum) giving the jit step's gradients. The CPU side (four
devices, kernels as jnp models): tests/backends/test_training_shard_map.py.

Session 34 (passed on an H200, jax 0.11.2; the two batched cases after a test import was fixed): the Mosaic GPU entry with the other chains and
with `batch = true` (a chain recompute unbatched: col scale, bias, GELU-tanh, residual; batched: a row bias, sigmoid,
a col scale and a residual, recompute, and a SwiGLU + bias preact) the same way, A's rows (batched: every entry's rows)
with dOut, a residual and a row vector sharded, B and the column vectors replicated; and the CuTe sm90 entry of a
batched chain module: its forward inside jax.shard_map equal to the jit forward and to float64. Session 35 (passed on
an H200, the lead's run of 7ff55710): that entry is a jax.custom_vjp now (it was forward-only: jax.grad refused), so
jax.grad inside jax.shard_map (every entry's rows sharded, both vma modes) gives the jit step's gradients bit for bit
(its numerics against float64: tests/gpu/test_training_cute_jax_more_gpu.py).

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


# ---- session 34: the chains and batch ------------------------------------------------------------------------------
MORE = ["mch_col", "mgbg_chain_rec", "mgbg_gated_pre"]  # the Mosaic GPU chain (unbatched) and batched forms
MORE_SHAPES = {"mch_col": (300, 200, 136), "mgbg_chain_rec": (3, 200, 136, 136), "mgbg_gated_pre": (2, 130, 192, 72)}


def more_case(name: str, tmp_path_factory):
    """(entry, argument names, arrays, dOut, PartitionSpecs of each and dOut, float64's gradients, plain jnp's or None)."""
    from jax.sharding import PartitionSpec as P

    from specgen.kinds.gemm.spec import GemmSpec

    shape = MORE_SHAPES[name]
    if name.startswith("mch"):  # a chain, unbatched: pre is not rounded (recompute)
        from backends.pallas.test_training_mgpu_chain import SPECS, inputs
        from backends.pallas.test_training_tpu_chain import reference

        from gpu.test_training_mgpu_chain_gpu import module

        spec, fn = SPECS[name], getattr(module(name, tmp_path_factory), name)
        names = ["a", "b", *(a.name for a in GemmSpec.model_validate(spec).runtime_args())]
        arrays, dout = inputs(name, shape, seed=5)
        want = reference(spec, names, arrays, dout)[1]
        rows, mine = P("x", None), None
        want = [want[n].numpy() if n in want else None for n in names]
    else:
        from gpu.test_training_mgpu_batch_gpu import inputs, plain_jnp, reference, rendered
        from gpu.test_training_mgpu_gpu import grads_of

        mod, spec = rendered(name, tmp_path_factory)
        fn = getattr(mod, name)
        arrays, names, dout = inputs(spec, shape)
        want = reference(spec, arrays, names, dout)[1]
        mine = grads_of(plain_jnp(spec, names), arrays, dout)[1]
        rows = P(None, "x", None)
    roles = {"vec_m": P("x"), "vec_n": P(), "matrix": rows, "scalar": P()}
    a_rows = rows if spec["a"]["major"] == "k" else P(*rows[:-2], None, "x")
    parts = [a_rows, P(), *(roles[a.shape] for a in GemmSpec.model_validate(spec).runtime_args()), rows]
    return fn, names, arrays, dout, parts, want, mine


@pytest.mark.parametrize("name", MORE)
def test_chain_and_batch_grad_under_jit_and_inside_shard_map(name: str, tmp_path_factory) -> None:
    import jax
    from backends.shard_grads import shard_step

    from gpu.test_training_mgpu_gpu import err, grads_of

    fn, names, arrays, dout, parts, want, mine = more_case(name, tmp_path_factory)
    jitted = grads_of(fn, arrays, dout)[1]
    for i, (what, g, x) in enumerate(zip(names, jitted, arrays, strict=True)):
        assert g.shape == x.shape and g.dtype == x.dtype, (name, what)
        if want[i] is None:  # a runtime scalar: no gradient
            continue
        e, scale = err(g, want[i])
        bound = max(3e-2 * scale, 2 * err(mine[i], want[i])[0]) if mine is not None else 3e-2 * scale
        print(f"{name} jit d{what}: error {e:.3g} of {scale:.3g} (bound {bound:.3g})")
        assert e <= bound, f"{name} d{what}: error {e:.3g} > {bound:.3g}"
    mesh = jax.make_mesh((1,), ("x",))
    for check_vma in (True, False):
        f, placed = shard_step(fn, [*arrays, dout], parts, mesh, check_vma)
        for what, g, j in zip(names, f(*placed), jitted, strict=True):
            got, ref = np.asarray(g, np.float64), np.asarray(j, np.float64)
            diff = float(np.abs(got - ref).max()) if ref.size else 0.0
            print(f"{name} shard_map check_vma={check_vma} d{what}: max |shard_map - jit| {diff:.3g}")
            assert g.shape == j.shape and np.isfinite(got).all(), (name, what)
            assert diff <= 1e-2 * max(float(np.abs(ref).max()) if ref.size else 0.0, 1.0), (name, check_vma, what, diff)


def test_cute_batched_chain_forward_and_grad_inside_shard_map(tmp_path_factory) -> None:
    """The CuTe sm90 entry of a batched chain module (row bias, residual, silu, col scale; preact): its forward inside
    jax.shard_map (one-device mesh, both vma modes; every entry's rows sharded, B and the vectors replicated) equals
    the jit forward bit for bit and float64 within bf16 rounding; jax.grad inside it (a row vector's gradient per
    shard, B's and the column scale's summed over the mesh) gives jax.grad under jax.jit's gradients bit for bit (one
    device), every one finite and in its primal's shape."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from gpu.test_training_cute_batch_gpu import forward, module, spec

    s = spec("chain", "preact")
    fn = getattr(module(s, tmp_path_factory), s["name"] + "_jax")
    batch, M, N, K = 2, 130, 136, 72
    rng = np.random.default_rng(9)
    args = {"a": rng.standard_normal((batch, M, K)), "b": rng.standard_normal((batch, N, K)) / np.sqrt(K),
            "row_bias": rng.standard_normal(M), "c": rng.standard_normal((batch, M, N)),
            "col_scale": rng.uniform(0.5, 1.5, N)}
    dtypes = {"row_bias": jnp.float32, "col_scale": jnp.float32}
    arrays = [jnp.asarray(v, dtypes.get(k, jnp.bfloat16)) for k, v in args.items()]
    parts = [P(None, "x", None), P(), P("x"), P(None, "x", None), P()]
    jitted = np.asarray(jax.jit(fn)(*arrays), np.float64)
    import torch

    leaves = {k: torch.from_numpy(np.asarray(x, np.float64)) for k, x in zip(args, arrays, strict=True)}
    leaves["b"] = leaves["b"].mT
    want = forward(s, leaves).numpy()
    assert np.abs(jitted - want).max() <= 2e-2 * np.abs(want).max()
    mesh = jax.make_mesh((1,), ("x",))
    placed = [jax.device_put(x, NamedSharding(mesh, sp)) for x, sp in zip(arrays, parts, strict=True)]
    for check_vma in (True, False):
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=tuple(parts), out_specs=P(None, "x", None), check_vma=check_vma))
        assert np.array_equal(np.asarray(f(*placed), np.float64), jitted), check_vma
    dout = jnp.asarray(rng.standard_normal((batch, M, N)), jnp.bfloat16)  # the output's gradient, sharded as it
    loss = lambda *xs: jnp.sum(fn(*xs[:-1]).astype(jnp.float32) * xs[-1].astype(jnp.float32))  # noqa: E731
    argnums = tuple(range(len(arrays)))
    want_grads = jax.jit(jax.grad(loss, argnums=argnums))(*arrays, dout)
    dout_placed = jax.device_put(dout, NamedSharding(mesh, parts[0]))
    for check_vma in (True, False):
        f = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=(*parts, parts[0]),
                                  out_specs=tuple(parts), check_vma=check_vma))
        for k, g, w, x in zip(args, f(*placed, dout_placed), want_grads, arrays, strict=True):
            got = np.asarray(g, np.float64)
            assert g.shape == x.shape and g.dtype == x.dtype and np.isfinite(got).all(), (k, check_vma)
            assert np.array_equal(got, np.asarray(w, np.float64)), (k, check_vma)
