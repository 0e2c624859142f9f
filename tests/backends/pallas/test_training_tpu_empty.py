"""No rows on the Pallas TPU training modules (issue 38's backward, session 34): M = 0 unbatched and a batch of 0 (and
M = 0 in a batch) give an empty output and empty or zero gradients (a sum over no rows is 0: dB, a bias's and a column
vector's gradients), never a traceback (the columns pass and the GEMMs sized a block of min(M, BLOCK_M) = 0 rows and
divided by it). 16-bit, fp8, a chain and a gated op, in both save modes, jax.grad under jax.jit in Pallas's TPU
interpreter; K = 0 is refused with a clear error (the epilogue of an empty product has no K step to run in)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from backends.pallas.common import render_module
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.gemm.spec import GemmSpec

BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}
BIAS = {"op": "bias", "along": "n", "dtype": "f32"}
# name: (operands' dtype, epilogue); each in both save modes, unbatched and batched
FORMS = {
    "bf16": ("bf16", [BIAS, {"op": "activation", "fn": "gelu_tanh"}]),
    "fp8": ("fp8_e4m3", [{"op": "scale", "by": "rowcol"}, BIAS, {"op": "activation", "fn": "silu"}]),
    "chain": ("f32", [{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "scale", "by": "col"},
                      {"op": "activation", "fn": "sigmoid"}, {"op": "residual", "dtype": "f32", "beta": 0.5},
                      {"op": "scale", "by": "scalar"}]),
    "gated": ("bf16", [{"op": "gated", "fn": "silu", "layout": "halves"}, BIAS]),
}
CASES = [(form, save, batch) for form in FORMS for save in ("preact", "recompute") for batch in (False, True)]


def empty_spec(form: str, save: str, batch: bool) -> dict:
    dtype, epilogue = FORMS[form]
    fp8 = dtype.startswith("fp8")
    return GemmSpec.model_validate({
        "name": f"tempty_{form}_{save}{'_batch' if batch else ''}", "kind": "gemm", "batch": batch,
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": "k"}, "out": {"dtype": "bf16" if fp8 else dtype},
        "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        "tile": {"m": 32 if fp8 else 16, "n": 128, "k": 128}, "targets": ["pallas:tpu_v7x" if fp8 else "pallas:tpu_v5e"],
    }).model_dump(mode="json")


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("empty_train")
    return {case: render_module(empty_spec(*case), out) for case in CASES}


def arrays(spec: dict, lead: tuple[int, ...], m: int, n: int, k: int) -> tuple[list[jax.Array], jax.Array]:
    """The entry's arguments (a (lead, M, K), b (lead, N or 2N, K), then the epilogue's: vectors (M,) / (N,) shared by
    the batches, a residual (lead, M, N), a scalar) on random data, and dOut (lead, M, N)."""
    rng = np.random.default_rng(0)
    dtype = JNP_DTYPES[spec["a"]["dtype"]]
    bn = 2 * n if any(op["op"] == "gated" for op in spec["epilogue"]) else n
    args = [jnp.asarray(rng.standard_normal((*lead, m, k)), dtype), jnp.asarray(rng.standard_normal((*lead, bn, k)), dtype)]
    for arg in GemmSpec.model_validate(spec).runtime_args():
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        args.append(jnp.asarray(rng.uniform(0.5, 1.5, shape), JNP_DTYPES[arg.dtype]))
    return args, jnp.asarray(rng.standard_normal((*lead, m, n)), JNP_DTYPES[spec["out"]["dtype"]])


def grads_of(fn, args: list[jax.Array], grad: jax.Array):
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    return jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*args)


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_no_rows_give_empty_or_zero_gradients(case: tuple, modules: dict) -> None:
    spec = empty_spec(*case)
    # Pallas's plain interpreter: a batch of 0 still traces the per-entry kernels (lax.map's body), lowered faster there
    fn = functools.partial(getattr(modules[case], spec["name"]), interpret=True)
    # unbatched: M = 0; batched: a batch of 0, and M = 0 in a batch of 2
    for lead, m in ([((0,), 9), ((2,), 0)] if case[2] else [((), 0)]):
        args, grad = arrays(spec, lead, m, 45, 29)
        out, grads = grads_of(fn, args, grad)
        assert out.shape == (*lead, m, 45) and out.dtype == JNP_DTYPES[spec["out"]["dtype"]]
        for i, (g, x) in enumerate(zip(grads, args, strict=True)):
            assert g.shape == x.shape, (lead, m, i)
            # the sum over no rows: exactly 0 (dB, the bias's and the column scale's gradients); the rest is empty
            assert not np.asarray(g, np.float32).any(), (lead, m, i)
            if x.dtype not in (jnp.float8_e4m3fn,) and x.ndim:  # fp8's dA / dB are the 16-bit output's dtype; a scalar's f32
                assert g.dtype == x.dtype, (lead, m, i)


def test_k_zero_is_refused_clearly(modules: dict) -> None:
    spec = empty_spec("bf16", "preact", False)
    args, grad = arrays(spec, (), 5, 45, 0)
    with pytest.raises(ValueError, match=r"tempty_bf16_preact: K = 0 .* need K >= 1"):
        grads_of(getattr(modules[("bf16", "preact", False)], spec["name"]), args, grad)
    with pytest.raises(ValueError, match=r"K = 0"):  # the forward alone (recompute's primal is the forward kernel)
        modules[("bf16", "recompute", False)].tempty_bf16_recompute(*args)


def test_mosaic_gpu_backward_lowers_with_no_rows() -> None:
    """Mosaic GPU's path needed no guard: jax.grad of the catalogue training module's entry at M = 0 traces and lowers
    for CUDA on the CPU (its kernels are sized by the config's tiles, never by min(M, tile)), every gradient in its
    argument's shape (a batch of 0 and the fp8, gated and chain forms were checked the same way by hand, session 34)."""
    import importlib

    mod = importlib.import_module("generated.pallas.gpu_sm90.linear_gelu_train_mgpu")
    args = [jax.ShapeDtypeStruct((0, 72), jnp.bfloat16), jax.ShapeDtypeStruct((200, 72), jnp.bfloat16),
            jax.ShapeDtypeStruct((200,), jnp.bfloat16)]
    grads = jax.jit(jax.grad(lambda *xs: jnp.sum(mod._call(*xs).astype(jnp.float32)), argnums=(0, 1, 2)))
    grads.trace(*args).lower(lowering_platforms=("cuda",))
    assert [(g.shape, g.dtype) for g in jax.eval_shape(grads, *args)] == [(x.shape, x.dtype) for x in args]
