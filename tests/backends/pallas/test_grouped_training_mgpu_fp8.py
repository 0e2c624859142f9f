"""An fp8 forward's backward on the grouped Mosaic GPU design (pallas:gpu_sm90; issue 38, session 29), on this CPU
machine: MGPU_FP8_TRAINING_FORMS (e4m3 with a bias and GELU-tanh saved, offs, tail zero; e5m2 with SiLU recomputed,
an untouched tail; e4m3 with an f32 bias alone into f16, an untouched tail), rowwise scales first, B K-major (the fp8
forward's only major, MAJ001). The backward runs in the output's dtype and gives the gradients of the dequantized
operands A scale_a and B[g] scale_b[g] (the grouped Pallas TPU design's semantics: backward_tpu.jinja, the shared
fp8_backward.jinja): pre by the fp8 ragged-M kernel with the scales, U = dOut * act'(pre), dgrad over U scale_b[g] and
B, wgrad over scale_a U and A, the 8-bit A and B converted exactly to the output's dtype by a jnp astype before those
16-bit kernels; the scales get no gradient.

Here: the conversion is exact (every e4m3 and e5m2 value, into bf16 and f16); jax.grad under jax.jit of the entry
lowers for CUDA (jax 0.10.2's Mosaic GPU lowering runs in Python) with every backward kernel, gradients of the output's
dtype; the vjp glue against float64 torch autograd of the per-group loop over the dequantized operands, with the
kernels replaced by jnp models of their contracts whose dgrad and wgrad refuse an operand of another dtype than the
output's (grouped_mgpu_shard.stand_ins); TRN001 on both sides. Under jax.shard_map (four CPU devices, both check_vma
modes, the e5m2 form among the shard test's): test_grouped_training_mgpu_shard.py. The kernels' numerics run on a
Hopper GPU: tests/gpu/test_grouped_training_mgpu_fp8_gpu.py."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from backends.pallas.grouped_mgpu_shard import stand_ins
from backends.pallas.test_grouped_mgpu import loaded, render
from backends.pallas.test_grouped_training_mgpu import _reference
from specgen.check import check_specs
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_FP8_TRAINING_FORMS
from specgen.kinds.grouped.testing.reference import dequantized
from specgen.resolve import resolve
from specgen.spec.load import SpecError, load_text

FP8 = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2}
OUT = {"bf16": jnp.bfloat16, "f16": jnp.float16}
BIAS = {"bf16": jnp.bfloat16, "f32": jnp.float32}
ROLE_CONFIG = {"forward_pre": "_PRE_CONFIG", "recompute": "_PRE_CONFIG", "dgrad": "_DGRAD_CONFIG",
               "wgrad": "_WGRAD_CONFIG"}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("grouped_mgpu_fp8_train")
    return {name: (render(s, tmp), s, resolve(loaded(s).spec, loaded(s).spec.targets[0]))
            for name, s in MGPU_FP8_TRAINING_FORMS.items()}


def bias_dtype(spec: dict) -> object | None:
    return next((BIAS[op["dtype"]] for op in spec["epilogue"] if op["op"] == "bias"), None)


def test_the_conversion_to_the_output_dtype_is_exact() -> None:
    """Every finite e4m3 and e5m2 value is a bf16 and an f16 value: the backward's jnp astype of the 8-bit A and B
    (what dgrad and wgrad read) loses nothing."""
    for fp8 in FP8.values():
        values = jnp.asarray(np.arange(256, dtype=np.uint8)).view(fp8)
        exact = np.asarray(values.astype(jnp.float32), np.float64)
        finite = np.isfinite(exact)
        for out in OUT.values():
            got = np.asarray(values.astype(out).astype(jnp.float32), np.float64)
            assert np.array_equal(got[finite], exact[finite]), (fp8, out)


def test_each_role_runs_a_16_bit_companion_at_its_checked_config(modules) -> None:
    """The METADATA names the backward's dtype (the output's); pre is the fp8 ragged-M kernel with the scales (8-bit
    A and B, K-major), dgrad and wgrad the 16-bit companions the kind derives, each at the Config check resolved."""
    for name, (mod, spec, r) in modules.items():
        t = mod.METADATA["training"]
        assert t["fp8_backward_dtype"] == jnp.dtype(OUT[spec["out"]["dtype"]]).name, name
        assert list(t["gemms"]) == [c.companion for c in r.companions], name
        for c in r.companions:
            cfg, want = getattr(mod, ROLE_CONFIG[c.companion]), mgpu_config(c)
            assert cfg.tile_k == want.tile_k and cfg.stages == c.ab_stages and cfg.smem_bytes == want.smem_bytes
            dtype = c.spec.a.dtype.value
            assert dtype == (spec["a"]["dtype"] if c.companion in ("forward_pre", "recompute") else spec["out"]["dtype"])
        assert (t["gemms"]["dgrad"]["b_major"], t["gemms"]["wgrad"]["ragged"]) == ("mn", "k")


@pytest.mark.parametrize("name,shape", [("gmt_fp8_bias_gelu_tanh_preact", (300, 200, 256, 4)),
                                        ("gmt_fp8_e5m2_silu_recompute", (1, 48, 136, 2)),
                                        ("gmt_fp8_bias_f16", (130, 136, 200, 3))])
def test_grad_under_jit_lowers_with_every_backward_kernel(modules, name, shape) -> None:
    """jax.grad of the entry under jax.jit in A, B, the scales and the bias (and the caller's `out` with an untouched
    tail) lowers for CUDA over a shape off the tiles (M = 1 among them), each backward kernel a Mosaic GPU launch
    named as its companion; dA and dB come back in the output's dtype (the dequantized operands' gradients), the
    scales' and the bias's in theirs."""
    mod, spec, r = modules[name]
    m, n, k, g = shape
    fp8, out_dt = FP8[spec["a"]["dtype"]], OUT[spec["out"]["dtype"]]
    args = [jax.ShapeDtypeStruct((m, k), fp8), jax.ShapeDtypeStruct((g, n, k), fp8), jax.ShapeDtypeStruct((g,), jnp.int32),
            jax.ShapeDtypeStruct((m,), jnp.float32), jax.ShapeDtypeStruct((g, n), jnp.float32)]
    if (bias := bias_dtype(spec)) is not None:
        args.append(jax.ShapeDtypeStruct((g, n), bias))
    untouched = spec["groups"]["tail"] == "untouched"
    xs = [*args, *([jax.ShapeDtypeStruct((m, n), out_dt)] if untouched else [])]

    def loss(*ys):
        return jnp.sum(mod._call(*ys[:len(args)], ys[len(args)] if untouched else None).astype(jnp.float32))

    argnums = tuple(i for i in range(len(xs)) if i != 2)
    grads = jax.jit(jax.grad(loss, argnums=argnums))
    text = grads.trace(*xs).lower(lowering_platforms=("cuda",)).as_text()
    for c in r.companions:
        assert f"{name}_{c.companion}" in text, (name, c.companion)
    assert text.count("mosaic_gpu") >= len(r.companions)
    got = jax.eval_shape(grads, *xs)
    assert [(s.shape, s.dtype) for s in got[:2]] == [((m, k), jnp.dtype(out_dt)), ((g, n, k), jnp.dtype(out_dt))]
    assert [(s.shape, s.dtype) for s in got[2:]] == [(xs[i].shape, xs[i].dtype) for i in argnums[2:]]


def test_the_compile_hook_lowers_the_forward_and_each_backward_gemm(modules) -> None:
    """`specgen compile`'s hook lowers the fp8 forward, then each backward GEMM's launcher alone: pre over 8-bit A and
    B with the scales and the bias, dgrad and wgrad over operands of the output's dtype, each with its plan's SMEM."""
    from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
    from specgen.targets import TARGETS

    name = "gmt_fp8_bias_gelu_tanh_preact"
    mod, _, r = modules[name]
    rows = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert [x.kernel for x in rows] == [name, *(f"{name}[{c.companion}]" for c in r.companions)]
    for x, plan in zip(rows, [mod.CONFIG.smem_bytes, *(c.budget.total for c in r.companions)], strict=True):
        assert not x.error and x.compiler_smem == x.plan_smem == plan, (x.kernel, x.error)


# --- the vjp glue against float64 autograd of the dequantized problem: the kernels as jnp models -----------------
SIZES = np.array([0, 9, 0, 14, 11, 0], np.int32)  # empty groups first, in the middle and last; 34 rows, 11 past them
M, N, K = 45, 24, 40


def problem(spec: dict, seed: int = 7, shape: tuple = (M, N, K), sizes: np.ndarray = SIZES) -> dict:
    """Seeded fp8 A (M, K) and B (G, N, K), scales, a bias, the caller's out (an untouched tail: NaN in the rows the
    groups hold, which the forward overwrites) and the loss weights W (NaN past the groups with a zero tail: no
    gradient may read them); `sizes` the group sizes (int32, rows past their sum)."""
    rng = np.random.default_rng(seed)
    (m, n, k), g = shape, len(sizes)
    fp8, out_dt = FP8[spec["a"]["dtype"]], OUT[spec["out"]["dtype"]]
    untouched, inside = spec["groups"]["tail"] == "untouched", int(min(sizes.sum(), m))
    w = rng.standard_normal((m, n)).astype(np.float32)
    out = rng.standard_normal((m, n))
    out[:inside] = np.nan
    if not untouched:
        w[inside:] = np.nan
    bias = bias_dtype(spec)
    index = np.cumsum(sizes) if spec["groups"]["index"] == "offs" else sizes
    return {"a": jnp.asarray(rng.standard_normal((m, k)) * 2, fp8), "b": jnp.asarray(rng.standard_normal((g, n, k)), fp8),
            "index": jnp.asarray(index, jnp.int32), "scale_a": jnp.asarray(rng.uniform(0.5, 1.5, m) / k, jnp.float32),
            "scale_b": jnp.asarray(rng.uniform(0.5, 1.5, (g, n)), jnp.float32),
            "bias": None if bias is None else jnp.asarray(rng.standard_normal((g, n)), bias),
            "out": jnp.asarray(out, out_dt) if untouched else None, "w": w, "sizes": np.asarray(sizes, np.int32)}


def expected(spec: dict, x: dict) -> dict:
    """float64 autograd of the per-group loop over the dequantized operands (the chain past the scales), by argument
    position (0 a, 1 b (G, N, K), 2 bias, 3 out)."""
    a, b = dequantized(x["a"], x["b"], x["scale_a"], x["scale_b"], "k")
    rest = {**spec, "epilogue": spec["epilogue"][1:]}
    return _reference(rest, a, b, x["sizes"], x["bias"], np.nan_to_num(x["w"]), x["out"])


def check(spec: dict, x: dict, got: tuple, what: str) -> None:
    """dA, dB, [dbias], [d out] against `expected`; dA exactly 0 past the groups, an empty group's dB and dbias
    exactly 0, the caller's out dOut past the groups."""
    want = expected(spec, x)
    keys = [0, 1, *([2] if x["bias"] is not None else []), *([3] if x["out"] is not None else [])]
    for key, gi in zip(keys, got, strict=True):
        gi, ref = np.asarray(jnp.asarray(gi, jnp.float32), np.float64), want[key]
        assert gi.shape == ref.shape and np.isfinite(gi).all(), (what, key)
        np.testing.assert_allclose(gi, ref, rtol=3e-2, atol=3e-2 * max(1.0, np.abs(ref).max()), err_msg=f"{what} arg {key}")
    sizes = x["sizes"]
    inside, empty = int(min(sizes.sum(), x["a"].shape[0])), [g for g, s in enumerate(sizes) if s == 0]
    assert not np.asarray(got[0], np.float64)[inside:].any()
    assert not np.asarray(got[1], np.float64)[empty].any()
    if x["bias"] is not None:
        assert not np.asarray(got[2], np.float64)[empty].any()
    if x["out"] is not None:
        dout = np.asarray(got[-1], np.float64)
        assert not dout[:inside].any() and np.array_equal(
            dout[inside:], np.asarray(jnp.asarray(x["w"][inside:], x["out"].dtype), np.float64))


