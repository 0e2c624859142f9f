"""The differentiable JAX entry (`<name>_jax`, a jax.custom_vjp: specgen/runtime/cute_jax_train.py) of a batched chain
module (`batch = true`, another chain: scale, residual, clamp, cast, bias along m; issue 38, session 35) on the CuTe
sm90 design, on this CPU machine. No GPU runs here (numerics on the device: tests/gpu/test_training_cute_jax_more_gpu.py),
so:

- jax.grad under jax.jit traces one XLA call per kernel the torch backward runs, each gradient in its primal's stored
  shape and dtype (a residual's (batch, M, N), a vector's 1-D), for test_cute_training_chain.py's four forms batched;
- the new kernels (a batched residual read element-wise by forward_pre, dgrad's (1, 1, 8) stub for it) compile for
  sm_90a in cutlass.jax's convention;
- the JAX glue (the chain pass over every batch's rows as one (batch M, N) matrix, a vector along m repeated for each
  batch, a row vector's partials added over the batches) with each kernel a jnp model of its contract
  (test_cute_jax_train_more.py's), against float64 autograd of the batched chain, under jax.jit and a one-device
  jax.shard_map (the batch sharded, the vectors replicated) giving the same bits; batch 3 off every tile and vector,
  batch 1 with M = 1; and on four CPU devices (a subprocess), 8 batches sharded, the vectors' gradients summed over
  the mesh."""

from __future__ import annotations

import pytest
import torch
from kernels import load_target_module
from test_cute_jax_train_more import CHAIN_CALLS, _chain_models, backward_of, to_torch

jax = pytest.importorskip("jax")
jnp = jax.numpy

CALLS = CHAIN_CALLS  # the kernels jax.grad calls, in order (the torch backward's): the unbatched chains'


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    from backends.cute.test_cute_training_chain import spec

    folder = tmp_path_factory.mktemp("cute_jax_batch_chain_train")
    return {name: load_target_module(spec(name, batch=True), "cute:sm90", folder, "_specgen_test_cute_jax_bchain_")[0]
            for name in CALLS}


def inputs(name: str, batch: int, M: int, N: int, K: int) -> tuple[dict, dict, list]:
    """(torch arguments: a (batch, M, K), b (batch, N, K), the chain's with a residual per batch; its runtime scalars;
    the names of the array arguments after a and b, in the entry's order)."""
    from backends.cute.test_cute_training_chain import _inputs, load
    from backends.cute.test_cute_training_chain import spec as chain_spec

    ls = load(chain_spec(name, batch=True))
    gen = torch.Generator().manual_seed(batch + M + N + K)
    args = {"a": torch.randn(batch, M, K, generator=gen).half(), "b": torch.randn(batch, N, K, generator=gen).half()}
    chain = _inputs(ls, M, N, gen)
    for arg in ls.spec.runtime_args():
        if arg.shape == "matrix":  # a residual per batch
            chain[arg.name] = torch.randn(batch, M, N, generator=gen).to(chain[arg.name].dtype)
    scalars = {n: v for n, v in chain.items() if isinstance(v, float)}
    return args | chain, scalars, [n for n in chain if n not in scalars]


JD = {torch.float16: jnp.float16, torch.bfloat16: jnp.bfloat16, torch.float32: jnp.float32}


def jx(t: torch.Tensor):
    return jnp.asarray(t.float().numpy()).astype(JD[t.dtype])


@pytest.mark.parametrize("name", list(CALLS))
def test_jax_grad_traces_the_torch_backwards_kernels_in_the_primals_shapes(modules, name: str) -> None:
    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    fn = getattr(modules[name], f"{name}_jax")
    args, scalars, arrays = inputs(name, 3, 37, 45, 29)
    names = list(args)
    structs = [jax.ShapeDtypeStruct(tuple(args[n].shape), JD[args[n].dtype]) for n in ("a", "b", *arrays)]

    def loss(*xs):
        given = dict(zip(("a", "b", *arrays), xs, strict=True)) | scalars
        return fn(*(given[n] for n in names)).astype(jnp.float32).sum()

    jaxpr = jax.make_jaxpr(jax.jit(jax.grad(loss, argnums=tuple(range(len(structs))))))(*structs)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in structs]
    assert cute_train_calls(jaxpr.jaxpr) == CALLS[name]


def test_a_batched_residuals_kernels_compile_for_sm90a(modules, monkeypatch) -> None:
    """forward_pre with a (batch, M, N) residual read element-wise beside (1, N) vectors, and dgrad with its (1, 1, 8)
    stub (its own batch extent), in cutlass.jax's convention (3-D arrays). The chain pass is the unbatched module's
    (2-D: the batches' rows), compiled by test_cute_jax_train_more.py."""
    from specgen.runtime import cute_jax_train as jt

    module = modules["cch_col"]
    bw = backward_of(module, monkeypatch)
    ops = module._jax_entry().operands
    kern = jt.kernels(bw, tuple((o.name, o.role) for o in ops[2:]))
    assert bw.batch and set(kern) == {"forward_pre", "chain_pass", "grad_cols_bands", "dgrad", "wgrad"}
    dts = tuple(jnp.dtype(o.jnp_dtype) for o in ops)  # a, b, col_scale, bias, c
    assert [len(mode) for mode, _ in kern["forward_pre"].layouts] == [3, 3, 1, 1, 3, 3, 3]
    f16 = jnp.dtype(jnp.float16)
    for role, outs in (("forward_pre", (f16, f16)), ("dgrad", (f16,))):
        assert len(kern[role].compile(dts + outs, len(dts), 132)) > 1000, role


