"""The grouped Pallas TPU module's backward (a ragged-M spec's `training` section: designs/pallas/training.py,
templates/grouped/pallas/backward_tpu.jinja): jax.grad under jax.jit of the JAX entry's jax.custom_vjp in Pallas's
strict TPU interpreter on the CPU (uninitialized VMEM, every fresh output buffer and reads past an array's end are
NaN: a gradient element no kernel writes shows), against float64 torch autograd of the grouped kind's per-group loop
(specgen/kinds/grouped/testing/reference.py), and against jax.grad of jax.lax.ragged_dot on the CPU. No TPU here:
nothing ran natively; the backward's programs are lowered to Mosaic for TPU on the CPU.

`TPU_TRAINING_FORMS` (tpu_specs.py): bias + GELU-tanh saved (preact, B K-major, tail zero), bias + SiLU recomputed
(B N-major, offs, an untouched tail with the caller's `out`), bf16 with a bias alone (G = dOut); gated (halves: pre
and G (rows, 2N), dgrad and wgrad over 2N): SwiGLU then a bias saved (B (G, 2N, K) K-major, N = 130), GeGLU-tanh
recomputed (B (G, K, 2N) N-major, N = 128: the forward's up block j + N / tile.n, offs, an untouched tail); fp8 forwards
(a bf16 backward w.r.t. the dequantized operands A scale_a and B[g] scale_b[g], against the loop over those): e4m3 x
e5m2 (v7x) with a bias and GELU-tanh saved, e5m2 (v5e, v6e) with SiLU recomputed, B N-major, an untouched tail. One
shape (M = 21 rows over 8-row tiles, N = 130 and K = 200 off the 128 blocks, G = 6; and M = 1 for the bf16 form) and
one jitted gradient a form, over two size cases: empty groups first and last with a row tile shared by four groups, and two empty groups in the
middle; rows past the last group hold NaN in dOut where the tail is zero (they take no part in the backward)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from backends.pallas.test_grouped_tpu import render
from specgen.check import check_all
from specgen.kinds.grouped.testing.reference import dequantized, grouped
from specgen.kinds.grouped.testing.tpu_specs import TPU_TRAINING_FORMS
from specgen.spec.load import load_text

jax = pytest.importorskip("jax")
jnp = jax.numpy

M, N, K, G = 21, 130, 200, 6
N_GATED_MN = 128  # a gated N-major B's up half starts at block N / tile.n: N a multiple of the block (two N blocks: 2N)
CASES = {"empty_first_last_tile_shared_by_4": (0, 3, 2, 2, 9, 0), "empty_middle": (5, 0, 0, 11, 0, 3)}
JNP = {"f32": jnp.float32, "bf16": jnp.bfloat16, "fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_training_tpu")
    return {name: render(s, folder) for name, s in TPU_TRAINING_FORMS.items()}


def has_bias(spec: dict) -> bool:
    return any(op["op"] == "bias" for op in spec["epilogue"])


def gated_form(spec: dict) -> bool:
    return any(op["op"] == "gated" for op in spec["epilogue"])


def fp8_form(spec: dict) -> bool:
    return spec["a"]["dtype"].startswith("fp8")


class Problem:
    """Seeded A (M, K), B (G, K, N) logical and stored, a bias (G, N), dOut (M, N); the caller's `out` with an
    untouched tail."""

    def __init__(self, spec: dict, m: int = M) -> None:
        rng = np.random.default_rng(len(spec["name"]) + m)
        dt = JNP[spec["a"]["dtype"]]
        self.spec = spec
        gated = gated_form(spec)  # B (G, K, 2N): gate columns [0, N), up [N, 2N); N-major: N a multiple of the block
        n = N_GATED_MN if gated and spec["b"]["major"] == "mn" else N
        self.fp8 = fp8_form(spec)  # 8-bit A and B (their own dtypes), scale_a (M,) and scale_b (G, N)
        self.a = jnp.asarray(rng.standard_normal((m, K)) / (1 if self.fp8 else np.sqrt(K)), dt)
        self.b_logical = jnp.asarray(rng.standard_normal((G, K, 2 * n if gated else n)), JNP[spec["b"]["dtype"]])
        self.b = self.b_logical if spec["b"]["major"] == "mn" else jnp.swapaxes(self.b_logical, 1, 2)
        self.scales = (jnp.asarray(rng.uniform(0.5, 1.5, m) / np.sqrt(K), jnp.float32),
                       jnp.asarray(rng.uniform(0.5, 1.5, (G, n)), jnp.float32)) if self.fp8 else ()
        bias = [op for op in spec["epilogue"] if op["op"] == "bias"]
        self.bias = jnp.asarray(rng.standard_normal((G, n)), JNP[bias[0]["dtype"]] if bias else jnp.float32)
        self.dout = rng.standard_normal((m, n))
        self.base = jnp.asarray(rng.standard_normal((m, n)), JNP[spec["out"]["dtype"]])
        self.untouched = spec["groups"]["tail"] == "untouched"

    def index(self, sizes: tuple[int, ...]) -> jax.Array:
        values = np.cumsum(sizes) if self.spec["groups"]["index"] == "offs" else np.asarray(sizes)
        return jnp.asarray(values, jnp.int32)

    def dout_for(self, sizes: tuple[int, ...]) -> jax.Array:
        """dOut; NaN in the rows past the last group where the tail is zero (no gradient may read them)."""
        d = self.dout.copy()
        if not self.untouched:
            d[sum(sizes):] = np.nan
        return jnp.asarray(d, jnp.float32)

    def grad_fn(self, module: object):
        """jax.jit(jax.grad) of sum(out * dOut) in a, b, the bias (where the chain has one) and the caller's out
        (an untouched tail's)."""
        fn = getattr(module, self.spec["name"])

        def loss(a, b, bias, base, index, dout):
            out = fn(a, b, index, *self.scales, *((bias,) if has_bias(self.spec) else ()),
                     **({"out": base} if self.untouched else {}))
            return (out.astype(jnp.float32) * dout).sum()

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))

    def reference(self, sizes: tuple[int, ...]) -> dict[str, np.ndarray]:
        """float64 torch autograd of the per-group loop (the tail: zeros, or the caller's out)."""
        def f64(x: object) -> torch.Tensor:
            return torch.from_numpy(np.asarray(jnp.asarray(x, jnp.float32), np.float64)).requires_grad_()

        spec = self.spec
        if self.fp8:  # the dequantized operands' gradients: the loop over A scale_a and B[g] scale_b[g], then the chain
            a, b = (f64(x) for x in dequantized(self.a, self.b_logical, *self.scales, "mn"))  # B (G, K, N) logical
            spec = {**spec, "a": {**spec["a"], "dtype": "f32"}, "b": {**spec["b"], "dtype": "f32"},
                    "epilogue": spec["epilogue"][1:], "training": None}
        else:
            a, b = f64(self.a), f64(self.b_logical)
        bias, base = f64(self.bias), f64(self.base)
        args = {op["name"]: bias for op in self.spec["epilogue"] if op["op"] == "bias"}
        out, written = grouped(spec, a, b, torch.from_numpy(np.array(self.index(sizes))), args)
        if self.untouched:
            out = torch.where(written[:, None], out, base)
        dout = torch.from_numpy(np.asarray(self.dout_for(sizes), np.float64)).nan_to_num()  # the tail: out is 0 there
        loss = (out * dout).sum()
        if loss.requires_grad:  # (every group empty and a zero tail: out is no function of the inputs)
            loss.backward()
        grads = {name: (x.grad if x.grad is not None else torch.zeros_like(x)).detach().numpy()
                 for name, x in (("a", a), ("b", b), ("bias", bias), ("base", base))}
        if self.spec["b"]["major"] == "k":
            grads["b"] = grads["b"].transpose(0, 2, 1)  # B's stored layout
        return grads


