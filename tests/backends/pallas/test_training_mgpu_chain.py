"""The other chains' backward on the dense Mosaic GPU design (issue 38; session 33; specgen/kinds/gemm/designs/pallas/
training_mgpu.py, templates/gemm/pallas/backward_mgpu.jinja and chain_backward.jinja), on this CPU machine (Mosaic GPU
has no interpreter: the kernels' numbers run on a Hopper GPU, tests/gpu/test_training_mgpu_chain_gpu.py).

The Pallas TPU module's meaning and jnp chain pass (tests/backends/pallas/test_training_tpu_chain.py); recompute stores
pre in f32 as the TPU's (so it takes no residual before pre: a residual is staged in the output's SMEM slot; TRN001
says so). Here: each pre role's Config the one check resolved, its C's dtype and its SMEM (a residual's mbarriers
where forward_pre loads one); `specgen compile`'s hook lowering the forward and every role for CUDA to the plan SMEM to the byte;
jax.grad under jax.jit lowered for CUDA with every backward kernel (M = 1, N and K off the tile); the glue (pre saved
or recomputed, _chain_grads, dgrad and wgrad) under jax.grad against float64 autograd of the chain with the kernels as
jnp models of their contract."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_mgpu_module import render
from backends.pallas.test_training_tpu_chain import check_grads, reference
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType
from specgen.targets import target_info

# name: (epilogue, save, majors, shape (M, N, K), pre's op): every op across the four, as the TPU test's (bf16); a residual
# before pre (staged in forward_pre's bf16 slot) and after it (out's slot) in mch_clamp, preact (recompute's slots are f32)
FORMS = {
    "mch_col": ([{"op": "scale", "by": "col"}, {"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"},
                 {"op": "residual", "dtype": "bf16", "beta": 0.5}], "recompute", "k_k", (200, 300, 136), 0),
    "mch_rowcol": ([{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "scale", "by": "rowcol"},
                    {"op": "activation", "fn": "sigmoid"}, {"op": "cast", "dtype": "f16"}], "recompute", "k_mn",
                   (1, 130, 40), 1),
    "mch_clamp": ([{"op": "scale", "by": "scalar"}, {"op": "residual", "dtype": "bf16", "name": "c"},
                   {"op": "clamp", "min": -1.0, "max": 2.0}, {"op": "activation", "fn": "relu"}, {"op": "scale", "by": "row"},
                   {"op": "scale", "by": "scalar", "value": 0.5}, {"op": "residual", "dtype": "bf16", "name": "r2", "beta": -1.5}],
                  "preact", "mn_k", (136, 72, 200), 2),
    "mch_nopre": ([{"op": "residual", "dtype": "bf16", "beta": 2.0}, {"op": "bias", "along": "m", "dtype": "bf16"}],
                  "preact", "k_k", (40, 136, 24), -1),
}


def spec(name: str) -> dict:
    epilogue, save, majors, _, _ = FORMS[name]
    a, b = majors.split("_")
    return GemmSpec.model_validate({
        "name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b},
        "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 64},
        "schedule": {"persistent": True, "group_m": 8}, "targets": ["pallas:gpu_sm90"]}).model_dump(mode="json")


SPECS = {name: spec(name) for name in FORMS}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_chain_train")
    return {name: render(s, tmp) for name, s in SPECS.items()}


def structs(s: dict, shape: tuple[int, int, int]) -> list:
    M, N, K = shape
    args = [jax.ShapeDtypeStruct((M, K) if s["a"]["major"] == "k" else (K, M), jnp.bfloat16),
            jax.ShapeDtypeStruct((N, K) if s["b"]["major"] == "k" else (K, N), jnp.bfloat16)]
    for arg in GemmSpec.model_validate(s).runtime_args():
        shp = {"vec_m": (M,), "vec_n": (N,), "matrix": (M, N), "scalar": ()}[arg.shape]
        args.append(jax.ShapeDtypeStruct(shp, JNP_DTYPES[arg.dtype]))
    return args


def inputs(name: str, shape: tuple[int, int, int], seed: int) -> tuple[list[jax.Array], jax.Array]:
    """The entry's arrays (A scaled by 1 / sqrt(K); a runtime scalar 0.75 as a 0-d f32 array) and dOut, bf16."""
    rng = np.random.default_rng(seed)
    arrays: list[jax.Array] = []
    for st in structs(SPECS[name], shape):
        x = rng.standard_normal(st.shape) / (np.sqrt(shape[2]) if not arrays else 1)
        arrays.append(jnp.asarray(0.75 if st.shape == () else x, st.dtype))
    return arrays, jnp.asarray(rng.standard_normal(shape[:2]), jnp.bfloat16)


