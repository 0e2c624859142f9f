"""The grouped kind's training (a ragged-M spec's `training`, issue 38) on the Mosaic GPU target (pallas:gpu_sm90), on
this CPU machine: the module's JAX entry is a jax.custom_vjp whose backward runs copies of the module's ragged-M kernel
(forward_pre / recompute, dgrad) and ragged-K kernel (wgrad) at each companion's checked config, G and the bias
gradient in jnp (specgen/kinds/grouped/designs/pallas_mgpu/training.py); a gated op's too (MGPU_GATED_TRAINING_FORMS:
pre and G over B's 2N columns in the forward's layout, halves and interleaved). Here: each role's Config is what check
resolved; jax.grad under jax.jit of the entry lowers for CUDA (jax 0.10.2's Mosaic GPU lowering, which runs in Python:
every backward kernel, its SMEM allocated) over shapes off every tile, M = 1 among them; the vjp glue (G, its masks,
dbias, each GEMM's operands and orientation, the caller's `out`) against float64 autograd of the per-group loop, with
the kernels replaced by jnp GEMMs of their contract (the kernels' numerics run on a Hopper GPU:
tests/gpu/test_grouped_training_mgpu_gpu.py); check's side (TRN001 refusals, a backward config ruled as a GEMM of its
own); a render that skipped check; the torch entry's differentiable op (registered, its fakes). Inside jax.shard_map: test_grouped_training_mgpu_shard.py."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.grouped_mgpu_shard import layout, stand_ins
from backends.pallas.test_grouped_mgpu import loaded, render
from specgen.check import check_specs
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.kinds.grouped.testing.mgpu_specs import (
    MGPU_GATED_TRAINING_FORMS,
    MGPU_TRAINING_FORMS,
    mgpu_training_form,
)
from specgen.resolve import resolve
from specgen.spec.load import load_paths, load_text

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE = "moe_up_gelu_train_mgpu"
T = "pallas:gpu_sm90"
ROLE_CONFIG = {"forward_pre": "_PRE_CONFIG", "recompute": "_PRE_CONFIG", "dgrad": "_DGRAD_CONFIG",
               "wgrad": "_WGRAD_CONFIG"}
GELU_TANH = dict(op="bias", dtype="bf16"), dict(op="activation", fn="gelu_tanh")
FORMS = {**MGPU_TRAINING_FORMS, **MGPU_GATED_TRAINING_FORMS}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    """name: (module, spec dict, resolved) for every training form (plain and gated) and the catalogue's module."""
    tmp = tmp_path_factory.mktemp("grouped_mgpu_train")
    out = {name: (render(s, tmp), s, resolve(loaded(s).spec, loaded(s).spec.targets[0]))
           for name, s in FORMS.items()}
    (ls,) = [x for x in load_paths([ROOT / "specs" / "training.toml"]) if x.name == CATALOGUE]
    mod = load_rendered(ROOT / "generated" / "pallas" / "gpu_sm90" / f"{CATALOGUE}.py", f"_gmt_{CATALOGUE}")
    return {CATALOGUE: (mod, ls.spec.model_dump(mode="json"), resolve(ls.spec, ls.spec.targets[0])), **out}


def test_the_catalogue_spec_is_the_first_forms_layer() -> None:
    """moe_up_gelu_train_mgpu is the form gmt_bias_gelu_tanh_preact_k (what the GPU test runs), under its own name."""
    (ls,) = [x for x in load_paths([ROOT / "specs" / "training.toml"]) if x.name == CATALOGUE]
    got = ls.spec.model_dump(mode="json")
    want = MGPU_TRAINING_FORMS["gmt_bias_gelu_tanh_preact_k"]
    for key in ("a", "b", "out", "groups", "epilogue", "training", "tile", "targets", "pipeline", "schedule"):
        assert got[key] == want[key], key


