"""Training with `batch = true` on the Mosaic GPU target (pallas:gpu_sm90), on this CPU machine (docs/training/batched.md, "A
batched GEMM on Pallas"): the batched entry's jax.custom_vjp runs each backward GEMM per batch entry with the module's
unbatched wgmma kernels (`_per_batch`), the columns pass / chain pass over the batches' rows as one (batch M, N) matrix.
Here: every role lowers for CUDA to exactly its plan SMEM (`specgen compile`'s hook), jax.grad under jax.jit of the
batched entry lowers with every role's kernel, and the glue (the per-entry slicing and stacking, the reshapes, the
vector gradients summed over every entry) against float64 autograd of the batched reference with the kernels as jnp
models of their contract. Numerics on a Hopper GPU: tests/gpu/test_training_mgpu_batch_gpu.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import host_primitives
from backends.pallas.test_mgpu_module import render
from backends.pallas.test_training_mgpu_chain import _ops
from backends.pallas.test_training_tpu import close
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.targets import target_info

BIAS = {"op": "bias", "along": "n", "dtype": "bf16"}
# name: (epilogue, save, majors, (batch, M, N, K)): [bias, activation] preact, [bias, sigmoid] recompute with A
# stored (K, M), [] with both operands mn-major, a gated op with a bias (halves preact, interleaved recompute), and the other chains (a row vector, a
# residual, pre before the activation) recompute, and residuals before and after pre in preact
FORMS = {
    "mgb_bias_gelu": ([BIAS, {"op": "activation", "fn": "gelu_tanh"}], "preact", "k_k", (3, 37, 200, 72)),
    "mgb_sigmoid_rec": ([BIAS, {"op": "activation", "fn": "sigmoid"}], "recompute", "mn_k", (3, 1, 48, 40)),
    "mgb_plain": ([], "preact", "mn_mn", (1, 37, 130, 72)),
    "mgb_gated": ([{"op": "gated", "fn": "silu", "layout": "halves"}, BIAS], "preact", "k_k", (3, 20, 64, 72)),
    "mgb_gated_il": ([{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, BIAS], "recompute", "k_k", (3, 1, 64, 40)),
    "mgb_chain": ([{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "activation", "fn": "sigmoid"},
                   {"op": "scale", "by": "col"}, {"op": "residual", "dtype": "bf16", "beta": 0.5}], "recompute", "k_k",
                  (3, 37, 130, 40)),
    # preact: a residual before pre and one after it, each TMA-loaded per tile from its entry's (batch, M, N) matrix
    "mgb_chain_pre": ([{"op": "residual", "dtype": "bf16", "name": "c"}, {"op": "activation", "fn": "silu"},
                       {"op": "residual", "dtype": "bf16", "beta": 0.5, "name": "r2"}], "preact", "k_k", (2, 37, 130, 40)),
}
GLUE = ("mgb_bias_gelu", "mgb_sigmoid_rec", "mgb_chain")  # the glue's forms (the models below take no gated op)


def spec(name: str) -> dict:
    epilogue, save, majors, _ = FORMS[name]
    a, b = majors.split("_")
    return GemmSpec.model_validate({
        "name": name, "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": a},
        "b": {"dtype": "bf16", "major": b}, "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save},
        "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
        "targets": ["pallas:gpu_sm90"]}).model_dump(mode="json")


SPECS = {name: spec(name) for name in FORMS}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_batch_train")
    return {name: render(s, tmp) for name, s in SPECS.items()}


def structs(s: dict, shape: tuple[int, int, int, int]) -> list:
    batch, M, N, K = shape
    bn = 2 * N if any(op["op"] == "gated" for op in s["epilogue"]) else N
    args = [jax.ShapeDtypeStruct((batch, M, K) if s["a"]["major"] == "k" else (batch, K, M), jnp.bfloat16),
            jax.ShapeDtypeStruct((batch, bn, K) if s["b"]["major"] == "k" else (batch, K, bn), jnp.bfloat16)]
    for arg in GemmSpec.model_validate(s).runtime_args():
        shp = {"vec_m": (M,), "vec_n": (N,), "matrix": (batch, M, N), "scalar": ()}[arg.shape]
        args.append(jax.ShapeDtypeStruct(shp, JNP_DTYPES[arg.dtype]))
    return args


def test_each_role_lowers_to_its_plan_smem(modules) -> None:
    """`specgen compile`'s hook lowers the batched forward and every backward role (the unbatched kernels the backward
    runs per entry) for CUDA, each to exactly its plan SMEM."""
    info = target_info("pallas:gpu_sm90")
    for name, (mod, _) in modules.items():
        rows = compile_module(mod, info)
        assert [r.kernel for r in rows] == [mod.NAME, *(f"{mod.NAME}[{role}]" for role in mod.TRAIN_GEMMS)], name
        for r in rows:
            assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)


def test_grad_under_jit_lowers_with_every_role(modules) -> None:
    """jax.grad of the batched entry under jax.jit traces the custom_vjp and lowers for CUDA, each role's kernel in the
    program (the columns pass where preact forms G or sums a bias), each launched once for every batch entry (no loop
    around a kernel; without a forward_pre role the batched forward kernel runs too); every gradient in its argument's shape and dtype."""
    for name, (mod, _) in modules.items():
        args = structs(SPECS[name], FORMS[name][3])
        loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
        traced = grads.trace(*args)
        text = traced.lower(lowering_platforms=("cuda",)).as_text()
        assert all(f"{mod.NAME}_{role}" in text for role in mod.TRAIN_GEMMS), name
        # every role one launch for every entry (session 33 ran each per entry in a lax.map: a scan)
        host = host_primitives(traced.jaxpr.jaxpr)
        assert "scan" not in host and "while" not in host, (name, host)
        assert host.count("mpmd_map") == len(mod.TRAIN_GEMMS) + ("forward_pre" not in mod.TRAIN_GEMMS), (name, host)
        cols = FORMS[name][1] == "preact" and bool(FORMS[name][0]) and "chain_pre_before" not in mod.METADATA["training"]
        assert (f"{mod.NAME}_grad_cols" in text) == cols, name
        got = jax.eval_shape(grads, *args)
        assert [(g.shape, g.dtype) for g in got] == [(x.shape, x.dtype) for x in args], name


