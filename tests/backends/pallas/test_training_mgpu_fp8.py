"""An fp8 forward's backward on the dense Mosaic GPU design (session 32; specgen/kinds/gemm/designs/pallas/
training_mgpu.py, templates/gemm/pallas/backward_mgpu.jinja), on this CPU machine (Mosaic GPU has no interpreter: the
kernels' numbers run on a Hopper GPU, tests/gpu/test_training_mgpu_fp8_gpu.py).

A and B both e4m3 or both e5m2, K-major (the forward's PAL004 / MAJ001), the rowwise scales first, then [bias],
[activation] or both, a bf16 or f16 output: the dense Triton and Pallas TPU designs' meaning (docs/training/triton.md, "An fp8
forward"). Here: each role's Config the one check resolved (the pre GEMM over 8-bit A and B, recompute's output f32,
dgrad and wgrad 16-bit); `specgen compile`'s hook lowering each role to its plan SMEM to the byte; jax.grad under
jax.jit lowered for CUDA with every backward kernel (M = 1 among the shapes); the glue (U, G_b, G_a, dbias, the 16-bit
copies, the scales' None) under jax.grad against float64 autograd of the dequantized forward with the kernels as jnp
models that refuse an operand of another dtype; TRN001 lifted on pallas:gpu_sm90 and still naming another fp8 chain."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_mgpu_module import render
from specgen.check import check_specs
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.kinds.gemm.designs.pallas.training_mgpu import plan_mgpu_training
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import target_info

JNP = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2, "bf16": jnp.bfloat16, "f16": jnp.float16,
       "f32": jnp.float32}
CHAINS = {
    "bias_gelu_tanh": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
    "bias_silu": [{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}],
    "bias": [{"op": "bias", "dtype": "f32"}],
}


def fp8_spec(name: str, chain: str, save: str, dtype: str, out: str, tiles: dict | None = None) -> dict:
    return GemmSpec.model_validate({
        "name": f"mf8_{name}", "kind": "gemm", "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": "k"},
        "out": {"dtype": out}, "epilogue": [{"op": "scale", "by": "rowcol"}, *CHAINS[chain]],
        "training": {"save": save, **(tiles or {})}, "tile": {"m": 128, "n": 128, "k": 64},
        "schedule": {"persistent": True, "group_m": 8}, "targets": ["pallas:gpu_sm90"]}).model_dump(mode="json")


# e4m3 + bf16 bias + GELU-tanh preact; e5m2 + f32 bias + SiLU recompute into f16 (pre in f32) with a 64-row dgrad tile;
# e4m3 with the bias alone (U = dOut: no pre GEMM)
FORMS = {
    "e4m3_bias_gelu_preact": fp8_spec("e4m3_bias_gelu_preact", "bias_gelu_tanh", "preact", "fp8_e4m3", "bf16"),
    "e5m2_bias_silu_recompute": fp8_spec("e5m2_bias_silu_recompute", "bias_silu", "recompute", "fp8_e5m2", "f16",
                                         {"dgrad": {"tile": {"m": 64, "n": 128, "k": 64}}}),
    "e4m3_bias": fp8_spec("e4m3_bias", "bias", "preact", "fp8_e4m3", "bf16"),
}
SHAPES = {"e4m3_bias_gelu_preact": (300, 520, 200), "e5m2_bias_silu_recompute": (1, 48, 40), "e4m3_bias": (37, 200, 72)}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_fp8_train")
    return {name: render(spec, tmp) for name, spec in FORMS.items()}


def test_the_conversion_to_the_output_dtype_is_exact() -> None:
    """Every finite e4m3 and e5m2 value is a bf16 and an f16 value: the 16-bit copies of A and B that dgrad and wgrad
    read (a jnp astype) lose nothing."""
    for fp8 in (jnp.float8_e4m3fn, jnp.float8_e5m2):
        values = jnp.asarray(np.arange(256, dtype=np.uint8)).view(fp8)
        exact = np.asarray(values.astype(jnp.float32), np.float64)
        finite = np.isfinite(exact)
        for out in (jnp.bfloat16, jnp.float16):
            got = np.asarray(values.astype(out).astype(jnp.float32), np.float64)
            assert np.array_equal(got[finite], exact[finite]), (fp8, out)


def test_each_role_runs_its_checked_config_and_lowers_to_its_smem(modules) -> None:
    """TRAIN_GEMMS: each companion's resolved Config; C's dtype the output's (forward_pre, dgrad, wgrad) or f32
    (recompute's pre, no dOut barriers); dgrad reads B^T MN-major and stores dA as it lies, wgrad reads A^T MN-major and
    stores dB^T (B K-major). `specgen compile`'s hook
    lowers the forward and every role for CUDA (the pre GEMM over 8-bit A and B with the scales), each to exactly its
    plan SMEM."""
    info = target_info("pallas:gpu_sm90")
    for name, (mod, resolved) in modules.items():
        out = JNP[FORMS[name]["out"]["dtype"]]
        assert mod.METADATA["training"]["fp8_backward_dtype"] == out.__name__ and mod.OPERAND is out
        for c in resolved.companions:
            cfg, x_k, y_k, transposed, dtype = mod.TRAIN_GEMMS[c.companion]
            want = mgpu_config(c)
            assert (cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.out_swizzle) == (want.tile_m, want.tile_n, want.tile_k,
                                                                              want.out_swizzle), (name, c.companion)
            assert dtype == (jnp.float32 if c.companion == "recompute" else out), (name, c.companion)
            want_orient = {"dgrad": (True, False, False), "wgrad": (False, False, True)}.get(c.companion, (True, True, False))
            assert (x_k, y_k, transposed) == want_orient, (name, c.companion)  # B^T, A^T read MN-major: 16-bit copies
            assert mod.METADATA["training"]["gemms"][c.companion]["smem_bytes"] == c.budget.total <= c.budget.capacity
        rows = compile_module(mod, info)
        assert [r.kernel for r in rows] == [mod.NAME, *(f"{mod.NAME}[{role}]" for role in mod.TRAIN_GEMMS)]
        for r in rows:
            assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)


def structs(spec: dict, shape: tuple[int, int, int]) -> list:
    M, N, K = shape
    fp8 = JNP[spec["a"]["dtype"]]
    bias = JNP[spec["epilogue"][1]["dtype"]]
    return [jax.ShapeDtypeStruct((M, K), fp8), jax.ShapeDtypeStruct((N, K), fp8), jax.ShapeDtypeStruct((M,), jnp.float32),
            jax.ShapeDtypeStruct((N,), jnp.float32), jax.ShapeDtypeStruct((N,), bias)]


def test_grad_under_jit_lowers_with_every_backward_kernel(modules) -> None:
    """jax.grad of the entry under jax.jit traces the custom_vjp and lowers for CUDA (jax's Mosaic GPU lowering, on
    this CPU) over M, N, K off every tile, M = 1 and N under one tile, each role's kernel in the program and no columns
    pass (U, G_b, G_a are jnp); dA and dB come back in the output's dtype with A's and B's shapes."""
    for name, (mod, _) in modules.items():
        spec, args = FORMS[name], structs(FORMS[name], SHAPES[name])
        loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
        text = grads.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert all(f"{mod.NAME}_{role}" in text for role in mod.TRAIN_GEMMS) and "grad_cols" not in text, name
        got = jax.eval_shape(grads, *args)
        out = JNP[spec["out"]["dtype"]]
        assert [(g.shape, g.dtype) for g in got] == [(x.shape, out if i < 2 else x.dtype) for i, x in enumerate(args)]


# --- the glue, with the kernels as jnp models -------------------------------------------------------------------
def _act(spec: dict, x):
    fn = spec["epilogue"][-1].get("fn")
    if fn == "gelu_tanh":
        return jax.nn.gelu(x, approximate=True)
    return x * jax.nn.sigmoid(x) if fn == "silu" else x


def stand_ins(mod: object, spec: dict) -> None:
    """`_launch` (the forward) and `_gemm` (every role) as jnp models of their contracts: the pre GEMM takes the 8-bit
    A and B and the scales (and the bias), dgrad and wgrad only operands of the output's dtype (the 16-bit copies)."""
    operand = mod.OPERAND  # type: ignore[attr-defined]

    def forward(a, b, scale_a, scale_b, bias):  # (a batched spec's (batch, ...) A and B too)
        acc = jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32).mT, precision="highest")
        return _act(spec, acc * scale_a.reshape(-1, 1) * scale_b.reshape(1, -1) + bias.reshape(1, -1).astype(jnp.float32))

    def launch(a, b, scale_a, scale_b, bias):
        return forward(a, b, scale_a, scale_b, bias).astype(operand)

    def gemm(role, m, n, k, x, y, *extra):
        _, x_k, y_k, transposed, c_dtype = mod.TRAIN_GEMMS[role]  # type: ignore[attr-defined]
        if role in ("forward_pre", "recompute"):
            assert x.dtype == y.dtype == JNP[spec["a"]["dtype"]] and len(extra) == 3, (role, x.dtype)
            sa, sb, bias = extra
            acc = jnp.dot(x.astype(jnp.float32), y.astype(jnp.float32).T, precision="highest")
            pre = acc * sa.reshape(-1, 1) * sb.reshape(1, -1) + bias.astype(jnp.float32)
            return (_act(spec, pre).astype(operand), pre.astype(c_dtype)) if role == "forward_pre" else pre.astype(c_dtype)
        assert x.dtype == y.dtype == operand and not extra, (role, x.dtype, y.dtype)
        xs, ys = (x if x_k else x.T), (y.T if y_k else y)
        assert xs.shape == (m, k) and ys.shape == (k, n), (role, xs.shape, ys.shape)
        c = jnp.dot(xs.astype(jnp.float32), ys.astype(jnp.float32), precision="highest").astype(c_dtype)
        return c.T if transposed else c

    mod._launch, mod._gemm = launch, gemm  # type: ignore[attr-defined]