def test_each_role_runs_the_config_check_resolved(modules) -> None:
    """Each companion's Config row in the module (tile, stages, swizzles, subtiles, SMEM) is mgpu_config of what check
    resolved for it; the roles, majors and groupings are the backward's (dgrad: G K-major, B as stored with its major
    flipped, rows past the groups zeroed; wgrad: ragged K over M- and N-major operands)."""
    flip = {"k": "mn", "mn": "k"}
    for name, (mod, spec, r) in modules.items():
        gemms = mod.METADATA["training"]["gemms"]
        assert list(gemms) == [c.companion for c in r.companions], name
        act = any(op["op"] in ("activation", "gated") for op in spec["epilogue"])
        assert ("forward_pre" in gemms or "recompute" in gemms) == act
        for c in r.companions:
            cfg, want = getattr(mod, ROLE_CONFIG[c.companion]), mgpu_config(c)
            for field in ("tile_m", "tile_n", "tile_k", "wg_n", "epi_m", "epi_n", "out_slots", "a_swizzle", "b_swizzle",
                          "group_m", "raster_dim", "smem_bytes"):
                assert getattr(cfg, field) == getattr(want, field), (name, c.companion, field)
            assert cfg.stages == c.ab_stages and gemms[c.companion]["smem_bytes"] == c.budget.total <= c.budget.capacity
        assert (gemms["dgrad"]["a_major"], gemms["dgrad"]["b_major"], gemms["dgrad"]["tail"]) == (
            "k", flip[spec["b"]["major"]], "zero")
        assert (gemms["wgrad"]["a_major"], gemms["wgrad"]["b_major"], gemms["wgrad"]["ragged"]) == ("mn", "mn", "k")
    assert modules["gmt_bias_untouched_mn"][0]._DGRAD_CONFIG[:4] == (64, 128, 64, 3)
    assert modules["gmt_relu_preact_k_f16"][0]._WGRAD_CONFIG.stages == 3
    for name in MGPU_GATED_TRAINING_FORMS:  # the gated forms' layout; pre is a plain GEMM (the bias after the gate)
        mod, spec, _ = modules[name]
        assert mod.METADATA["training"]["gated"] == spec["epilogue"][0]["layout"], name


def _structs(spec: dict, m: int, n: int, k: int, g: int) -> list:
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16}[spec["a"]["dtype"]]
    nb = 2 * n if layout(spec) else n  # B's columns: a gated op's gate and up
    args = [jax.ShapeDtypeStruct((m, k), dt), jax.ShapeDtypeStruct((g, nb, k) if spec["b"]["major"] == "k" else (g, k, nb), dt),
            jax.ShapeDtypeStruct((g,), jnp.int32)]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(jax.ShapeDtypeStruct((g, n), {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}[op["dtype"]]))
    return args


@pytest.mark.parametrize("name,shape", [(CATALOGUE, (300, 520, 200, 4)), ("gmt_bias_silu_recompute_mn", (1, 48, 40, 2)),
                                        ("gmt_bias_untouched_mn", (37, 200, 72, 3)), ("gmt_relu_preact_k_f16", (130, 136, 136, 5))])
def test_grad_under_jit_lowers_with_every_backward_kernel(modules, name, shape) -> None:
    """jax.grad of the entry's call under jax.jit traces the custom_vjp (forward rule, backward rule) and lowers for
    CUDA over a shape off every tile (M = 1 and N, K under one tile among them), each backward kernel in the program
    (a Mosaic GPU launch named as its companion), the gradients in the arguments' shapes; with the caller's `out` too
    where the tail is untouched (its gradient is dOut past the groups). The gated forms lower in
    test_grouped_training_mgpu_shard.py (under jax.shard_map: the same program with its arrays typed over a mesh)."""
    mod, spec, r = modules[name]
    m, n, k, g = shape
    args = _structs(spec, m, n, k, g)
    diff = tuple(i for i in range(len(args)) if i != 2)
    outs = [None] + ([jax.ShapeDtypeStruct((m, n), args[0].dtype)] if spec["groups"]["tail"] == "untouched" else [])
    for out in outs:
        def loss(*xs, out_given=out is not None):
            ys = mod._call(*xs[:-1], xs[-1]) if out_given else mod._call(*xs, None)
            return jnp.sum(ys.astype(jnp.float32))

        argnums = diff + ((len(args),) if out is not None else ())
        grads = jax.jit(jax.grad(loss, argnums=argnums))
        xs = [*args, *([out] if out is not None else [])]
        text = grads.trace(*xs).lower(lowering_platforms=("cuda",)).as_text()
        for c in r.companions:
            assert f"{name}_{c.companion}" in text, (name, c.companion)
        assert text.count("mosaic_gpu") >= len(r.companions)
        assert [s.shape for s in jax.eval_shape(grads, *xs)] == [xs[i].shape for i in argnums]