def test_each_role_lowers_to_its_plan_smem(modules) -> None:
    """The plan: pre's op, no columns pass; forward_pre's C in the output's dtype, recompute's pre in f32; forward_pre
    TMA-loading a residual counts its mbarriers in the companion's SMEM (its chain the kernel's), the plan's SMEM the
    companion's. `specgen compile`'s hook lowers the forward and every role for CUDA, each to exactly its plan SMEM."""
    info = target_info("pallas:gpu_sm90")
    for name, (mod, resolved) in modules.items():
        meta = mod.METADATA["training"]
        assert meta["chain_pre_before"] == FORMS[name][4]
        for c in resolved.companions:
            cfg, _, _, _, dtype = mod.TRAIN_GEMMS[c.companion]
            assert dtype == (jnp.float32 if c.companion == "recompute" else jnp.bfloat16), (name, c.companion)
            assert meta["gemms"][c.companion]["smem_bytes"] == c.budget.total, (name, c.companion)
            loads = c.companion == "forward_pre" and any(op["op"] == "residual" for op in SPECS[name]["epilogue"])
            assert cfg.residual_barriers == (cfg.out_slots * 2 if loads else 0), (name, c.companion)
        rows = compile_module(mod, info)
        assert [r.kernel for r in rows] == [mod.NAME, *(f"{mod.NAME}[{role}]" for role in mod.TRAIN_GEMMS)]
        for r in rows:
            assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)


def test_grad_under_jit_lowers_with_every_backward_kernel(modules) -> None:
    """jax.grad of the entry under jax.jit traces the custom_vjp and lowers for CUDA (jax's Mosaic GPU lowering, on this
    CPU), each role's kernel in the program and no columns pass; every gradient in its argument's shape and dtype."""
    for name, (mod, _) in modules.items():
        args = structs(SPECS[name], FORMS[name][3])
        loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
        text = grads.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert all(f"{mod.NAME}_{role}" in text for role in mod.TRAIN_GEMMS) and "grad_cols" not in text, name
        got = jax.eval_shape(grads, *args)
        assert [(g.shape, g.dtype) for g in got] == [(x.shape, x.dtype) for x in args], name