def model(mod: object, spec: dict, tag: str) -> object:
    """A fresh copy of the rendered module (no trace of its real kernels cached in its jitted `_call`) with the
    kernels replaced by their jnp models."""
    fresh = load_rendered(mod.__file__, f"_gmt_fp8_model_{spec['name']}_{tag}")  # type: ignore[attr-defined]
    stand_ins(fresh, spec, setattr)
    return fresh


def arrays(x: dict) -> list:
    return [x["a"], x["b"], x["index"], x["scale_a"], x["scale_b"], *([x["bias"]] if x["bias"] is not None else [])]


@pytest.mark.parametrize("name", list(MGPU_FP8_TRAINING_FORMS))
def test_the_vjp_glue_against_float64_autograd(modules, name) -> None:
    """jax.grad under jax.jit of the entry (kernels as jnp models, pre past the groups NaN where the kernel leaves it
    unspecified) against float64 autograd of the dequantized problem; the scales' gradients are zeros (the rule
    returns None for them), sizes get none."""
    mod, spec, _ = modules[name]
    mod = model(mod, spec, "glue")
    x = problem(spec)
    loss, argnums, xs = loss_fn(mod, x)
    got, y = jax.jit(jax.grad(loss, argnums=argnums, has_aux=True))(*xs)
    check(spec, x, got[:-2], name)
    assert np.isfinite(np.asarray(y)).all()  # the caller's out was NaN in the groups' rows: overwritten
    assert [d.shape for d in got[-2:]] == [(M,), (len(SIZES), N)] and not any(np.asarray(d).any() for d in got[-2:])


