"""The other chains' backward on the dense Pallas TPU design (issue 38; session 33: scale by a scalar, a constant, row,
column or rowcol, residual, clamp, cast, bias along m or n, in any order; unbatched; specgen/kinds/gemm/designs/pallas/
training.py, templates/gemm/pallas/chain_backward.jinja), in Pallas's strict TPU interpreter on the CPU (uninitialized
VMEM and reads past an array's end are NaN, so an unwritten block or an unmasked tail shows; jax has no output buffers
to poison: the interpreter's NaN is the poison). No TPU here: nothing ran natively.

The dense Triton design's meaning (docs/training/triton.md): pre is the value before the first op whose backward reads a value
(`value_index`), stored by forward_pre (the output's dtype) or recomputed in f32; the chain's backward (jnp) forms G and
every argument's gradient, a runtime scalar none. jax.grad of <out, dOut> under jax.jit against float64 torch autograd of
the reference chain (`apply_epilogue`), f32 operands (the interpreter's dots run in f32, not f64) and one bf16 form, both
save modes, M = 1, N and K off the blocks, both operand majors; check's side (TRN001 lifted) and the plan refusing what
TRN001 still refuses. The Mosaic GPU module shares the chain pass: tests/backends/pallas/test_training_mgpu_chain.py."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import render_module
from backends.pallas.test_training_tpu_fp8 import close, f64
from specgen.check import check_specs
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.gemm.designs.pallas.tpu_vmem import TPU_TILE_ROW_BYTES
from specgen.kinds.gemm.designs.pallas.training import grad_cols_vmem, plan_tpu_training, pre_role_vmem
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import apply_epilogue
from specgen.resolve import resolve
from specgen.spec.dtypes import DType
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}
# name: (epilogue, save, dtype, majors, shape (M, N, K), pre's op)
FORMS = {
    # a column scale read by its gradient (pre before it), a bias, GELU-tanh, a residual with beta = 0.5
    "pch_col": ([{"op": "scale", "by": "col"}, {"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu_tanh"},
                 {"op": "residual", "dtype": "f32", "beta": 0.5}], "preact", "f32", "k_k", (37, 200, 150), 0),
    # bias along m before pre (in the recompute GEMM's epilogue), scale by rowcol, sigmoid, a cast to bf16; M = 1
    "pch_rowcol": ([{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "scale", "by": "rowcol"},
                    {"op": "activation", "fn": "sigmoid"}, {"op": "cast", "dtype": "bf16"}], "recompute", "f32", "k_k",
                   (1, 130, 40), 1),
    # a runtime scalar and a residual before pre, clamp [-1, 2], ReLU, scale by row and by a constant; A and B mn-major
    "pch_clamp": ([{"op": "scale", "by": "scalar"}, {"op": "residual", "dtype": "f32", "name": "c"},
                   {"op": "clamp", "min": -1.0, "max": 2.0}, {"op": "activation", "fn": "relu"}, {"op": "scale", "by": "row"},
                   {"op": "scale", "by": "scalar", "value": 0.5}], "preact", "f32", "mn_mn", (136, 72, 40), 2),
    # bf16: a residual with beta = 2 and bias along m (no op reads a value: no pre GEMM, G = dOut), recompute
    "pch_nopre": ([{"op": "residual", "dtype": "bf16", "beta": 2.0}, {"op": "bias", "along": "m", "dtype": "bf16"}],
                  "recompute", "bf16", "k_mn", (40, 136, 24), -1),
}
JNP = {"f32": jnp.float32, "bf16": jnp.bfloat16}


def spec(name: str, **more) -> dict:
    epilogue, save, dtype, majors, _, _ = FORMS[name]
    a_major, b_major = majors.split("_")
    d = {"name": name, "kind": "gemm", "a": {"dtype": dtype, "major": a_major}, "b": {"dtype": dtype, "major": b_major},
         "out": {"dtype": dtype}, "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
         "tile": {"m": 128 if a_major == "mn" else 16, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e"], **more}
    return GemmSpec.model_validate(d).model_dump(mode="json")


SPECS = {name: spec(name) for name in FORMS}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("chain_train")
    return {name: render_module(s, out) for name, s in SPECS.items()}


def inputs(s: dict, shape: tuple[int, int, int], seed: int = 0) -> tuple[list[str], list[jax.Array], jax.Array]:
    """The entry's argument names and arrays (a, b stored; vectors (M,) / (N,); a residual (M, N); a runtime scalar a
    0-d f32 array) and dOut."""
    M, N, K = shape
    rng = np.random.default_rng(seed)
    dt = JNP[s["a"]["dtype"]]
    a = rng.standard_normal((M, K) if s["a"]["major"] == "k" else (K, M)) / np.sqrt(K)
    b = rng.standard_normal((N, K) if s["b"]["major"] == "k" else (K, N))
    names, arrays = ["a", "b"], [jnp.asarray(a, dt), jnp.asarray(b, dt)]
    for arg in GemmSpec.model_validate(s).runtime_args():
        shp = {"vec_m": (M,), "vec_n": (N,), "matrix": (M, N), "scalar": ()}[arg.shape]
        x = rng.uniform(0.5, 1.5, shp) if arg.name.endswith("scale") or arg.name.startswith("scale") else rng.standard_normal(shp)
        names.append(arg.name)
        arrays.append(jnp.asarray(0.75 if arg.shape == "scalar" else x, JNP_DTYPES[arg.dtype]))
    return names, arrays, jnp.asarray(rng.standard_normal((M, N)), dt)


def reference(s: dict, names: list[str], arrays: list[jax.Array], grad: jax.Array, start: int = -1,
              round_pre: torch.dtype | None = None):
    """float64 torch autograd of apply_epilogue(A @ B) with every array a leaf (a runtime scalar a number: no gradient),
    in the stored layouts. `round_pre` (with `start`, pre's op): the chain after pre differentiated at pre rounded to that
    dtype, as a backward reading a saved 16-bit pre does (its value passed on unrounded: a straight-through rounding)."""
    leaves = {n: f64(x).requires_grad_() for n, x in zip(names, arrays, strict=True) if np.ndim(x)}
    a = leaves["a"] if s["a"]["major"] == "k" else leaves["a"].t()
    b = leaves["b"].t() if s["b"]["major"] == "k" else leaves["b"]
    args = {n: (leaves[n] if n in leaves else float(x)) for n, x in zip(names, arrays, strict=True)}
    if round_pre is None or start < 0:
        out = apply_epilogue(s["epilogue"], a @ b, args)
    else:
        pre = apply_epilogue(s["epilogue"][:start], a @ b, args)
        rounded = pre.detach().to(round_pre).double()
        out = apply_epilogue(s["epilogue"][start:], pre + (rounded - pre).detach(), args)
    out.backward(f64(grad))
    return out.detach(), {n: leaf.grad for n, leaf in leaves.items()}


def check_grads(names: list[str], grads: tuple, arrays: list[jax.Array], want: dict, rel: float) -> None:
    """Each gradient in its argument's dtype and shape, within `rel` of float64's (`close`); a runtime scalar's zero."""
    for n, g, x in zip(names, grads, arrays, strict=True):
        assert g.dtype == x.dtype and g.shape == x.shape, (n, g.dtype, g.shape)
        if n in want:
            close(g, want[n], rel, f"d{n}")
        else:
            assert not jnp.any(g), f"d{n}: a runtime scalar gets no gradient (zeros)"


@pytest.mark.parametrize("name", list(FORMS))
def test_gradients_match_float64_autograd(name: str, modules: dict) -> None:
    """jax.grad of <out, dOut> under one jax.jit with the output: out, dA, dB and every argument's gradient (dtype and
    shape of the argument) against float64 autograd of the chain; a runtime scalar's gradient an exact zero (none). f32
    forms within 1e-4 of the largest magnitude (a cast to bf16 in the chain: 1e-2, a rounding may land either side),
    bf16 within 2e-2 (G and pre in bf16)."""
    s, mod = SPECS[name], modules[name]
    names, arrays, grad = inputs(s, FORMS[name][4])
    fn = getattr(mod, name)
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    out, grads = jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*arrays)
    want_out, want = reference(s, names, arrays, grad)
    cast = any(op["op"] == "cast" for op in s["epilogue"])
    rel = 2e-2 if s["a"]["dtype"] == "bf16" else 1e-2 if cast else 1e-4
    close(out, want_out, rel, "out")
    check_grads(names, grads, arrays, want, rel)
    meta = mod.METADATA["training"]
    assert meta["chain_pre_before"] == FORMS[name][5]
    assert ("forward_pre" in meta["gemms"]) == (s["training"]["save"] == "preact" and FORMS[name][5] >= 0)
    assert ("recompute" in meta["gemms"]) == (s["training"]["save"] == "recompute" and FORMS[name][5] >= 0)


