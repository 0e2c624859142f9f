"""A batched fp8 forward's backward on the Mosaic GPU target (session 34; templates/gemm/pallas/batch_backward.jinja's
`mgpu_vjp`), on this CPU machine (Mosaic GPU has no interpreter: numerics on a Hopper GPU,
tests/gpu/test_training_mgpu_batch_gpu.py's fp8 cases). The Triton design's meaning: scale_a (M,) and scale_b (N,) shared
by the batches; U, G_b = U scale_b and G_a = scale_a U over (batch, M, N) in jnp, dbias U's column sum over every entry's
rows; dgrad and wgrad per batch entry (the unbatched 16-bit kernels, `_per_batch`) over 16-bit copies of B and A; the
scales no gradient. Here: `specgen compile`'s hook lowers the batched fp8 forward and every role (preact) to exactly its
plan SMEM; jax.grad under jax.jit of the batched entry lowers for CUDA with every role's kernel; the glue (with the kernels as
jnp models refusing an operand of another dtype, each called on one entry) against float64 autograd of the batched
dequantized forward, a NaN in dOut[-1] staying in entry -1."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_mgpu_module import render
from backends.pallas.test_training_mgpu_fp8 import JNP, dequantized_reference, f64, fp8_spec
from backends.pallas.test_training_mgpu_fp8 import stand_ins as fp8_stand_ins
from backends.pallas.test_training_tpu import close
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.targets import target_info

# e4m3 + bf16 bias + GELU-tanh preact; e5m2 + f32 bias + SiLU recompute into f16 (pre in f32); e4m3 + the bias alone
# (U = dOut: no pre GEMM)
FORMS = {
    "e4m3_bias_gelu_preact": ("bias_gelu_tanh", "preact", "fp8_e4m3", "bf16"),
    "e5m2_bias_silu_recompute": ("bias_silu", "recompute", "fp8_e5m2", "f16"),
    "e4m3_bias": ("bias", "preact", "fp8_e4m3", "bf16"),
}
SPECS = {name: {**fp8_spec(f"b_{name}", *form), "batch": True} for name, form in FORMS.items()}
SHAPES = {"e4m3_bias_gelu_preact": (3, 37, 200, 72), "e5m2_bias_silu_recompute": (3, 1, 48, 40), "e4m3_bias": (1, 20, 130, 72)}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_batch_fp8_train")
    return {name: render(spec, tmp) for name, spec in SPECS.items()}


def structs(spec: dict, shape: tuple[int, int, int, int]) -> list:
    batch, M, N, K = shape
    fp8 = JNP[spec["a"]["dtype"]]
    return [jax.ShapeDtypeStruct((batch, M, K), fp8), jax.ShapeDtypeStruct((batch, N, K), fp8),
            jax.ShapeDtypeStruct((M,), jnp.float32), jax.ShapeDtypeStruct((N,), jnp.float32),
            jax.ShapeDtypeStruct((N,), JNP[spec["epilogue"][1]["dtype"]])]


def test_each_role_lowers_to_its_plan_smem_and_grad_lowers_with_every_role(modules) -> None:
    """`specgen compile`'s hook lowers the batched fp8 forward and every backward role of the preact form (the unbatched
    kernels run per entry: forward_pre over 8-bit A and B, dgrad and wgrad 16-bit) for CUDA, each to exactly its plan
    SMEM; jax.grad of
    the batched entry under jax.jit lowers with each role's kernel and no columns pass (U, G_b, G_a are jnp), dA and dB
    in the output's dtype with A's and B's shapes, the scales' and the bias's gradients in theirs."""
    info = target_info("pallas:gpu_sm90")
    for name, (mod, _) in modules.items():
        if name == "e4m3_bias_gelu_preact":  # (the recompute form's pre GEMM is the unbatched fp8 module's kernel)
            rows = compile_module(mod, info)
            assert [r.kernel for r in rows] == [mod.NAME, *(f"{mod.NAME}[{role}]" for role in mod.TRAIN_GEMMS)], name
            for r in rows:
                assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)
        args = structs(SPECS[name], SHAPES[name])
        loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
        text = grads.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert all(f"{mod.NAME}_{role}" in text for role in mod.TRAIN_GEMMS) and "grad_cols" not in text, name
        out = JNP[SPECS[name]["out"]["dtype"]]
        got = jax.eval_shape(grads, *args)
        assert [(g.shape, g.dtype) for g in got] == [(x.shape, out if i < 2 else x.dtype) for i, x in enumerate(args)], name