def f64(x) -> torch.Tensor:
    return torch.from_numpy(np.asarray(np.asarray(x).astype(np.float32), np.float64))


def dequantized_reference(spec: dict, args: list, dout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """float64 autograd of act(A_d @ B_d^T + bias) over the dequantized operands A_d = A scale_a[:, None] and B_d =
    B scale_b[:, None] (B stored (N, K): scale_b per row of it) for `dout` (the GPU test's reference too):
    (out, {"a": dA_d, "b": dB_d, "bias": dbias})."""
    ad = (f64(args[0]) * f64(args[2])[:, None]).requires_grad_()
    bd = (f64(args[1]) * f64(args[3])[:, None]).requires_grad_()
    bias = f64(args[4]).requires_grad_()
    x = ad @ bd.mT + bias  # (.mT: a batched spec's (batch, N, K) B too)
    fn = spec["epilogue"][-1].get("fn")
    x = torch.nn.functional.gelu(x, approximate="tanh") if fn == "gelu_tanh" else torch.nn.functional.silu(x) if fn else x
    x.backward(f64(dout))
    return x.detach(), {"a": ad.grad, "b": bd.grad, "bias": bias.grad}


@pytest.mark.parametrize("name", list(FORMS))
def test_the_vjp_glue_against_float64_autograd(modules, name) -> None:
    """jax.grad under jax.jit of the entry (a fresh copy of the module, its kernels the jnp models above) against
    float64 autograd of act(A_d @ B_d + bias) over the dequantized operands A scale_a[:, None] and B scale_b[None, :]:
    dA, dB (the output's dtype) and dbias within the 16-bit backward's bound, the scales' gradients exact zeros."""
    mod, _ = modules[name]
    spec = FORMS[name]
    mod = load_rendered(mod.__file__, f"_mf8_model_{name}")
    stand_ins(mod, spec)
    M, N, K = (37, 200, 72)
    rng = np.random.default_rng(3)
    fp8, out = JNP[spec["a"]["dtype"]], JNP[spec["out"]["dtype"]]
    args = [jnp.asarray(rng.standard_normal((M, K)) * 2, fp8), jnp.asarray(rng.standard_normal((N, K)) * 2, fp8),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32),
            jnp.asarray(rng.standard_normal(N), JNP[spec["epilogue"][1]["dtype"]])]
    w = jnp.asarray(rng.standard_normal((M, N)), jnp.float32)
    loss = lambda *xs: jnp.sum(mod._call(*xs).astype(jnp.float32) * w)  # noqa: E731
    got = jax.jit(jax.grad(loss, argnums=tuple(range(5))))(*args)
    _, want_grads = dequantized_reference(spec, args, w)
    for what, g, want, dtype in (("a", got[0], want_grads["a"], out), ("b", got[1], want_grads["b"], out),
                                 ("bias", got[4], want_grads["bias"], args[4].dtype)):
        assert g.dtype == dtype, (what, g.dtype)
        err = (f64(g) - want).abs().max().item()
        assert err <= 1.5e-2 * max(want.abs().max().item(), 1.0), (what, err)
    assert got[2].shape == (M,) and got[3].shape == (N,) and not jnp.any(got[2]) and not jnp.any(got[3])


