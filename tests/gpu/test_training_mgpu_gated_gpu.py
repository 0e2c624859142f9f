"""A gated epilogue's backward on the Mosaic GPU target (pallas:gpu_sm90, issue 38) on a Hopper GPU with jax[cuda]:
specs rendered here (SwiGLU and GeGLU-tanh; halves and interleaved B; with and without the bias after the gate; both
save modes; both majors of A and B where the gated forward takes them) give, through `jax.grad` under `jax.jit` of the
module's JAX entry (its jax.custom_vjp), the output and the gradients of A, B (its 2N gate and up columns in its
stored layout) and the bias within bf16 rounding of float64 torch autograd of the reference (or twice the same
layer's error in plain jnp at bf16), at odd shapes (M, N, K off the tiles, M = 1, N and K under one tile), the
gradients' memory NaN-poisoned first; each role's kernel in the jitted program. CPU side (plans, lowering, the
custom_vjp's glue): tests/backends/pallas/test_training_mgpu_gated.py.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(256, 384, 320), (300, 200, 136), (1, 136, 72), (37, 48, 40), (1000, 520, 264)]

# name: (fn, layout, save, a major, b major, bias): both layouts in both save modes, A and B in either major where
# the gated forward reads them (PAL012: an interleaved B is K-major)
CASES = {
    "mgg_silu_pre": ("silu", "halves", "preact", "k", "k", True),
    "mgg_silu_rec": ("silu", "halves", "recompute", "k", "k", True),
    "mgg_gelu_pre_il": ("gelu_tanh", "interleaved", "preact", "k", "k", True),
    "mgg_gelu_rec_il_mn": ("gelu_tanh", "interleaved", "recompute", "mn", "k", False),
    "mgg_silu_pre_bmn": ("silu", "halves", "preact", "mn", "mn", False),
    "mgg_gelu_rec_bmn": ("gelu_tanh", "halves", "recompute", "k", "mn", True),
}
_MODULES: dict[str, object] = {}


def rendered_spec(name: str) -> dict:
    fn, layout, save, a, b, bias = CASES[name]
    epilogue = [{"op": "gated", "fn": fn, "layout": layout}] + ([{"op": "bias", "along": "n", "dtype": "bf16"}] if bias else [])
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b},
            "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save},
            "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
            "targets": ["pallas:gpu_sm90"]}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        from backends.pallas.test_mgpu_module import render

        spec = rendered_spec(name)
        _MODULES[name] = (render(spec, Path(tmp_path_factory.mktemp(name)))[0], spec)
    return _MODULES[name]


def inputs(spec: dict, shape, seed: int = 0):
    """A, B (2N gate and up columns), the bias where the spec has one, and dOut; bf16, in the stored layouts."""
    import jax.numpy as jnp

    M, N, K = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) / np.sqrt(max(K, 1))
    b = rng.standard_normal((2 * N, K) if spec["b"]["major"] == "k" else (K, 2 * N))
    args = [jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)]
    if len(spec["epilogue"]) > 1:
        args.append(jnp.asarray(rng.standard_normal(N), jnp.bfloat16))
    return args, jnp.asarray(rng.standard_normal((M, N)), jnp.bfloat16)


def reference(spec: dict, args, grad):
    """The float64 reference's output and gradients (torch autograd of the gated reference), in the stored layouts."""
    from gpu.test_training_mgpu_gpu import reference as plain_reference

    return plain_reference(spec, args, grad)


def plain_jnp(spec: dict):
    """The same gated layer in plain jnp at bf16 (f32 accumulation, pre rounded to bf16 as eager keeps it)."""
    import jax
    import jax.numpy as jnp

    op = spec["epilogue"][0]
    act = jax.nn.silu if op["fn"] == "silu" else (lambda v: jax.nn.gelu(v, approximate=True))

    def fn(a, b, *bias):
        x = a if spec["a"]["major"] == "k" else a.T
        w = b.T if spec["b"]["major"] == "k" else b
        pre = jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(a.dtype).astype(jnp.float32)
        n = pre.shape[1] // 2
        gate, up = (pre[:, :n], pre[:, n:]) if op["layout"] == "halves" else (pre[:, 0::2], pre[:, 1::2])
        out = act(gate) * up
        if bias:
            out = out + bias[0].astype(jnp.float32)
        return out.astype(a.dtype)

    return fn


PARAMS = [(name, shape) for name in CASES
          for shape in (SHAPES if name in ("mgg_silu_pre", "mgg_gelu_rec_il_mn") else [SHAPES[1], SHAPES[3]])]


@pytest.mark.parametrize(("name", "shape"), PARAMS, ids=[f"{n}-{m}x{nn}x{k}" for n, (m, nn, k) in PARAMS])
def test_gated_gradients_against_float64(name: str, shape, tmp_path_factory) -> None:
    from gpu.test_training_mgpu_gpu import compare, grads_of, poison

    mod, spec = module(name, tmp_path_factory)
    args, grad = inputs(spec, shape)
    poison(args, spec, shape)
    out, grads = grads_of(getattr(mod, name), args, grad)
    want_out, want = reference(spec, args, grad)
    ref_out, ref_grads = grads_of(plain_jnp(spec), args, grad)
    compare(f"{name} {shape}", (out, grads), (want_out, want), (ref_out, ref_grads), args, 2e-2)


def test_every_role_runs_and_the_forward_rule_matches_the_primal(tmp_path_factory) -> None:
    """The preact module's forward rule (forward_pre: pre's gate and up, then out) gives the primal's out; each role's
    kernel (forward_pre or recompute, dgrad, wgrad) is in the jitted gradient program."""
    import jax
    import jax.numpy as jnp

    for name in ("mgg_silu_pre", "mgg_gelu_rec_il_mn"):
        mod, spec = module(name, tmp_path_factory)
        args, _ = inputs(spec, (256, 384, 320))
        fn = getattr(mod, name)
        out, _ = jax.vjp(fn, *args)
        assert np.array_equal(np.asarray(out, np.float32), np.asarray(fn(*args), np.float32))
        loss = lambda *ys, fn=fn: jnp.sum(fn(*ys).astype(jnp.float32))  # noqa: E731
        text = jax.jit(jax.grad(loss, argnums=tuple(range(len(args))))).lower(*args).as_text()
        for role in mod.TRAIN_GEMMS:
            assert f"{name}_{role}" in text, role