def loss_fn(mod: object, x: dict):
    """sum(W * entry(...)) over the rows W is finite, in (A, B, the scales, [the bias], [the caller's out])."""
    xs, w = arrays(x), jnp.asarray(x["w"])
    n_in = len(xs)

    def loss(*ys):
        y = mod._call(*ys[:n_in], ys[n_in] if x["out"] is not None else None).astype(jnp.float32)  # type: ignore[attr-defined]
        return jnp.sum(jnp.where(jnp.isnan(w), 0.0, w * y)), y

    diff = (0, 1, *((5,) if x["bias"] is not None else ()), *((n_in,) if x["out"] is not None else ()))
    return loss, (*diff, 3, 4), [*xs, *([x["out"]] if x["out"] is not None else [])]


# --- check's side ----------------------------------------------------------------------------------------------
def _diagnostics(spec: dict) -> list:
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return check_specs([ls]).diagnostics


def test_trn001_passes_the_fp8_forms_here_and_on_cute_sm90() -> None:
    """The fp8 forms check clean on pallas:gpu_sm90 (TRN001 refused them before session 29), and on cute:sm90 (its
    refusal lifted in session 32: tests/grouped/test_cute_sm90_training_fp8.py). An N-major fp8 B is the forward's
    MAJ001, and an f32 output the grouped kind's check at load."""
    for s in MGPU_FP8_TRAINING_FORMS.values():
        assert not [d for d in _diagnostics(s) if d.severity == "error"], s["name"]
    s = MGPU_FP8_TRAINING_FORMS["gmt_fp8_bias_gelu_tanh_preact"]
    assert not [d for d in _diagnostics({**s, "targets": ["cute:sm90"], "cute": {}}) if d.rule == "TRN001"]
    assert {d.rule for d in _diagnostics({**s, "b": {"dtype": "fp8_e4m3", "major": "mn"}}) if d.severity == "error"} == {"MAJ001"}
    with pytest.raises(SpecError, match=r"training: out.dtype = f32 with fp8_e4m3 operands"):
        load_text(json.dumps({"kernels": [{**s, "out": {"dtype": "f32"}}]}), "<test>", ".json")