def close(got: object, want: np.ndarray, spec: dict, what: str) -> None:
    got = np.asarray(jnp.asarray(got, jnp.float32), np.float64)
    assert not np.isnan(got).any(), f"{what}: {int(np.isnan(got).sum())} NaN (an element no kernel wrote, or NaN read)"
    tol = 3e-2 if spec["a"]["dtype"] == "bf16" or fp8_form(spec) else 2e-4  # fp8: a bf16 backward
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=f"{spec['name']} {what}")


@pytest.mark.parametrize("name", list(TPU_TRAINING_FORMS))
def test_gradients_match_float64_autograd_of_the_per_group_loop(modules, name):
    """dA (rows past the last group exactly 0), dB in B's stored layout (an empty group's exactly 0), dbias (G, N)
    (an empty group's exactly 0), and an untouched tail's `out` getting dOut in the rows past the groups; one jitted
    gradient serves both size cases (new sizes, the same shapes). An fp8 forward's are the dequantized operands'
    (A scale_a, B[g] scale_b[g]), in bf16; its scales get zeros (checked on one fp8 form)."""
    spec = TPU_TRAINING_FORMS[name]
    p = Problem(spec)
    grad = p.grad_fn(modules[name])
    for case, sizes in CASES.items():
        da, db, dbias, dbase = grad(p.a, p.b, p.bias, p.base, p.index(sizes), p.dout_for(sizes))
        want = p.reference(sizes)
        close(da, want["a"], spec, f"{case} dA")
        close(db, want["b"], spec, f"{case} dB")
        assert (np.asarray(da[sum(sizes):]) == 0).all(), "dA past the last group"
        empty = [g for g, s in enumerate(sizes) if s == 0]
        assert (np.asarray(db)[empty] == 0).all(), "an empty group's dB"
        if has_bias(spec):
            close(dbias, want["bias"], spec, f"{case} dbias")
            assert (np.asarray(dbias)[empty] == 0).all(), "an empty group's dbias"
        if p.untouched:
            close(dbase, want["base"], spec, f"{case} d out")
        if name == "gtt_bias_gelu_tanh_preact":
            ragged_dot_grads(p, sizes, (da, db, dbias))
    assert grad._cache_size() == 1
    if name == "gtt_fp8_mix_bias_gelu_tanh_preact":  # the scales get no gradient: the rule returns None, jax.grad zeros
        fn, extra = getattr(modules[name], spec["name"]), (p.bias,) if has_bias(spec) else ()
        dscales = jax.jit(jax.grad(lambda sa, sb: fn(p.a, p.b, p.index(sizes), sa, sb, *extra).astype(jnp.float32).sum(),
                                   argnums=(0, 1)))(*p.scales)
        assert [d.shape for d in dscales] == [s.shape for s in p.scales] and not any(np.asarray(d).any() for d in dscales)
    if name == "gtt_bias_bf16":  # M = 1: the one row in group 2 (every ragged-K companion's K is 1), then past them
        p1 = Problem(spec, m=1)
        grad1 = p1.grad_fn(modules[name])
        for sizes in ((0, 0, 1, 0, 0, 0), (0, 0, 0, 0, 0, 0)):
            da, db, dbias, _ = grad1(p1.a, p1.b, p1.bias, p1.base, p1.index(sizes), p1.dout_for(sizes))
            want = p1.reference(sizes)
            for got, key in ((da, "a"), (db, "b"), (dbias, "bias")):
                close(got, want[key], spec, f"M = 1 {sizes} d{key}")