# --- the glue, with the kernels as jnp models -------------------------------------------------------------------
def _ops(epilogue: list, x, args: dict):
    """The chain's ops on x (f32) in jnp, as the kernels' epilogues apply them."""
    acts = {"gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu}
    for op in epilogue:
        vec = lambda name, along_m: args[name].reshape((-1, 1) if along_m else (1, -1)).astype(jnp.float32)  # noqa: E731
        if op["op"] == "bias":
            x = x + vec(op["name"], op["along"] == "m")
        elif op["op"] == "scale" and op["by"] == "scalar":
            x = x * (op["value"] if op["value"] is not None else jnp.asarray(args[op["name"] or "alpha"], jnp.float32))
        elif op["op"] == "scale":
            x = x * (vec("scale_a", True) * vec("scale_b", False) if op["by"] == "rowcol"
                     else vec(op["name"] or f"{op['by']}_scale", op["by"] == "row"))
        elif op["op"] == "activation":
            x = acts[op["fn"]](x)
        elif op["op"] == "residual":
            x = x + op["beta"] * args[op["name"]].astype(jnp.float32)
        elif op["op"] == "clamp":
            x = jnp.clip(x, op["min"], op["max"])
        else:
            x = x.astype(JNP_DTYPES[DType(op["dtype"])]).astype(jnp.float32)
    return x


@pytest.mark.parametrize("name", list(FORMS))
def test_the_glue_against_float64_autograd(modules, name, monkeypatch) -> None:
    """jax.grad under jax.jit with `_gemm` as a jnp model of each role's contract (forward_pre: (out, pre) of the chain
    split at pre, pre rounded to bf16; recompute: pre in f32; dgrad / wgrad: the product in the stored layout, f32 sums
    rounded to bf16), against float64 autograd of the chain, within bf16's bound; a runtime scalar's gradient zero."""
    mod, _ = modules[name]
    mod = load_rendered(mod.__file__, f"_mch_model_{name}")  # a fresh copy: its jitted call traces the models
    s, start = SPECS[name], FORMS[name][4]
    spec_ = GemmSpec.model_validate(s)
    names = ["a", "b", *(a.name for a in spec_.runtime_args())]
    pre_names = [a.name for op in spec_.epilogue[:max(start, 0)] for a in op.runtime_args()]

    def logical(x, y):
        a32, b32 = x.astype(jnp.float32), y.astype(jnp.float32)
        return (a32 if s["a"]["major"] == "k" else a32.T) @ (b32.T if s["b"]["major"] == "k" else b32)

    def launch(*xs):  # the forward kernel: the whole chain on the f32 product
        return _ops(s["epilogue"], logical(*xs[:2]), dict(zip(names[2:], xs[2:], strict=True))).astype(jnp.bfloat16)

    def model(role, m, n, k, x, y, *extra):
        if role in ("forward_pre", "recompute"):
            given = dict(zip(names[2:] if role == "forward_pre" else pre_names, extra, strict=True))
            pre = _ops(s["epilogue"][:start], logical(x, y), given)
            if role == "recompute":
                return pre  # f32
            return _ops(s["epilogue"][start:], pre, given).astype(jnp.bfloat16), pre.astype(jnp.bfloat16)
        _, x_k, y_k, transposed, _ = mod.TRAIN_GEMMS[role]
        x32, y32 = x.astype(jnp.float32), y.astype(jnp.float32)
        c = (x32 if x_k else x32.T) @ (y32.T if y_k else y32)
        return (c.T if transposed else c).astype(jnp.bfloat16)

    monkeypatch.setattr(mod, "_gemm", model)
    monkeypatch.setattr(mod, "_launch", launch)
    arrays, grad = inputs(name, FORMS[name][3], 3)
    fn = mod._call
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(arrays)))))(*arrays)
    # preact: the backward reads pre as forward_pre stores it, in bf16 (a clamp's or ReLU's select flips at its bounds)
    _, want = reference(s, names, arrays, grad, start, torch.bfloat16 if s["training"]["save"] == "preact" else None)
    check_grads(names, grads, arrays, want, 3e-2)


def test_trn001_on_mosaic_gpu() -> None:
    """Every form checks clean on pallas:gpu_sm90 (TRN001 lifted: the design's `renders_unbatched_chain_training`);
    recompute with a residual before pre is refused there (its f32 slots), naming the ops and the fix, not on the TPU;
    batch = true checks clean (session 33)."""
    from backends.pallas.test_training_tpu_chain import load
    from specgen.check import check_specs

    for name in FORMS:
        errors = [str(x) for x in check_specs([load(SPECS[name])]).diagnostics if x.severity == "error"]
        assert not errors, (name, errors)
    d = {**SPECS["mch_clamp"], "training": {**SPECS["mch_clamp"]["training"], "save": "recompute"},
         "targets": ["pallas:gpu_sm90", "pallas:tpu_v6e"]}
    (trn,) = [x for x in check_specs([load(d)]).diagnostics if x.rule == "TRN001"]
    assert trn.target == "pallas:gpu_sm90" and "epilogue[1] (residual) comes before epilogue[2]" in trn.message, str(trn)
    assert 'set training.save = "preact"' in trn.message
    # batched: rendered since session 33 (test_training_mgpu_batch.py)
    assert not [str(x) for x in check_specs([load({**SPECS["mch_col"], "batch": True})]).diagnostics if x.rule == "TRN001"]