def test_a_nan_in_dout_spreads_as_float64s(modules: dict) -> None:
    """A NaN in dOut: dA's row and dB's column through it NaN, as float64's; a clamp's and a ReLU's derivative select
    (0 outside, whatever u is), so with the NaN at an element the clamp cuts the rest of dA stays finite."""
    name = "pch_clamp"
    s, mod = SPECS[name], modules[name]
    names, arrays, grad = inputs(s, FORMS[name][4], seed=1)
    grad = grad.at[3, 5].set(jnp.nan)
    fn = getattr(mod, name)
    grads = jax.jit(jax.grad(lambda *xs: jnp.sum(fn(*xs) * grad), argnums=(0, 1)))(*arrays)
    _, want = reference(s, names, arrays, grad)
    for n, g in zip(("a", "b"), grads, strict=True):
        assert np.array_equal(np.isnan(np.asarray(g)), want[n].isnan().numpy()), n


def load(d: dict):
    (loaded,) = load_text(json.dumps({"kernels": [d]}), "<test>", ".json")
    return loaded


def test_check_lifts_trn001() -> None:
    """Every form passes check on a TPU target (TRN001 lifted: `renders_unbatched_chain_training`), a bf16 one on TPU and
    Mosaic GPU together, a batched one too (session 33), a batched fp8 forward too (session 34); an fp8 forward's other
    chain stays refused on TPU (naming the dtypes), batched or not; the plan of a render that skipped check refuses it too."""
    for name in FORMS:
        report = check_specs([load(SPECS[name])])
        errors = [str(x) for x in report.diagnostics if x.severity == "error"]
        assert not errors, (name, errors)
    d = {**SPECS["pch_col"], "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
         "out": {"dtype": "bf16"}, "epilogue": [{**op, "dtype": "bf16"} if "dtype" in op else op for op in SPECS["pch_col"]["epilogue"]],
         "tile": {"m": 128, "n": 128, "k": 64}, "targets": ["pallas:tpu_v6e", "pallas:gpu_sm90"]}
    assert not [str(x) for x in check_specs([load(d)]).diagnostics if x.rule == "TRN001"]
    # batched: rendered since session 33 (test_training_tpu_batch.py); a batched fp8 forward's since session 34
    # (test_training_tpu_batch_fp8.py)
    assert not [str(x) for x in check_specs([load({**SPECS["pch_col"], "batch": True})]).diagnostics if x.rule == "TRN001"]
    batched = {**SPECS["pch_col"], "batch": True, "a": {"dtype": "fp8_e4m3", "major": "k"},
               "b": {"dtype": "fp8_e4m3", "major": "k"}, "out": {"dtype": "bf16"},
               "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}], "tile": {"m": 32, "n": 128, "k": 128}}
    assert not [str(x) for x in check_specs([load(batched)]).diagnostics if x.rule == "TRN001"]
    fp8 = {**SPECS["pch_col"], "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
           "out": {"dtype": "bf16"}, "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "clamp", "max": 4.0}],
           "tile": {"m": 32, "n": 128, "k": 128}}
    (trn,) = [x for x in check_specs([load(fp8)]).diagnostics if x.rule == "TRN001"]
    assert trn.message.startswith("training with fp8_e4m3 operands and epilogue ['scale', 'clamp']"), trn.message
    (trn,) = [x for x in check_specs([load({**fp8, "batch": True})]).diagnostics if x.rule == "TRN001"]
    assert trn.message.startswith("training with fp8_e4m3 operands and epilogue ['scale', 'clamp']"), trn.message
    for bad, says in (({**fp8, "batch": True}, "fp8_e4m3 operands"), (fp8, "fp8_e4m3 operands")):
        loaded = load(bad)
        targets = list(loaded.spec.targets)
        with pytest.raises(ValueError, match=f"{says}.*the Pallas TPU backward renders none"):
            plan_tpu_training(loaded.spec, targets, {str(t): resolve(loaded.spec, t) for t in targets}, JNP_DTYPES, 1.25)


def test_plan_and_vmem() -> None:
    """The plan: pre's op, the recompute's inputs (the ops before pre's arguments), recompute storing pre in f32, no
    columns pass (the chain's backward is jnp); forward_pre's figure counts pre (PAL014) and every argument's block (its companion)."""
    for name, (_, _, dtype, _, _, start) in FORMS.items():
        loaded = load(SPECS[name])
        targets = list(loaded.spec.targets)
        plan = plan_tpu_training(loaded.spec, targets, {str(t): resolve(loaded.spec, t) for t in targets}, JNP_DTYPES, 1.25)
        assert plan.chain and plan.start == start and not plan.grad_cols and not plan.bias and plan.cols_vmem_bytes == 0
        want = [a.name for op in loaded.spec.epilogue[:max(start, 0)] for a in op.runtime_args()]
        assert list(plan.pre_args) == want, name
        if plan.recomputes:
            assert plan.gemms["recompute"].out_jnp == "float32"
        if plan.stores_pre:
            assert plan.gemms["forward_pre"].out_jnp == JNP_DTYPES[DType(dtype)]
    # pch_col's forward_pre (16 x 128 f32 blocks): its companion counts the column scale's and the bias's tile rows and
    # the residual's block (its chain the kernel's), PAL014 pre's block beside it, each double-buffered; pch_rowcol's
    # recompute: its companion counts the row bias's (16, 1) block padded to 128 lanes, PAL014 nothing more
    col = resolve(load(SPECS["pch_col"]).spec, load(SPECS["pch_col"]).spec.targets[0])
    (pre,) = [c for c in col.companions if c.companion == "forward_pre"]
    bare = pre.design.budget(pre.spec.model_copy(update={"epilogue": []}), pre.info, pre.ab_stages)
    assert pre.budget.total - bare.total == 2 * (16 * 128 * 4 + 2 * TPU_TILE_ROW_BYTES * 128)
    tile = load(SPECS["pch_col"]).spec.tile
    assert pre_role_vmem(load(SPECS["pch_col"]).spec, "forward_pre", tile) == 2 * 16 * 128 * 4
    assert pre_role_vmem(load(SPECS["pch_rowcol"]).spec, "recompute", tile) == 0
    assert grad_cols_vmem(load(SPECS["pch_col"]).spec) == 0