def ragged_dot_grads(p: Problem, sizes: tuple[int, ...], got: tuple) -> None:
    """The same gradients as jax.grad of gelu_tanh(ragged_dot(A, B, sizes) + bias[g]) with ragged_dot's zero tail,
    on the CPU (f32, B K-major viewed as ragged_dot's (G, K, N))."""
    index, dout = p.index(sizes), jnp.nan_to_num(p.dout_for(sizes))
    gid = jnp.repeat(jnp.arange(G), jnp.asarray(sizes), total_repeat_length=M)
    inside = (jnp.arange(M) < sum(sizes))[:, None]

    def ragged(a, b, bias):
        out = jax.nn.gelu(jax.lax.ragged_dot(a, jnp.swapaxes(b, 1, 2), index) + bias[gid], approximate=True)
        return (jnp.where(inside, out, 0.0) * dout).sum()

    want = jax.jit(jax.grad(ragged, argnums=(0, 1, 2)))(p.a, p.b, p.bias)
    for g, w, what in zip(got, want, ("dA", "dB", "dbias"), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4, err_msg=f"ragged_dot {what}")




@pytest.mark.parametrize("name", ["gtt_bias_gelu_tanh_preact", "gtt_swiglu_bias_preact", "gtt_geglu_tanh_recompute_mn",
                                  "gtt_fp8_mix_bias_gelu_tanh_preact", "gtt_fp8_e5m2_silu_recompute_mn"])