@pytest.mark.parametrize("name", list(CALLS))
def test_the_jax_glue_sums_each_vector_over_the_batches_under_jit_and_shard_map(modules, name: str, monkeypatch) -> None:
    """jax.grad of <name>_jax with the kernels modelled, against float64 autograd of the batched chain (the value at pre
    rounded to f16, as forward_pre stores it): dA and dB per batch, a residual's per batch, every vector's over all
    batches' rows; each in its primal's shape and dtype; a one-device shard_map gives the same bits."""
    seen = glue(modules[name], name, 1, ((3, 37, 45, 29), (1, 1, 13, 72)), monkeypatch)
    assert set(seen) == set(CALLS[name]), seen


def glue(module, name: str, devices: int, shapes: tuple, patch) -> list:
    """The glue test's body on `devices` CPU devices (the batch sharded over them, the vectors replicated, dOut an
    argument sharded as the output); `patch` sets the models in (pytest's monkeypatch, or a plain setattr). Returns the
    kernels called."""
    from backends.cute.test_cute_training_chain import FORMS, PLANS, _apply
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    seen = _chain_models(module, name, patch)
    fn = getattr(module, f"{name}_jax")
    mesh = Mesh(jax.devices("cpu")[:devices], ("x",))
    ops, start = FORMS[name][0], PLANS[name][0]
    grad_names = {n for n, _ in PLANS[name][1]}
    for batch, M, N, K in shapes:
        args, scalars, arrays = inputs(name, batch, M, N, K)
        names = list(args)
        dout = torch.randn(batch, M, N, generator=torch.Generator().manual_seed(3)).half()

        def loss(*xs, arrays=arrays, scalars=scalars, names=names):
            given = dict(zip(("a", "b", *arrays), xs[:-1], strict=True)) | scalars
            return (fn(*(given[n] for n in names)).astype(jnp.float32) * xs[-1].astype(jnp.float32)).sum()

        stored = [jx(args[n]) for n in ("a", "b", *arrays)]
        argnums = tuple(range(len(stored)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*stored, jx(dout))
        specs = tuple(P("x") if x.ndim == 3 else P() for x in stored)  # the batch sharded, the vectors replicated
        sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=(*specs, P("x")),
                                        out_specs=specs))(*stored, jx(dout))
        leaves = {n: (v if isinstance(v, float) else v.double().requires_grad_()) for n, v in args.items()}
        v = _apply(ops[:start] if start >= 0 else ops, leaves["a"] @ leaves["b"].mT, leaves)
        if start >= 0:
            v = _apply(ops[start:], v + (v.half().double() - v).detach(), leaves)
        v.backward(dout.double())
        for n, g, s, x in zip(("a", "b", *arrays), got, sharded, stored, strict=True):
            where = f"{name} d{n} at {(batch, M, N, K)} on {devices} devices"
            assert g.shape == x.shape and g.dtype == x.dtype and s.shape == x.shape and s.dtype == x.dtype, where
            w = leaves[n].grad if n in grad_names | {"a", "b"} else torch.zeros(x.shape, dtype=torch.float64)
            for what, y in (("jit", g), ("shard_map", s)):
                err, scale = (to_torch(y).double() - w).abs().max().item(), w.abs().max().item()
                assert err <= 2e-2 * scale + 1e-3, f"{where} ({what}): {err:.4g} vs {scale:.4g}"
            # a batch's own gradient: the same bits; a replicated vector's is summed over the mesh in another order
            assert jnp.array_equal(g, s) or (devices > 1 and x.ndim == 1), f"{where}: shard_map's gradient differs"
    return seen


CHILD = """
import sys
from pathlib import Path

from kernels import load_target_module
from backends.cute.test_cute_training_chain import spec
import test_cute_jax_train_batch_chain as t


class Patch:
    def setattr(self, obj, name, value):
        setattr(obj, name, value)


assert len(t.jax.devices("cpu")) == 4, t.jax.devices()
for name in ("cch_col", "cch_clamp"):
    module = load_target_module(spec(name, batch=True), "cute:sm90", Path(sys.argv[1]), "_specgen_test_bchain4_")[0]
    t.glue(module, name, 4, ((8, 37, 45, 29),), Patch())
"""


def test_on_four_devices_each_shards_batches_and_the_vectors_summed_over_the_mesh(tmp_path) -> None:
    """The glue on four CPU devices (a subprocess: the device count is fixed when jax starts), 8 batches, 2 a shard:
    a residual, column vectors (cch_col) and a row vector beside a runtime scalar (cch_clamp), the vectors' gradients
    summed over the mesh by the casts' transposes, against float64 autograd. (A model's own vjp seeds its zeros from
    the varying dOut: a non-varying input's gradient would be summed over the mesh.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests), str(Path(__file__).parent)])}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tests.parent)
    assert proc.returncode == 0, proc.stderr[-4000:]
