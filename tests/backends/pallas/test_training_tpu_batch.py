"""Training with `batch = true` on the Pallas TPU design (docs/training/batched.md, "A batched GEMM on Pallas"), in Pallas's
strict TPU interpret mode on the CPU: each backward GEMM per batch entry (the unbatched kernels), the columns pass and
the chain pass over the batches' rows as one (batch M, N) matrix, a vector's gradient summed over every batch's rows.
jax.grad under jax.jit against float64 torch autograd of the reference (specgen/kinds/gemm/testing/reference.py,
batched), f32 operands (the interpreter runs no float64 kernel): batch 1 and 3, M = 1, N and K off the blocks, both
save modes, [], [bias], [activation], [bias, activation], a gated op (halves) and the other chains; the output's
gradient NaN-poisoned at one element of one batch entry reaches only that entry's rows and columns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_training_tpu import close, module, run
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

BIAS = {"op": "bias", "along": "n", "dtype": "f32", "name": "bias"}
CHAINS = {
    "plain": [],
    "bias": [BIAS],
    "gelu": [{"op": "activation", "fn": "gelu"}],
    "bias_silu": [BIAS, {"op": "activation", "fn": "silu"}],
    # the other chains: a row vector (its gradient summed over every batch's columns and entries), a residual (batch,
    # M, N), a clamp read from pre
    "chain": [{"op": "bias", "along": "m", "dtype": "f32", "name": "rbias"}, {"op": "activation", "fn": "sigmoid"},
              {"op": "scale", "by": "col", "name": "col_scale"}, {"op": "residual", "name": "res", "beta": 0.5, "dtype": "f32"},
              {"op": "clamp", "min": -1.5, "max": 1.5}],
    "gated": [{"op": "gated", "fn": "silu", "layout": "halves"}, BIAS],
}
BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}


def batch_spec(chain: str, save: str, b_major: str = "k", dtype: str = "f32", batch: bool = True) -> dict:
    """The chain's training spec (TPU v5e), batched unless `batch` is False; `dtype` the operands', the output's and
    every epilogue vector's."""
    epilogue = [{**op, "dtype": dtype} if "dtype" in op else op for op in CHAINS[chain]]
    spec = {
        "name": f"train_{'batch' if batch else 'plain'}_{chain}_{save}_{b_major}_{dtype}", "kind": "gemm", "batch": batch,
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": b_major}, "out": {"dtype": dtype},
        "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        "tile": {"m": 16, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e"],
    }
    return GemmSpec.model_validate(spec).model_dump(mode="json")


def inputs(spec: dict, shape: tuple[int, ...], seed: int = 0):
    """a, b (batch-leading, stored layouts), the epilogue's arguments, and dOut (batch, M, N), in the spec's dtype;
    shape (batch, M, N, K), or (M, N, K) for an unbatched spec (no batch dim anywhere)."""
    *lead, M, N, K = shape
    lead = tuple(lead)
    rng = np.random.default_rng(seed)
    dt = jnp.float32 if spec["a"]["dtype"] == "f32" else jnp.bfloat16
    gated = any(op["op"] == "gated" for op in spec["epilogue"])
    bn = 2 * N if gated else N
    a = rng.standard_normal((*lead, M, K)) / np.sqrt(K)
    b = rng.standard_normal((*lead, bn, K) if spec["b"]["major"] == "k" else (*lead, K, bn))
    args, names = [jnp.asarray(a, dt), jnp.asarray(b, dt)], []
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(jnp.asarray(rng.standard_normal(M if op["along"] == "m" else N), dt))
        elif op["op"] == "scale":  # a scale vector is f32 whatever the operands
            args.append(jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32))
        elif op["op"] == "residual":
            args.append(jnp.asarray(rng.standard_normal((*lead, M, N)), dt))
        else:
            continue
        names.append(op["name"])
    return args, names, jnp.asarray(rng.standard_normal((*lead, M, N)), dt)


def reference(spec: dict, args, names, grad):
    """The float64 reference's output and gradients (torch autograd, batched A @ B), in the stored layouts."""
    leaves = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_() for x in args]
    b = leaves[1].mT if spec["b"]["major"] == "k" else leaves[1]
    out = REFERENCES["gemm"](spec["epilogue"], leaves[0], b, dict(zip(names, leaves[2:], strict=True)))
    out.backward(torch.from_numpy(np.asarray(grad, np.float64)))
    return out.detach(), [x.grad for x in leaves]


def check(spec: dict, tmp_path_factory, shape, seed: int = 0, poison: bool = False, rel: float = 1e-5) -> None:
    args, names, grad = inputs(spec, shape, seed)
    if poison:  # one NaN in entry batch - 1 of dOut: that entry's dA row and dB column, every vector element it feeds
        grad = grad.at[-1, 0, 1].set(jnp.nan)
    out, grads = run(getattr(module(spec, tmp_path_factory), spec["name"]), args, grad)
    want_out, want = reference(spec, args, names, grad)
    close(out, want_out, rel, "out")
    for name, g, w, x in zip(("a", "b", *names), grads, want, args, strict=True):
        assert g.dtype == x.dtype and g.shape == x.shape, name
        got = torch.from_numpy(np.asarray(g, np.float64))
        assert torch.equal(got.isnan(), w.isnan()), f"d{name}: NaN where float64 has none (or not)"
        assert got.isnan().any() == (poison and name in ("a", "b", "bias")), name
        close(got.nan_to_num(0).numpy(), w.nan_to_num(0), rel, f"d{name}")