# --- the vjp glue against float64 autograd: the kernels replaced by jnp GEMMs of their contract ------------------
def _reference(spec: dict, a, b, sizes, bias, w, out) -> dict:
    """float64 torch autograd on the CPU of the per-group loop: loss = sum(w * layer(a, b, bias, out)); the gradients by
    argument position (0 a, 1 b, 2 bias, 3 out). A gated op: act(gate) * up over B's 2N columns (its layout), then the
    bias."""
    acts = {"gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "silu": torch.nn.functional.silu,
            "relu": torch.relu}
    xs = [None if x is None else torch.tensor(np.asarray(x, np.float64), requires_grad=True) for x in (a, b, bias, out)]
    ta, tb, tbias, tout = xs
    gated = layout(spec)
    m, rows, start = ta.shape[0], [], 0
    for gi, size in enumerate(np.maximum(sizes, 0)):
        end = min(start + int(size), m)
        bg = tb[gi].T if spec["b"]["major"] == "k" else tb[gi]
        y = ta[start:end] @ bg
        if gated:
            n = y.shape[1] // 2
            gate, up = (y[:, :n], y[:, n:]) if gated == "halves" else (y[:, 0::2], y[:, 1::2])
            y = acts[spec["epilogue"][0]["fn"]](gate) * up + (tbias[gi] if tbias is not None else 0.0)
        else:
            y = y + (tbias[gi] if tbias is not None else 0.0)
            for op in spec["epilogue"]:
                if op["op"] == "activation":
                    y = acts[op["fn"]](y)
        rows.append(y)
        start = end
    rows.append(tout[start:] if tout is not None else torch.zeros((m - start, w.shape[1]), dtype=torch.float64))
    (torch.from_numpy(w.astype(np.float64)) * torch.cat(rows)).sum().backward()
    return {i: x.grad.numpy() for i, x in enumerate(xs) if x is not None}