@pytest.mark.parametrize("name", GLUE)
def test_the_glue_against_float64_autograd(modules, name, monkeypatch) -> None:
    """jax.grad under jax.jit with `_gemm` as a jnp model of each role's batched contract (one call for every entry) and
    `_launch` of the batched forward's, against float64 autograd of the batched reference within bf16's bound: the
    per-entry slices, the (batch M, N) views and a vector's gradient summed over every entry. A NaN in dOut[-1] stays
    in entry -1's dA and dB."""
    mod = load_rendered(modules[name][0].__file__, f"_mgb_model_{name}")  # a fresh copy: its jitted call traces the models
    s = SPECS[name]
    start = {"mgb_chain": 1}.get(name, 1 if any(op["op"] == "activation" for op in s["epilogue"]) else -1)
    names = ["a", "b", *(a.name for a in GemmSpec.model_validate(s).runtime_args())]
    pre_names = [a.name for op in GemmSpec.model_validate(s).epilogue[:max(start, 0)] for a in op.runtime_args()]

    def logical(x, y):
        a32, b32 = x.astype(jnp.float32), y.astype(jnp.float32)
        return (a32 if s["a"]["major"] == "k" else a32.mT) @ (b32.mT if s["b"]["major"] == "k" else b32)

    def launch(*xs):  # the batched forward kernel
        return _ops(s["epilogue"], logical(*xs[:2]), dict(zip(names[2:], xs[2:], strict=True))).astype(jnp.bfloat16)

    def model(role, m, n, k, x, y, *extra):
        batch = FORMS[name][3][0]
        assert x.shape[0] == batch and y.shape[0] == batch and x.ndim == y.ndim == 3, (role, x.shape, y.shape)  # every entry at once
        if role in ("forward_pre", "recompute"):
            if mod.METADATA["training"].get("chain_pre_before") is None:  # the plain chains: recompute forms G
                has_bias = bool(s["epilogue"]) and s["epilogue"][0]["op"] == "bias"
                pre = logical(x, y) + (extra[0].astype(jnp.float32) if has_bias else 0.0)
                if role == "forward_pre":
                    out = _ops(s["epilogue"][1:] if has_bias else s["epilogue"], pre, {})
                    return out.astype(jnp.bfloat16), pre.astype(jnp.bfloat16)
                act = next(op for op in s["epilogue"] if op["op"] == "activation")
                dact = jax.vmap(jax.grad(lambda v: _ops([act], v, {})))(pre.reshape(-1)).reshape(pre.shape)
                return (extra[-1].astype(jnp.float32) * dact).astype(jnp.bfloat16)
            given = dict(zip(names[2:] if role == "forward_pre" else pre_names, extra, strict=True))
            pre = _ops(s["epilogue"][:start], logical(x, y), given)
            return pre if role == "recompute" else (_ops(s["epilogue"][start:], pre, given).astype(jnp.bfloat16), pre.astype(jnp.bfloat16))
        _, x_k, y_k, transposed, _ = mod.TRAIN_GEMMS[role]
        x32, y32 = x.astype(jnp.float32), y.astype(jnp.float32)
        c = (x32 if x_k else x32.mT) @ (y32.mT if y_k else y32)
        return (c.mT if transposed else c).astype(jnp.bfloat16)

    def grad_cols(grad, pre, interpret=False):  # the columns pass's kernel in Pallas' interpreter
        return modules[name][0]._grad_cols(grad, pre, interpret=True)

    monkeypatch.setattr(mod, "_gemm", model)
    monkeypatch.setattr(mod, "_launch", launch)
    if hasattr(mod, "_grad_cols"):
        monkeypatch.setattr(mod, "_grad_cols", grad_cols)
    rng = np.random.default_rng(3)
    structs_ = structs(s, FORMS[name][3])
    arrays = [jnp.asarray(rng.standard_normal(st.shape) / (np.sqrt(FORMS[name][3][3]) if not i else 1), st.dtype)
              for i, st in enumerate(structs_)]
    grad = jnp.asarray(rng.standard_normal(FORMS[name][3][:3]), jnp.bfloat16).at[-1, 0, 1].set(jnp.nan)
    loss = lambda *xs: jnp.sum(mod._call(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(arrays)))))(*arrays)
    leaves = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_() for x in arrays]
    a = leaves[0] if s["a"]["major"] == "k" else leaves[0].mT
    b = leaves[1].mT if s["b"]["major"] == "k" else leaves[1]
    out = REFERENCES["gemm"](s["epilogue"], a, b, dict(zip(names[2:], leaves[2:], strict=True)))
    out.backward(torch.from_numpy(np.asarray(grad, np.float64)))
    for n, g, x, leaf in zip(names, grads, arrays, leaves, strict=True):
        assert g.dtype == x.dtype and g.shape == x.shape, (n, g.dtype, g.shape)
        got = torch.from_numpy(np.asarray(g, np.float64))
        assert torch.equal(got.isnan(), leaf.grad.isnan()), f"d{n}: NaN where float64 has none (or not)"
        if n in ("a", "b"):
            assert got.isnan().any() and not got[:-1].isnan().any(), n  # entry -1's only
        close(got.nan_to_num(0).numpy(), leaf.grad.nan_to_num(0), 3e-2, f"d{n}")


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_inside_shard_map_lowers_with_every_role(modules, check_vma: bool) -> None:
    """jax.grad inside jax.shard_map (a one-device CPU mesh: the typing does not depend on the mesh's size) of the
    batched chain and of a gated form traces and lowers for CUDA with every role's kernel, A, dOut, the residual and
    the row vector sharded along M, B and the column vectors replicated. With check_vma the program holds exactly one
    psum per replicated argument and the loss's (a kernel output typed as not varying would add one: its cotangent
    summed over the mesh, wrong gradients on a real mesh); without it only the step's own, one per replicated argument."""
    import re

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from backends.shard_grads import shard_step

    mesh = jax.make_mesh((1,), ("x",))
    for name in ("mgb_chain", "mgb_gated"):
        mod, s = modules[name][0], SPECS[name]
        batch, M, N, _ = FORMS[name][3]
        args = [*structs(s, FORMS[name][3]), jax.ShapeDtypeStruct((batch, M, N), jnp.bfloat16)]
        roles = {"vec_m": P("x"), "vec_n": P(), "matrix": P(None, "x", None), "scalar": P()}
        parts = [P(None, "x", None), P(), *(roles[a.shape] for a in GemmSpec.model_validate(s).runtime_args()),
                 P(None, "x", None)]
        f, _ = shard_step(mod._call, [np.zeros(x.shape, np.float32) for x in args], parts, mesh, check_vma)
        placed = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, sp)) for x, sp in zip(args, parts, strict=True)]
        traced = f.trace(*placed)
        psums = len(re.findall(r"\bpsum\w*\[", str(traced.jaxpr)))
        replicated = sum(not any(sp) for sp in parts[:-1])
        assert psums == replicated + check_vma, (name, psums)
        text = traced.lower(lowering_platforms=("cuda",)).as_text()
        assert all(f"{mod.NAME}_{role}" in text for role in mod.TRAIN_GEMMS), name
        assert [(g.shape, g.dtype) for g in traced.out_info] == [(x.shape, x.dtype) for x in args[:-1]], name
