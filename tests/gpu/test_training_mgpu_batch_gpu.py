"""Training with `batch = true` on the Mosaic GPU target (pallas:gpu_sm90; docs/training/batched.md, "A batched GEMM on
Pallas") on a Hopper GPU with jax[cuda]: specs rendered here give, through `jax.grad` under `jax.jit` of the batched
JAX entry (its jax.custom_vjp: each backward GEMM per batch entry with the unbatched wgmma kernels, the columns / chain
pass over the batches' rows as one (batch M, N) matrix), gradients of A, B and every argument within bf16 rounding of
float64 autograd of the batched reference (or twice the same step's error in plain jnp at bf16), in their stored
layouts, a vector's gradient summed over every batch entry: [bias, gelu_tanh] preact, [bias, silu] recompute with A
stored (batch, K, M), [] with both operands mn-major, a gated op with a bias (SwiGLU halves preact, GeGLU-tanh
interleaved recompute), and the other chains (a row vector, a column scale, a residual) recompute, and (session 34)
residuals before and after pre in preact; batch 1 and 3, M = 1, M, N, K off the tiles; the gradients' memory
poisoned with NaN first (an unwritten tile stays NaN).

Since session 34 each backward GEMM runs every batch entry in one launch (the kernel walking batch x tiles): the six
session-33 cases passed on an H200 with the per-entry launches (session 33) and with the one-launch form (session 34),
and so did the seventh case (mgbg_chain_pre_res, session 34).

Session 34 adds a batched fp8 forward's (`test_batched_fp8_gradients`: the CPU tests' three forms,
tests/backends/pallas/test_training_mgpu_batch_fp8.py; scale_a (M,) and scale_b (N,) shared by the batches): dA[i] and
dB[i] the gradients of the dequantized operands within the 16-bit backward's rounding of float64 autograd, dbias over
every entry's rows, the scales' gradients zeros; NaN-poisoned memory first. Passed on an H200 (session 34, through the
one-launch kernels).

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

BIAS = {"op": "bias", "along": "n", "dtype": "bf16"}
# name: (epilogue, save, majors, (batch, M, N, K))
CASES = {
    "mgbg_bias_gelu_pre": ([BIAS, {"op": "activation", "fn": "gelu_tanh"}], "preact", "k_k", (3, 300, 520, 200)),
    "mgbg_bias_silu_rec_mnk": ([BIAS, {"op": "activation", "fn": "silu"}], "recompute", "mn_k", (3, 1, 264, 72)),
    "mgbg_plain_mnmn": ([], "preact", "mn_mn", (1, 37, 136, 40)),
    "mgbg_gated_pre": ([{"op": "gated", "fn": "silu", "layout": "halves"}, BIAS], "preact", "k_k", (3, 130, 192, 72)),
    "mgbg_geglu_il_rec": ([{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, BIAS], "recompute", "k_k",
                          (3, 1, 128, 72)),
    "mgbg_chain_rec": ([{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "activation", "fn": "sigmoid"},
                        {"op": "scale", "by": "col"}, {"op": "residual", "dtype": "bf16", "beta": 0.5}], "recompute", "k_k",
                       (3, 200, 136, 136)),
    # session 34: residuals before and after pre in preact (each tile's subtiles TMA-loaded from its entry's matrix)
    "mgbg_chain_pre_res": ([{"op": "residual", "dtype": "bf16", "name": "c"}, {"op": "activation", "fn": "silu"},
                            {"op": "residual", "dtype": "bf16", "beta": 0.5, "name": "r2"}], "preact", "k_k", (3, 200, 136, 136)),
}


def rendered(name: str, tmp_path_factory):
    from backends.pallas.test_mgpu_module import render

    from specgen.kinds.gemm.spec import GemmSpec

    epilogue, save, majors, _ = CASES[name]
    a, b = majors.split("_")
    spec = GemmSpec.model_validate({
        "name": name, "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": a},
        "b": {"dtype": "bf16", "major": b}, "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save},
        "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
        "targets": ["pallas:gpu_sm90"]}).model_dump(mode="json")
    return render(spec, Path(tmp_path_factory.mktemp(name)))[0], spec


def inputs(spec: dict, shape):
    import jax.numpy as jnp

    from specgen.kinds.gemm.spec import GemmSpec

    batch, M, N, K = shape
    rng = np.random.default_rng(0)
    bn = 2 * N if any(op["op"] == "gated" for op in spec["epilogue"]) else N
    a = rng.standard_normal((batch, M, K) if spec["a"]["major"] == "k" else (batch, K, M)) / np.sqrt(K)
    b = rng.standard_normal((batch, bn, K) if spec["b"]["major"] == "k" else (batch, K, bn))
    args, names = [jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)], ["a", "b"]
    for arg in GemmSpec.model_validate(spec).runtime_args():
        shp = {"vec_m": (M,), "vec_n": (N,), "matrix": (batch, M, N)}[arg.shape]
        dt = jnp.float32 if arg.dtype.value == "f32" else jnp.bfloat16
        args.append(jnp.asarray(rng.uniform(0.5, 1.5, shp) if arg.name == "col_scale" else rng.standard_normal(shp), dt))
        names.append(arg.name)
    return args, names, jnp.asarray(rng.standard_normal((batch, M, N)), jnp.bfloat16)


def reference(spec: dict, args, names, grad):
    """float64 torch autograd of the batched reference, in the stored layouts."""
    import torch

    from specgen.kinds.gemm.testing.reference import REFERENCES

    leaves = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_() for x in args]
    a = leaves[0] if spec["a"]["major"] == "k" else leaves[0].mT
    b = leaves[1].mT if spec["b"]["major"] == "k" else leaves[1]
    out = REFERENCES["gemm"](spec["epilogue"], a, b, dict(zip(names[2:], leaves[2:], strict=True)))
    out.backward(torch.from_numpy(np.asarray(grad, np.float64)))
    return out.detach().numpy(), [x.grad.numpy() for x in leaves]


def plain_jnp(spec: dict, names):
    """The same batched layer in plain jnp at bf16 (f32 accumulation, pre rounded to bf16), for jax's own autodiff."""
    import jax
    import jax.numpy as jnp

    acts = {"gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}

    def fn(a, b, *rest):
        args = dict(zip(names[2:], rest, strict=True))
        x = a if spec["a"]["major"] == "k" else a.mT
        w = b.mT if spec["b"]["major"] == "k" else b
        v = jnp.matmul(x, w, preferred_element_type=jnp.float32)
        for op in spec["epilogue"]:
            if op["op"] == "gated":
                n = v.shape[-1] // 2
                gate, up = (v[..., :n], v[..., n:]) if op["layout"] == "halves" else (v[..., 0::2], v[..., 1::2])
                v = acts[op["fn"]](gate.astype(jnp.bfloat16).astype(jnp.float32)) * up
            elif op["op"] == "bias":
                v = v + args[op["name"]].astype(jnp.float32).reshape((-1, 1) if op["along"] == "m" else (1, -1))
            elif op["op"] == "activation":
                v = acts[op["fn"]](v.astype(jnp.bfloat16).astype(jnp.float32))
            elif op["op"] == "scale":
                v = v * args[op["name"] or "col_scale"].astype(jnp.float32).reshape(1, -1)
            elif op["op"] == "residual":
                v = v + op["beta"] * args[op["name"]].astype(jnp.float32)
        return v.astype(jnp.bfloat16)

    return fn


def poison(args, grad) -> None:
    """NaN-filled blocks of each gradient's size allocated and freed first (as test_training_mgpu_gpu.py's `poison`):
    XLA's allocator hands them to the backward's outputs, so a tile a kernel forgot stays NaN."""
    import jax.numpy as jnp

    blocks = [jnp.full(x.shape, jnp.nan, x.dtype) for x in (*args, grad)]
    for blk in blocks:
        blk.block_until_ready()
    for blk in blocks:
        blk.delete()


@pytest.mark.parametrize("name", list(CASES))
def test_batched_gradients_against_float64(name: str, tmp_path_factory) -> None:
    from gpu.test_training_mgpu_gpu import err, grads_of

    mod, spec = rendered(name, tmp_path_factory)
    args, names, grad = inputs(spec, CASES[name][3])
    poison(args, grad)
    out, grads = grads_of(getattr(mod, name), args, grad)
    want_out, want = reference(spec, args, names, grad)
    ref_out, ref_grads = grads_of(plain_jnp(spec, names), args, grad)
    for what, got, w, mine in [("out", out, want_out, ref_out), *zip((f"d{n}" for n in names), grads, want, ref_grads, strict=True)]:
        e, scale = err(got, w)
        e_jnp, _ = err(mine, w)
        assert e <= max(2e-2 * scale, 2 * e_jnp), f"{name} {what}: error {e:.3g} (plain jnp's {e_jnp:.3g}, scale {scale:.3g})"
    for g, x in zip(grads, args, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype


# A batched fp8 forward (session 34): (form of the CPU test, (batch, M, N, K)): off every tile, M = 1 with N under one
FP8_CASES = [("e4m3_bias_gelu_preact", (3, 300, 520, 200)), ("e5m2_bias_silu_recompute", (3, 1, 48, 40)),
             ("e4m3_bias", (1, 130, 264, 72))]


@pytest.mark.parametrize(("name", "shape"), FP8_CASES, ids=[c[0] for c in FP8_CASES])
def test_batched_fp8_gradients(name: str, shape, tmp_path_factory) -> None:
    """jax.grad under jax.jit of the batched fp8 entry: out, dA, dB (the output's dtype) and dbias within 2e-2 of the
    largest float64 value (the unbatched fp8 GPU test's bound), the scales' gradients zeros."""
    import jax.numpy as jnp
    from backends.pallas.test_mgpu_module import render
    from backends.pallas.test_training_mgpu_batch_fp8 import JNP, SPECS
    from backends.pallas.test_training_mgpu_fp8 import dequantized_reference

    from gpu.test_training_mgpu_gpu import err, grads_of

    spec = SPECS[name]
    mod = render(spec, Path(tmp_path_factory.mktemp(name)))[0]
    batch, M, N, K = shape
    rng = np.random.default_rng(batch + M + N + K)
    fp8, out_dt = JNP[spec["a"]["dtype"]], JNP[spec["out"]["dtype"]]
    args = [jnp.asarray(rng.standard_normal((batch, M, K)) * 2, fp8), jnp.asarray(rng.standard_normal((batch, N, K)) * 2, fp8),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32),
            jnp.asarray(rng.standard_normal(N), JNP[spec["epilogue"][1]["dtype"]])]
    dout = jnp.asarray(rng.standard_normal((batch, M, N)), out_dt)
    poison(args, dout)
    out, grads = grads_of(getattr(mod, spec["name"]), args, dout)
    x, ref = dequantized_reference(spec, args, dout)
    for what, got, want, dtype in (("out", out, x, out_dt), ("da", grads[0], ref["a"], out_dt),
                                   ("db", grads[1], ref["b"], out_dt), ("dbias", grads[4], ref["bias"], args[4].dtype)):
        assert got.dtype == dtype, (name, what, got.dtype)
        e, scale = err(got, want.numpy())
        assert e <= 2e-2 * scale, f"{name} {what}: error {e:.3g} > 2e-2 x {scale:.3g}"
    assert not jnp.any(grads[2]) and not jnp.any(grads[3])  # the scales: no gradient
