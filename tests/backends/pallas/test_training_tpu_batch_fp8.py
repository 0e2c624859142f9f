"""A batched fp8 forward's backward on the dense Pallas TPU design (session 34; templates/gemm/pallas/batch_backward.jinja's
`tpu_vjp`), in Pallas's strict TPU interpreter on the CPU (uninitialized VMEM and reads past an array's end are NaN; no
TPU here). The Triton design's meaning (docs/training/batched.md, "A batched fp8 forward"): scale_a (M,) and scale_b (N,) shared
by the batches, dA[i] and dB[i] the gradients of the dequantized A[i] scale_a[:, None] and B[i] scale_b[None, :] in the
output's dtype (bf16: the TPU's fp8 backward dots), the bias gradient U's column sum over every batch's rows, the scales
none. jax.grad under jax.jit against float64 torch autograd of the batched dequantized forward: batch 1 and 3, M = 1, N
and K off the blocks (N past one), both save modes, an f32 and a bf16 bias, e4m3 and e5m2 (v5e), B N-major; a NaN in one entry's dOut reaching only that entry's rows and columns (and the bias's element); check's side."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_training_tpu import module
from backends.pallas.test_training_tpu_fp8 import JNP, close, f64, fp8_spec, reference  # (batched too: .mT)
from specgen.check import check_specs
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


def batch_fp8_spec(name: str, chain: str, save: str, a: str = "fp8_e4m3", b: str = "fp8_e4m3", majors: str = "k_k",
                   target: str = "pallas:tpu_v7x") -> dict:
    spec = fp8_spec(name, chain, save, a, b, majors, "bf16", target)
    return {**spec, "name": f"tbf8_{name}", "batch": True}


# (name, chain, save, a, b, majors, target, (batch, M, N, K))
FORMS = [
    ("e4m3_bias_gelu_preact", "bias_gelu_tanh", "preact", "fp8_e4m3", "fp8_e4m3", "k_k", "pallas:tpu_v7x", (3, 9, 45, 29)),
    ("e4m3_bias_silu_recompute", "bias_silu", "recompute", "fp8_e4m3", "fp8_e4m3", "k_mn", "pallas:tpu_v7x", (3, 1, 130, 29)),
    ("e5m2_gelu_recompute", "gelu_tanh", "recompute", "fp8_e5m2", "fp8_e5m2", "k_k", "pallas:tpu_v5e", (1, 1, 45, 29)),
]
SPECS = {f[0]: batch_fp8_spec(*f[:7]) for f in FORMS}


def inputs(spec: dict, shape: tuple[int, int, int, int], seed: int = 0) -> tuple[list[jax.Array], jax.Array]:
    """a (batch, M, K), b (batch, N, K) or (batch, K, N) in fp8, scale_a (M,) and scale_b (N,) shared by the batches,
    the bias (N,) where the chain has one, and dOut (batch, M, N) in bf16."""
    batch, M, N, K = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, M, K)) * 2
    b = rng.standard_normal((batch, N, K) if spec["b"]["major"] == "k" else (batch, K, N)) * 2
    args = [jnp.asarray(a, JNP[spec["a"]["dtype"]]), jnp.asarray(b, JNP[spec["b"]["dtype"]]),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32)]
    bias = next((op for op in spec["epilogue"] if op["op"] == "bias"), None)
    if bias is not None:
        args.append(jnp.asarray(rng.standard_normal(N), JNP.get(bias["dtype"], jnp.float32)))
    return args, jnp.asarray(rng.standard_normal((batch, M, N)), jnp.bfloat16)


def grads_of(fn, args: list[jax.Array], grad: jax.Array):
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    return jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*args)


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_batched_gradients_are_each_entrys_dequantized_operands(form: tuple, tmp_path_factory) -> None:
    """jax.grad of <out, dOut> under one jax.jit: dA[i], dB[i] (bf16, the fp8 operands' stored shapes) and dbias (its
    dtype, over every entry's rows) against float64 autograd within the bf16 backward's bound; the scales' gradients
    exact zeros of their shapes. The first form's dOut holds a NaN in entry 2: it reaches dA[2]'s row, dB[2]'s column
    and dbias's element, as in float64 autograd, and no other entry's gradients."""
    name, shape = form[0], form[-1]
    spec = SPECS[name]
    args, grad = inputs(spec, shape, seed=len(name))
    poison = name == FORMS[0][0]
    if poison:
        grad = grad.at[2, 4, 5].set(jnp.nan)
    out, grads = grads_of(getattr(module(spec, tmp_path_factory), spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(f64(out).nan_to_num(0).numpy(), want_out, 1.5e-2, "out")
    for what, g, w, x in zip(("a", "b", "bias")[:len(want)], [grads[0], grads[1], *grads[4:]], want, [args[0], args[1], *args[4:]], strict=True):
        assert g.dtype == (x.dtype if what == "bias" else jnp.bfloat16) and g.shape == x.shape, (what, g.dtype, g.shape)
        g = f64(g)
        assert torch.equal(g.isnan(), w.isnan()) and bool(g.isnan().any()) is poison, f"d{what}: NaN where float64 has none (or not)"
        close(g.nan_to_num(0).numpy(), w.nan_to_num(0), 1.5e-2, f"d{what}")
    if poison:
        assert not f64(grads[0])[:2].isnan().any() and not f64(grads[1])[:2].isnan().any()
    for what, g, x in zip(("scale_a", "scale_b"), grads[2:4], args[2:4], strict=True):
        assert g.shape == x.shape and not jnp.any(g), f"d{what}: the scales get no gradient (zeros)"


def test_check_accepts_the_forms() -> None:
    """TRN001 lifted on the TPU targets for a batched fp8 forward (`renders_batched_fp8_training`); no other error."""
    import json

    for name, spec in SPECS.items():
        (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
        errors = [str(d) for d in check_specs([loaded]).diagnostics if d.severity == "error"]
        assert not errors, (name, errors)