def test_the_backward_lowers_to_mosaic_for_tpu(modules, name):
    """jax.grad of the entry, lowered for TPU on the CPU (interpret=False): every kernel of the forward rule and the
    backward (pre, dgrad, wgrad, dbias; the gated forms' over B's 2N columns, recompute's beside the forward's) is a
    Mosaic tpu_custom_call."""
    mod, p = modules[name], Problem(TPU_TRAINING_FORMS[name])
    bias = has_bias(p.spec)

    def loss(a, b, bias_, index):
        return mod._call(a, b, index, *p.scales, *((bias_,) if bias else ()), None, interpret=False).astype(jnp.float32).sum()

    lowered = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(p.a, p.b, p.bias, p.index(CASES["empty_middle"]))
    text = lowered.lower(lowering_platforms=("tpu",)).as_text()
    gemms = mod.METADATA["training"]["gemms"]
    assert text.count("tpu_custom_call") >= len(gemms), text.count("tpu_custom_call")
    for kernel in ("_pre", "_dgrad", "_wgrad", *(("_dbias",) if bias else ())):
        assert f"{name}{kernel}" in text, kernel
    assert set(gemms) == {"forward_pre" if p.spec["training"]["save"] == "preact" else "recompute", "dgrad", "wgrad",
                          *(("dbias",) if bias else ())}
    assert ("gated" in mod.METADATA["training"]) == gated_form(p.spec)
    assert ("fp8_backward_dtype" in mod.METADATA["training"]) == fp8_form(p.spec)


def test_the_forms_check_clean_and_the_rules_refuse_the_rest():
    """The forms pass check on their TPU targets (their companions through VMEM001 and PAL001 at training.*; the gated
    forms' pre, dgrad and wgrad over B's 2N columns); an interleaved gated B is refused by the forward's GRP204, an fp8
    forward's 8-bit blocks of fewer than 32 rows by GRP205."""
    def errors(spec: dict) -> list:
        (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
        return [d for d in check_all([loaded]) if d.severity == "error"]

    for spec in TPU_TRAINING_FORMS.values():
        assert errors(spec) == []
    gated = TPU_TRAINING_FORMS["gtt_swiglu_bias_preact"]
    interleaved = {**gated, "epilogue": [{**gated["epilogue"][0], "layout": "interleaved"}, gated["epilogue"][1]]}
    assert {d.rule for d in errors(interleaved)} == {"GRP204"}
    # an fp8 forward's backward reads the 8-bit A as stored in wgrad: 32-row blocks (GRP205; PAL001 on the bf16
    # companion asks 16)
    fp8 = TPU_TRAINING_FORMS["gtt_fp8_e5m2_silu_recompute_mn"]
    narrow8 = {**fp8, "training": {"save": "recompute", "wgrad": {"tile": {"m": 128, "n": 128, "k": 16}}}}
    assert {(d.rule, d.target, d.message.split(": ")[0]) for d in errors(narrow8)} == {
        ("GRP205", t, "training.wgrad") for t in fp8["targets"]}
    # the gated pre GEMM (over 2N: one B block a step, out and the untouched tail's base beside it) through VMEM001,
    # both sides of v5e's and v6e's 128 MiB
    for tile, want in (({"m": 1024, "n": 2048, "k": 2048}, set()), ({"m": 2048, "n": 4096, "k": 2048}, {
            ("VMEM001", "backward forward_pre", "needs 268435456 B of VMEM > 134217728 B")})):
        big = {**gated, "training": {**gated["training"], "pre": {"tile": tile}}}
        assert {(d.rule, d.variant, d.message.split(" on ")[0]) for d in errors(big)} == want
    narrow = {**TPU_TRAINING_FORMS["gtt_bias_gelu_tanh_preact"], "training": {"save": "preact"}}  # wgrad on the forward's 8x128x128
    assert {(d.rule, d.variant) for d in errors(narrow)} == {("PAL001", "backward wgrad")}