@pytest.mark.parametrize("name", list(FORMS))
def test_the_vjp_glue_against_float64_autograd(modules, name, monkeypatch) -> None:
    """jax.grad under jax.jit of the entry, the kernels replaced by jnp GEMMs of their contract (rows past the groups of
    a pre the kernel leaves unspecified NaN), against float64 autograd of the per-group loop: empty groups first, in
    the middle and last, rows past the last group (dA 0 there; the caller's `out` gets dOut there where the tail is
    untouched), M, N, K off every tile. dbias of an empty group is exactly 0; sizes get no gradient. A gated form: B
(G, 2N, K) / (G, K, 2N) in its layout, pre and G over the 2N columns (halves or interleaved)."""
    mod, spec, _ = modules[name]
    stand_ins(mod, spec, monkeypatch.setattr)
    rng = np.random.default_rng(7)
    m, n, k, sizes = 45, 24, 40, np.array([0, 9, 0, 14, 11, 0], np.int32)  # 34 rows in groups, 11 past them
    g = len(sizes)
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16}[spec["a"]["dtype"]]
    a = jnp.asarray(rng.standard_normal((m, k)) * 0.5, dt)
    nb = 2 * n if layout(spec) else n
    b = jnp.asarray(rng.standard_normal((g, nb, k) if spec["b"]["major"] == "k" else (g, k, nb)) * 0.3, dt)
    bias_op = next((op for op in spec["epilogue"] if op["op"] == "bias"), None)
    bias = None if bias_op is None else jnp.asarray(rng.standard_normal((g, n)), {"bf16": jnp.bfloat16, "f32": jnp.float32}[bias_op["dtype"]])
    out = jnp.asarray(rng.standard_normal((m, n)), dt) if spec["groups"]["tail"] == "untouched" else None
    w = rng.standard_normal((m, n)).astype(np.float32)
    index = jnp.asarray(np.cumsum(sizes).astype(np.int32) if spec["groups"]["index"] == "offs" else sizes)
    xs = [a, b, index, *([bias] if bias is not None else [])]

    def loss(*ys):
        return jnp.sum(jnp.asarray(w) * mod._call(*ys[:len(xs)], ys[len(xs)] if out is not None else None).astype(jnp.float32))

    argnums = (0, 1, *((3,) if bias is not None else ()), *((len(xs),) if out is not None else ()))
    got = jax.jit(jax.grad(loss, argnums=argnums))(*xs, *([out] if out is not None else []))
    want = _reference(spec, a, b, sizes, bias, w, out)
    names = {0: 0, 1: 1, 3: 2, len(xs): 3}
    for i, gi in zip(argnums, got, strict=True):
        ref = want[names[i]]
        gi = np.asarray(gi, np.float64)
        assert gi.shape == ref.shape and np.isfinite(gi).all(), (name, i)
        np.testing.assert_allclose(gi, ref, rtol=3e-2, atol=3e-2 * max(1.0, np.abs(ref).max()), err_msg=f"{name} arg {i}")
    da = np.asarray(got[0], np.float64)
    assert not da[34:].any()  # rows past the last group: dA = 0
    db = np.asarray(got[1], np.float64)
    assert not db[[0, 2, 5]].any()  # empty groups: dB[g] = 0
    if bias is not None:
        assert not np.asarray(got[2], np.float64)[[0, 2, 5]].any()  # and dbias[g] = 0, exactly
    if out is not None:
        dout = np.asarray(got[-1], np.float64)
        # dOut past the groups, in out's dtype
        assert not dout[:34].any() and np.array_equal(dout[34:], np.asarray(jnp.asarray(w[34:], dt), np.float64))


# --- check's side, a render past check, the torch entry --------------------------------------------------------
def _diagnostics(spec: dict) -> list:
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return check_specs([ls]).diagnostics


def test_the_forms_check_clean_and_a_backward_config_is_ruled_as_a_gemm() -> None:
    """Every form checks clean (the gated ones too: TRN001 refused them before session 28's gated backward). A dgrad tile whose stages pass SMEM is SMEM001 on "backward dgrad" at training.dgrad;
    a wgrad K tile of 32 is MGP001 on "backward wgrad" (the ragged-K kernel masks K rows in 64s: its operands are
    M- and N-major), at training.wgrad."""
    for s in FORMS.values():
        assert not [d for d in _diagnostics(s) if d.severity == "error"], s["name"]
    big = mgpu_training_form("x", save="preact", epilogue=GELU_TANH, dgrad={"tile": {"m": 128, "n": 256, "k": 128},
                                                                           "ab_stages": 4})
    errors = [d for d in _diagnostics(big) if d.severity == "error"]
    assert {(d.rule, d.variant) for d in errors} == {("SMEM001", "backward dgrad")}, [str(d) for d in errors]
    assert "B of SMEM >" in errors[0].message
    k32 = mgpu_training_form("x", save="preact", epilogue=GELU_TANH, wgrad={"tile": {"m": 128, "n": 128, "k": 32}})
    (mgp,) = [d for d in _diagnostics(k32) if d.severity == "error"]
    assert (mgp.rule, mgp.variant) == ("MGP001", "backward wgrad") and "tile.k = 32 with A and B" in mgp.message