def stand_ins(mod: object, spec: dict) -> None:
    """The unbatched fp8 test's jnp models (`_launch` the forward, here batched; `_gemm` every role, the pre GEMM over
    the 8-bit A and B and the scales, dgrad and wgrad over operands of the output's dtype only), each GEMM checked to
    get every entry's operands in one call (3-D, as the kernel walking batch x tiles takes them) and the shared vectors
    whole; the model runs entry by entry."""
    fp8_stand_ins(mod, spec)
    gemm = mod._gemm  # type: ignore[attr-defined]

    def every_entry(role, m, n, k, x, y, *extra):
        assert x.ndim == 3 and y.ndim == 3 and x.shape[0] == y.shape[0], (role, x.shape, y.shape)
        assert [v.shape for v in extra] == ([(m,), (n,), (n,)] if extra else []), (role, [v.shape for v in extra])
        outs = [gemm(role, m, n, k, x[i], y[i], *extra) for i in range(x.shape[0])]
        return tuple(jnp.stack(parts) for parts in zip(*outs, strict=True)) if isinstance(outs[0], tuple) else jnp.stack(outs)

    mod._gemm = every_entry  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(FORMS))
def test_the_batched_vjp_glue_against_float64_autograd(modules, name) -> None:
    """jax.grad under jax.jit of the batched entry (a fresh copy of the module, its kernels the jnp models above)
    against float64 autograd of act(A_d[i] @ B_d[i]^T + bias), A_d = A scale_a[:, None], B_d = B scale_b[:, None]
    (B stored (batch, N, K)): dA, dB (the output's dtype) and dbias within the 16-bit backward's bound, the scales'
    gradients exact zeros; a NaN in dOut[-1] reaches entry -1's dA and dB and dbias's element only."""
    spec = SPECS[name]
    mod = load_rendered(modules[name][0].__file__, f"_mbf8_model_{name}")
    stand_ins(mod, spec)
    batch, M, N, K = SHAPES[name]
    rng = np.random.default_rng(4)
    fp8 = JNP[spec["a"]["dtype"]]
    args = [jnp.asarray(rng.standard_normal((batch, M, K)) * 2, fp8), jnp.asarray(rng.standard_normal((batch, N, K)) * 2, fp8),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32),
            jnp.asarray(rng.standard_normal(N), JNP[spec["epilogue"][1]["dtype"]])]
    dout = jnp.asarray(rng.standard_normal((batch, M, N)), jnp.float32).at[-1, 0, 1].set(jnp.nan)
    loss = lambda *xs: jnp.sum(mod._call(*xs).astype(jnp.float32) * dout)  # noqa: E731
    got = jax.jit(jax.grad(loss, argnums=tuple(range(5))))(*args)
    _, want = dequantized_reference(spec, args, dout)  # (batched: scale_a and scale_b shared by the entries)
    out = JNP[spec["out"]["dtype"]]
    for what, g, w, arg in (("a", got[0], want["a"], args[0]), ("b", got[1], want["b"], args[1]), ("bias", got[4], want["bias"], args[4])):
        assert g.shape == arg.shape and g.dtype == (out if what != "bias" else arg.dtype), (what, g.shape, g.dtype)
        g = f64(g)
        assert torch.equal(g.isnan(), w.isnan()) and g.isnan().any(), f"d{what}: NaN where float64 has none (or not)"
        if what != "bias":
            assert not g[:-1].isnan().any(), what  # entry -1's only
        close(g.nan_to_num(0).numpy(), w.nan_to_num(0), 2e-2, f"d{what}")
    assert not jnp.any(got[2]) and not jnp.any(got[3])  # the scales: no gradient