# --- check's side ----------------------------------------------------------------------------------------------
def test_trn001_passes_the_fp8_forms_and_names_the_rest() -> None:
    """Each form checks clean on pallas:gpu_sm90 (TRN001 lifted: `renders_fp8_training_on`); an fp8 chain beyond
    [bias, activation] is still TRN001 there, naming it, and the plan refuses it too (a render that skipped check
    emits no wrong backward)."""
    for name, spec in FORMS.items():
        (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
        errors = [str(d) for d in check_specs([ls]).diagnostics if d.severity == "error"]
        assert not errors, (name, errors)
    spec = FORMS["e4m3_bias_gelu_preact"]
    clamp = {**spec, "epilogue": [*spec["epilogue"], {"op": "clamp", "max": 4.0}]}
    (ls,) = load_text(json.dumps({"kernels": [clamp]}), "<test>", ".json")
    (trn,) = [d for d in check_specs([ls]).diagnostics if d.rule == "TRN001"]
    assert "training with fp8_e4m3 operands and epilogue ['scale', 'bias along n', 'activation', 'clamp']" in trn.message
    target = ls.spec.targets[0]
    with pytest.raises(ValueError, match=r"'clamp'\].*\(TRN001\)"):
        plan_mgpu_training(ls.spec, resolve(ls.spec, target), mgpu_config, {})