@pytest.mark.parametrize("changes,words", [
    ({"epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}], "out": {"dtype": "f32"}},
     ["takes f16 or bf16 operands with an output of their dtype", "out.dtype = f32"]),
    ({"out": {"dtype": "f32"}}, ["takes f16 or bf16 operands with an output of their dtype", "out.dtype = f32"]),
])
def test_trn001_refuses_what_the_backward_does_not_cover(changes, words, tmp_path) -> None:
    """TRN001 on pallas:gpu_sm90 for an output of another dtype (a gated op's too: the gated forms check clean,
    test_the_forms_check_clean...), naming why; the plan refuses the same, so a render that skipped check emits no
    wrong backward. An fp8 forward's backward is rendered since session 29 (test_grouped_training_mgpu_fp8.py)."""
    s = {**mgpu_training_form("x", save="preact", epilogue=GELU_TANH), **changes}
    trn = [d for d in _diagnostics(s) if d.rule == "TRN001"]
    assert len(trn) == 1 and all(w in trn[0].message for w in words), [str(d) for d in trn]
    with pytest.raises(ValueError, match=r"renders no backward for it.*\(TRN001\)"):
        render(s, tmp_path)


def test_the_torch_entry_registers_its_differentiable_op(modules) -> None:
    """The torch entry is differentiable (session 35: runtime/jax_torch.py, as the dense module's): its op and backward
    op are registered with fakes giving the output's and each gradient's shape, dtype and strides (what torch.compile
    traces; the group index gets none); an eager call on the CPU raises Mosaic GPU's GPU requirement, naming the
    kernel; `out=` with a tensor that requires grad is refused. Numerics: tests/gpu/test_grouped_training_mgpu_gpu.py
    (the TPU module's torch entry on the CPU: test_grouped_training_tpu_torch.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mod, _, _ = modules[CATALOGUE]
    entry, fn = mod._torch_entry(), getattr(mod, f"{CATALOGUE}_torch")
    assert entry.train_op._qualified_op_name == f"specgen::{CATALOGUE}_torch_train_{mod.METADATA['spec_hash']}"
    a = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(2, 256, 64, dtype=torch.bfloat16)  # (G, N, K) as stored, passed as torch._grouped_mm's (G, K, N)
    offs, bias = torch.tensor([3, 8], dtype=torch.int32), torch.zeros(2, 256, dtype=torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        out, handle = entry.train_op(a, w.transpose(1, 2), offs, bias, 0b1011, 0)
        da, dw, doffs, dbias = entry.backward_op(out, handle, a, w.transpose(1, 2), offs, bias, True, True, False, True,
                                                 0b1011, 0)
    assert (out.shape, out.dtype, handle.dtype) == ((8, 256), torch.bfloat16, torch.int64)
    assert (da.shape, dw.shape, dw.stride(), doffs.shape, dbias.shape) == ((8, 64), (2, 64, 256), (16384, 1, 64), (0,),
                                                                          (2, 256))
    with pytest.raises(RuntimeError, match=f"{CATALOGUE}: Mosaic GPU kernels run on an sm90 CUDA device"):
        fn(a, w.transpose(1, 2), offs, bias)
    with pytest.raises(TypeError, match=f"{CATALOGUE}: out= is not supported when an argument requires grad"):
        fn(a, w.transpose(1, 2), offs, bias, out=torch.empty(8, 256, dtype=torch.bfloat16))


@pytest.mark.parametrize("name", [CATALOGUE, "gmt_swiglu_bias_preact_k"])
def test_the_compile_hook_lowers_the_forward_and_each_backward_gemm(modules, name) -> None:
    """`specgen compile`'s hook lowers the module's forward (through the custom_vjp's primal), then each backward GEMM's
    launcher alone (`<kernel>[role]`), each with exactly its plan's SMEM (the companion's figure check used);
    `--forward-only` (backward=False) leaves the roles out. A gated module's pre GEMM is the plain one over B's 2N
    columns, without the bias (it comes after the gate)."""
    from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
    from specgen.targets import TARGETS

    mod, _, r = modules[name]
    rows = compile_module(mod, TARGETS[T])
    assert [x.kernel for x in rows] == [name, *(f"{name}[{c.companion}]" for c in r.companions)]
    for x, plan in zip(rows, [mod.CONFIG.smem_bytes, *(c.budget.total for c in r.companions)], strict=True):
        assert not x.error and x.compiler_smem == x.plan_smem == plan, (x.kernel, x.error)
    assert [x.kernel for x in compile_module(mod, TARGETS[T], backward=False)] == [name]
