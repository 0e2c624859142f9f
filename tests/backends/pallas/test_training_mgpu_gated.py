"""A gated epilogue's backward (SwiGLU, GeGLU-tanh; issue 38) on the Mosaic GPU target (pallas:gpu_sm90), on this CPU
machine: forward_pre and recompute read a gate and an up tile of B's gated view (two accumulators, as the gated
forward) and store pre / G as an (M, 2, N) array; G goes to dgrad and wgrad in B's layout (halves or interleaved), the
plain GEMMs over 2N; dbias is dOut's column sum. Here: each role's Config equal to what check resolved, jax 0.10.2's
Mosaic GPU lowering of every role for CUDA to exactly its plan SMEM, jax.grad under jax.jit lowering over odd shapes
with every role's kernel in the program, and the custom_vjp's glue (pre's halves, G's layout, dbias, each gradient's
orientation) against float64 torch autograd with each role's kernel replaced by a jnp model of its contract (the
kernels themselves run on a Hopper GPU: tests/gpu/test_training_mgpu_gated_gpu.py). TRN001's cases: rule_cases.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from backends.pallas.test_mgpu_module import render
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.targets import target_info

# name: (fn, layout, save, a major, b major, bias): both layouts in both save modes, both majors of A and B
FORMS = {
    "mgg_silu_pre": ("silu", "halves", "preact", "k", "k", True),
    "mgg_gelu_rec_il": ("gelu_tanh", "interleaved", "recompute", "mn", "k", False),
    "mgg_silu_rec_mn": ("silu", "halves", "recompute", "k", "mn", True),
    "mgg_gelu_pre_il": ("gelu_tanh", "interleaved", "preact", "k", "k", True),
}
ACTS = {"silu": jax.nn.silu, "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True)}


def form_spec(name: str) -> dict:
    fn, layout, save, a, b, bias = FORMS[name]
    epilogue = [{"op": "gated", "fn": fn, "layout": layout}] + ([{"op": "bias", "along": "n", "dtype": "bf16"}] if bias else [])
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b},
            "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save},
            "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
            "targets": ["pallas:gpu_sm90"]}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_gated_train")
    return {name: render(form_spec(name), tmp) for name in FORMS}


def test_each_role_runs_the_config_check_resolved(modules) -> None:
    """TRAIN_GEMMS: the pre role (forward_pre or recompute) is checked as the gated GEMM (a gate and an up B tile a
    stage: its SMEM), dgrad and wgrad as the plain GEMMs over 2N; METADATA names the layout."""
    for name, (mod, resolved) in modules.items():
        fn, layout, save, *_ = FORMS[name]
        pre = "forward_pre" if save == "preact" else "recompute"
        assert set(mod.TRAIN_GEMMS) == {pre, "dgrad", "wgrad"} == {c.companion for c in resolved.companions}
        assert mod.METADATA["training"]["gated"] == layout and mod.METADATA["training"]["activation"] == fn
        for c in resolved.companions:
            cfg, want = mod.TRAIN_GEMMS[c.companion][0], mgpu_config(c)
            for field in ("tile_m", "tile_n", "tile_k", "out_slots", "a_swizzle", "b_swizzle", "smem_bytes"):
                assert getattr(cfg, field) == getattr(want, field), (name, c.companion, field)
        # the gated GEMM stages two B tiles a step: more SMEM than dgrad's plain one at the same tile
        assert mod.TRAIN_GEMMS[pre][0].smem_bytes > mod.TRAIN_GEMMS["dgrad"][0].smem_bytes


def test_compile_lowers_each_role_to_its_plan_smem(modules) -> None:
    """`specgen compile`'s hook lowers the gated forward and every backward GEMM for CUDA (jax 0.10.2's Mosaic GPU
    lowering: the gated pipeline's three inputs, pre's and G's stores through the squeezed middle index, recompute's
    dOut through the staging slots), each to exactly its plan SMEM."""
    info = target_info("pallas:gpu_sm90")
    for name in ("mgg_silu_pre", "mgg_gelu_rec_il"):
        mod = modules[name][0]
        rows = compile_module(mod, info)
        assert [r.kernel for r in rows] == [name, *(f"{name}[{role}]" for role in mod.TRAIN_GEMMS)]
        for r in rows:
            assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)


def arg_structs(spec: dict, M: int, N: int, K: int) -> list:
    a = jax.ShapeDtypeStruct((M, K) if spec["a"]["major"] == "k" else (K, M), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((2 * N, K) if spec["b"]["major"] == "k" else (K, 2 * N), jnp.bfloat16)
    return [a, b, *([jax.ShapeDtypeStruct((N,), jnp.bfloat16)] if len(spec["epilogue"]) > 1 else [])]


def test_grad_under_jit_lowers_with_every_role(modules) -> None:
    """jax.grad of the entry's call under jax.jit lowers for CUDA over odd shapes (M, N, K off every tile; M = 1, N
    under one tile), every role's kernel in the program, the gradients in the arguments' shapes."""
    for (name, (mod, _)), (M, N, K) in zip(modules.items(), ((300, 200, 136), (1, 48, 40), (37, 136, 72), (129, 72, 200)),
                                           strict=True):
        args = arg_structs(form_spec(name), M, N, K)
        loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
        text = grads.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        for role in mod.TRAIN_GEMMS:
            assert f"{name}_{role}" in text, (name, role)
        assert (f"{name}_grad_cols" in text) == ("forward_pre" in mod.TRAIN_GEMMS)  # preact's G / dbias kernel
        assert [s.shape for s in jax.eval_shape(grads, *args)] == [x.shape for x in args]


def kernel_model(mod, name: str):
    """`_gemm` and `_launch` as jnp models of the kernels' contract (f32 products, each store rounded to bf16): C =
    X @ Y in the role's majors (C^T where it stores the transpose); the gated roles read B's gate and up halves
    through `_gated_view` and return pre / G as (M, 2, N) [gate, up]. Only the glue around them is under test."""
    fn, layout, _, a_major, b_major, bias = FORMS[name]
    act = ACTS[fn]
    f32 = jnp.float32

    def halves(b, n, k):  # B's gate and up as stored (N, K) or (K, N), through the module's own view
        v = mod._gated_view(b, n, k)
        if b_major == "k" and layout == "halves":
            return v[0], v[1]
        return v[:, 0], v[:, 1]

    def mm(x, y, x_k, y_k):
        return jnp.matmul((x if x_k else x.T).astype(f32), (y.T if y_k else y).astype(f32))

    def gemm(role, m, n, k, x, y, *extra):
        cfg, x_k, y_k, transposed, dtype = mod.TRAIN_GEMMS[role]
        if role not in ("forward_pre", "recompute"):
            c = mm(x, y, x_k, y_k)
            return (c.T if transposed else c).astype(dtype)
        gate, up = (mm(x, h, x_k, y_k) for h in halves(y, n, k))
        if role == "forward_pre":
            out = act(gate) * up + (extra[0].astype(f32) if bias else 0.0)
            return out.astype(dtype), jnp.stack([gate, up], axis=1).astype(dtype)
        d = extra[-1].astype(f32)
        dgate = (d * up) * jax.grad(lambda v: jnp.sum(act(v)))(gate)
        return jnp.stack([dgate, d * act(gate)], axis=1).astype(dtype)

    def launch(a, b, *rest):  # the primal (recompute's forward rule): the gated forward's out
        m, n, k = mod._dims(a, b, *rest)
        gate, up = (mm(a, h, a_major == "k", b_major == "k") for h in halves(b, n, k))
        return (act(gate) * up + (rest[0].astype(f32) if bias else 0.0)).astype(jnp.bfloat16)

    return gemm, launch


@pytest.mark.parametrize("name", list(FORMS))
def test_the_vjp_glue_against_float64_autograd(modules, name: str, monkeypatch) -> None:
    """With each kernel replaced by its jnp model, jax.grad under jax.jit of the entry (pre's halves into G in B's
    layout, halves or interleaved; dbias = dOut's column sum; dA and dB in their operands' stored layouts) matches
    float64 torch autograd of the reference (tests/gpu/test_training_mgpu_gated_gpu.py's, at M, N, K off the tiles)."""
    from gpu.test_training_mgpu_gated_gpu import inputs, reference
    from gpu.test_training_mgpu_gpu import err

    mod = modules[name][0]
    gemm, launch = kernel_model(mod, name)
    monkeypatch.setattr(mod, "_gemm", gemm)
    monkeypatch.setattr(mod, "_launch", launch)
    if hasattr(mod, "_grad_cols"):  # preact's G and dbias kernel (Pallas' Triton lowering) under Pallas' interpreter
        monkeypatch.setattr(mod, "_grad_cols", functools.partial(mod._grad_cols, interpret=True))
    spec = form_spec(name)
    args, grad = inputs(spec, (37, 72, 40))
    loss = lambda *xs: jnp.sum(mod._train(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))(*args)
    _, want = reference(spec, args, grad)
    for what, g, w, x in zip(("da", "db", "dbias"), got, want, args, strict=False):
        assert g.shape == x.shape and g.dtype == x.dtype
        e, scale = err(g, w)
        assert e <= 2e-2 * scale, f"{name} {what}: error {e:.3g} of {scale:.3g}"