# (chain, save, (batch, M, N, K)): each chain in both save modes but [] and [activation] (one each); batch 1 and 3, M = 1,
# N and K off the 128 blocks (one case past them: the unbatched kernels' own tails are tests/backends/pallas/
# test_training_tpu*.py's); small shapes, as interpret mode is slow
SMALL = (3, 9, 45, 29)
CASES = [("plain", "preact", SMALL), ("bias", "recompute", (3, 1, 45, 29)), ("gelu", "recompute", (1, 9, 45, 29)),
         ("bias_silu", "preact", (3, 37, 130, 150)), ("bias_silu", "recompute", (3, 20, 45, 29)),
         ("chain", "preact", SMALL), ("chain", "recompute", (1, 1, 45, 29)), ("gated", "preact", SMALL),
         ("gated", "recompute", (3, 1, 45, 29))]


@pytest.mark.parametrize(("chain", "save", "shape"), CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_batched_gradients_equal_float64_autograd(chain: str, save: str, shape, tmp_path_factory) -> None:
    check(batch_spec(chain, save), tmp_path_factory, shape, seed=len(chain))


# bf16 operands (and output, vectors, residual): pre saved in bf16 (preact) or G rounded to bf16 for the dots, as eager's
# bf16 backward rounds it, every sum in f32; within 3e-2 of the largest magnitude of float64's (the unbatched bf16
# tests' bound, tests/backends/pallas/test_training_tpu.py)
BF16_CASES = [("bias_silu", "preact", (3, 20, 45, 29)), ("gated", "recompute", (2, 9, 45, 29)),
              ("chain", "preact", (2, 9, 45, 29))]


@pytest.mark.parametrize(("chain", "save", "shape"), BF16_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_bf16_batched_gradients(chain: str, save: str, shape, tmp_path_factory) -> None:
    check(batch_spec(chain, save, dtype="bf16"), tmp_path_factory, shape, seed=7, rel=3e-2)


def test_nan_in_one_entry_stays_there(tmp_path_factory) -> None:
    """A NaN in dOut[2] reaches dA[2]'s row, dB[2]'s column and dbias's element (the sum over every entry), as in
    float64 autograd: the other entries' gradients stay finite."""
    check(batch_spec("bias_silu", "preact"), tmp_path_factory, SMALL, seed=3, poison=True)


def test_n_major_b_and_vjp(tmp_path_factory) -> None:
    """B (batch, K, N) N-major (dB per entry in its stored layout), and jax.vjp's pullback under jit."""
    spec = batch_spec("bias_silu", "recompute", b_major="mn")
    fn = getattr(module(spec, tmp_path_factory), spec["name"])
    args, names, grad = inputs(spec, SMALL, seed=5)
    _, want = reference(spec, args, names, grad)
    got = jax.jit(lambda *xs: jax.vjp(fn, *xs)[1](grad))(*args)
    for name, g, w in zip(("a", "b", "bias"), got, want, strict=True):
        close(g, w, 1e-5, f"d{name}")


@pytest.mark.parametrize("chain", ["bias_silu", "gated"])
def test_every_backward_gemm_is_one_call_for_every_entry(chain: str, tmp_path_factory) -> None:
    """jax.grad's program holds each backward GEMM once, one pallas_call over every batch entry (the batch folded into
    its grid), and no loop (session 33 ran each per entry in a lax.map: a scan); preact: forward_pre, the columns pass,
    dgrad and wgrad. The native program (bf16, 3 x 256 x 256 x 512) lowers for TPU through Pallas's Mosaic
    lowering, each of the four a tpu_custom_call."""
    from backends.pallas.common import host_primitives

    spec = batch_spec(chain, "preact")
    fn = getattr(module(spec, tmp_path_factory), spec["name"])
    args, _, grad = inputs(spec, SMALL)
    loss = lambda *xs: jnp.sum(fn(*xs) * grad)  # noqa: E731
    host = host_primitives(jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args).jaxpr.jaxpr)
    assert "scan" not in host and "while" not in host, host
    assert host.count("pallas_call") == 4, host
    spec = batch_spec(chain, "preact", dtype="bf16")
    fn = getattr(module(spec, tmp_path_factory), spec["name"])
    args, _, grad = inputs(spec, (3, 256, 256, 512))
    native = lambda *xs: jnp.sum(fn(*xs, interpret=False).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    text = jax.jit(jax.grad(native, argnums=(0, 1, 2))).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 4, chain



def test_a_batch_of_none_without_a_columns_pass(tmp_path_factory) -> None:
    """batch = 0 with no columns pass ([] preact: G = dOut): each backward GEMM's pallas_call has an empty grid, the
    output and the gradients are empty arrays of their shapes. (A columns pass over an empty (batch M, N) fails on
    its block size: not covered.)"""
    spec = batch_spec("plain", "preact")
    args, _, grad = inputs(spec, (0, 9, 45, 29))
    out, grads = run(getattr(module(spec, tmp_path_factory), spec["name"]), args, grad)
    assert out.shape == (0, 9, 45) and [g.shape for g in grads] == [x.shape for x in args]
