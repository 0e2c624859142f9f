"""Training on the Mosaic GPU target (pallas:gpu_sm90, issue 38) on a Hopper GPU with jax[cuda]: specs rendered here
give, through `jax.grad` under `jax.jit` of the module's JAX entry (its jax.custom_vjp), gradients of A, B and the
bias within bf16 / f16 rounding of float64 autograd of the reference (and no worse than twice the same step's error
in plain jnp at the operands' dtype), in their operands' stored layouts: both save modes, relu, gelu_tanh, silu,
sigmoid and no activation, with and without a bias, both majors of A and B (an mn-major A's dA and a K-major B's dB
come from GEMMs that store the transpose), f16 and bf16, odd shapes (M, N, K off the tiles, M = 1, N and K under one
tile), with the gradients' memory poisoned with NaN first; and a small MLP layer trained 30 SGD steps on the Mosaic
GPU entry following the same steps in plain jnp.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(256, 512, 384), (300, 520, 200), (1, 264, 72), (37, 48, 40), (1000, 1032, 520)]


def rendered_spec(name: str, act: str, bias: bool, save: str, dtype: str = "bf16", a: str = "k", b: str = "k",
                  tile=(128, 256, 64)) -> dict:
    epilogue = ([{"op": "bias", "along": "n", "dtype": dtype}] if bias else []) + ([{"op": "activation", "fn": act}] if act else [])
    return {"name": name, "kind": "gemm", "a": {"dtype": dtype, "major": a}, "b": {"dtype": dtype, "major": b},
            "out": {"dtype": dtype}, "epilogue": epilogue, "training": {"save": save},
            "tile": {"m": tile[0], "n": tile[1], "k": tile[2]}, "schedule": {"persistent": True, "group_m": 8},
            "targets": ["pallas:gpu_sm90"]}


# name: (act, bias, save, dtype, a major, b major): each covered chain in some mode, every major pair, f16 and bf16
CASES = {
    "mg_gelu_tanh_pre": ("gelu_tanh", True, "preact", "bf16", "k", "k"),
    "mg_gelu_tanh_rec": ("gelu_tanh", True, "recompute", "bf16", "k", "k"),
    "mg_relu_pre_mnmn": ("relu", False, "preact", "bf16", "mn", "mn"),
    "mg_silu_rec_mnk": ("silu", True, "recompute", "bf16", "mn", "k"),
    "mg_sigmoid_pre_f16_kmn": ("sigmoid", True, "preact", "f16", "k", "mn"),
    "mg_plain_kmn": ("", False, "preact", "bf16", "k", "mn"),
    "mg_bias_rec_f16_mnmn": ("", True, "recompute", "f16", "mn", "mn"),
}
_MODULES: dict[str, object] = {}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        from backends.pallas.test_mgpu_module import render

        act, bias, save, dtype, a, b = CASES[name]
        spec = rendered_spec(name, act, bias, save, dtype, a, b)
        _MODULES[name] = (render(spec, Path(tmp_path_factory.mktemp(name)))[0], spec)
    return _MODULES[name]


def inputs(spec: dict, shape, seed: int = 0):
    import jax.numpy as jnp

    M, N, K = shape
    rng = np.random.default_rng(seed)
    dt = jnp.bfloat16 if spec["a"]["dtype"] == "bf16" else jnp.float16
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) / np.sqrt(K)
    b = rng.standard_normal((N, K) if spec["b"]["major"] == "k" else (K, N))
    args = [jnp.asarray(a, dt), jnp.asarray(b, dt)]
    if spec["epilogue"] and spec["epilogue"][0]["op"] == "bias":
        args.append(jnp.asarray(rng.standard_normal(N), dt))
    return args, jnp.asarray(rng.standard_normal((M, N)), dt)


def reference(spec: dict, args, grad):
    """The float64 reference's output and gradients (torch autograd in float64), in the stored layouts."""
    import torch

    from specgen.kinds.gemm.testing.reference import REFERENCES

    leaves = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_() for x in args]
    a = leaves[0] if spec["a"]["major"] == "k" else leaves[0].t()
    b = leaves[1].t() if spec["b"]["major"] == "k" else leaves[1]
    rest = {"bias": leaves[2]} if len(leaves) > 2 else {}
    epilogue = [{**op, "name": "bias"} if op["op"] == "bias" else op for op in spec["epilogue"]]
    out = REFERENCES["gemm"](epilogue, a, b, rest)
    out.backward(torch.from_numpy(np.asarray(grad, np.float64)))
    return out.detach().numpy(), [x.grad.numpy() for x in leaves]


def plain_jnp(spec: dict):
    """The same layer in plain jnp at the operands' dtype (f32 accumulation), for jax's own autodiff."""
    import jax
    import jax.numpy as jnp

    acts = {"": lambda v: v, "relu": jax.nn.relu, "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True),
            "silu": jax.nn.silu, "sigmoid": jax.nn.sigmoid}
    act = next((op["fn"] for op in spec["epilogue"] if op["op"] == "activation"), "")

    def fn(a, b, *bias):
        x = a if spec["a"]["major"] == "k" else a.T
        w = b.T if spec["b"]["major"] == "k" else b
        pre = jnp.matmul(x, w, preferred_element_type=jnp.float32)
        if bias:
            pre = pre + bias[0].astype(jnp.float32)
        return acts[act](pre.astype(a.dtype).astype(jnp.float32)).astype(a.dtype)

    return fn


def grads_of(fn, args, grad):
    """The entry's output and jax.grad of <out, grad> in every argument, under one jax.jit."""
    import jax
    import jax.numpy as jnp

    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    return jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*args)


def poison(args, spec, shape) -> None:
    """NaN-filled blocks of each gradient's size allocated and freed first: XLA's allocator hands them to the
    backward's outputs, so a tile a kernel forgot stays NaN."""
    import jax.numpy as jnp

    M, N, K = shape
    blocks = [jnp.full(x.shape, jnp.nan, x.dtype) for x in args] + [jnp.full((M, N), jnp.nan, args[0].dtype)]
    for blk in blocks:
        blk.block_until_ready()
    for blk in blocks:
        blk.delete()


def err(got, want) -> tuple[float, float]:
    g = np.asarray(got, np.float64)
    assert g.shape == want.shape, (g.shape, want.shape)
    assert np.isfinite(g).all(), "a NaN or inf in the result (an unwritten tile, or a poisoned read)"
    return float(np.abs(g - want).max()) if want.size else 0.0, max(float(np.abs(want).max()) if want.size else 0.0, 1.0)


# every shape on the two GELU-tanh kernels (one per save mode), the odd one and the small one on the other cases
PARAMS = [(name, shape) for name in CASES
          for shape in (SHAPES if name.startswith("mg_gelu_tanh") else [SHAPES[1], SHAPES[3]])]


@pytest.mark.parametrize(("name", "shape"), PARAMS, ids=[f"{n}-{m}x{nn}x{k}" for n, (m, nn, k) in PARAMS])
def test_gradients_against_float64(name: str, shape, tmp_path_factory) -> None:
    mod, spec = module(name, tmp_path_factory)
    args, grad = inputs(spec, shape)
    poison(args, spec, shape)
    out, grads = grads_of(getattr(mod, name), args, grad)
    want_out, want = reference(spec, args, grad)
    ref_out, ref_grads = grads_of(plain_jnp(spec), args, grad)
    compare(f"{name} {shape}", (out, grads), (want_out, want), (ref_out, ref_grads), args,
            2e-2 if spec["a"]["dtype"] == "bf16" else 4e-3)


def compare(label: str, ours, want, jnp_side, args, rel: float) -> None:
    """out and each gradient (da, db, dbias) within `rel` of float64's scale or twice plain jnp's error; the gradients
    in their arguments' shapes and dtypes (tests/gpu/test_training_mgpu_gated_gpu.py compares with it too)."""
    (out, grads), (want_out, want), (ref_out, ref_grads) = ours, want, jnp_side
    for what, got, w, mine in [("out", out, want_out, ref_out), *zip(("da", "db", "dbias"), grads, want, ref_grads, strict=False)]:
        e, scale = err(got, w)
        e_jnp, _ = err(mine, w)
        assert e <= max(rel * scale, 2 * e_jnp), f"{label} {what}: error {e:.3g} (plain jnp's {e_jnp:.3g}, scale {scale:.3g})"
    for g, x in zip(grads, args, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype


def test_the_forward_saves_pre_and_every_role_ran(tmp_path_factory) -> None:
    """The preact module's forward rule runs forward_pre (out equals the primal's) and saves pre; the recompute
    module's backward runs the recompute GEMM: each role's kernel is in the jitted program."""
    import jax
    import jax.numpy as jnp

    for name, roles in (("mg_gelu_tanh_pre", ("forward_pre", "dgrad", "wgrad")), ("mg_gelu_tanh_rec", ("recompute", "dgrad", "wgrad"))):
        mod, spec = module(name, tmp_path_factory)
        args, grad = inputs(spec, (256, 512, 384))
        fn = getattr(mod, name)
        out, _ = jax.vjp(fn, *args)
        assert np.array_equal(np.asarray(out, np.float32), np.asarray(fn(*args), np.float32))
        loss = lambda *ys, fn=fn: jnp.sum(fn(*ys).astype(jnp.float32))  # noqa: E731
        text = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).as_text()
        for role in roles:
            assert f"{name}_{role}" in text, role


def test_an_mlp_layer_trains_as_plain_jnp_does(tmp_path_factory) -> None:
    """A small MLP (x -> gelu_tanh(x W1^T + b1) on the Mosaic GPU entry -> W2, squared error against a fixed random
    target) trained 30 steps of plain SGD on f32 master weights cast to bf16 each step (no optax), beside the same
    step with the first layer in plain jnp: the two losses agree within bf16's noise at every step and both fall."""
    import jax
    import jax.numpy as jnp

    mod, spec = module("mg_gelu_tanh_pre", tmp_path_factory)
    layer = mod.mg_gelu_tanh_pre
    ref_layer = plain_jnp(spec)
    B, D, H = 384, 256, 512
    rng = np.random.default_rng(1)
    params = {"w1": jnp.asarray(rng.standard_normal((H, D)) / np.sqrt(D), jnp.float32),
              "b1": jnp.zeros((H,), jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((D, H)) / np.sqrt(H), jnp.float32)}
    x = jnp.asarray(rng.standard_normal((B, D)), jnp.bfloat16)
    target = jnp.asarray(rng.standard_normal((B, D)), jnp.float32)

    def make_step(first):
        def loss(p):
            h = first(x, p["w1"].astype(jnp.bfloat16), p["b1"].astype(jnp.bfloat16))
            y = jnp.matmul(h, p["w2"].astype(jnp.bfloat16).T, preferred_element_type=jnp.float32)
            return jnp.mean((y - target) ** 2)

        @jax.jit
        def step(p):
            value, g = jax.value_and_grad(loss)(p)
            return jax.tree.map(lambda w, d: w - 2.0 * d, p, g), value

        return step

    ours, theirs = make_step(layer), make_step(ref_layer)
    p_ours = p_theirs = params
    losses = []
    for _ in range(30):
        p_ours, l_ours = ours(p_ours)
        p_theirs, l_theirs = theirs(p_theirs)
        losses.append((float(l_ours), float(l_theirs)))
    gaps = [abs(a - b) / b for a, b in losses]
    assert max(gaps) < 0.01, losses
    assert losses[-1][0] < 0.7 * losses[0][0] and losses[-1][1] < 0.7 * losses[0][1], losses


# The torch entry (session 34, specgen/runtime/jax_torch.py): CUDA tensors that require grad take the torch op whose
# backward runs jax.vjp of the JAX entry; (name, shape) with a K-major weight held (N, K) and an mn-major A, M = 0.
TORCH_PARAMS = [("mg_gelu_tanh_pre", (300, 520, 200)), ("mg_silu_rec_mnk", (37, 48, 40)), ("mg_gelu_tanh_pre", (0, 48, 40))]


@pytest.mark.parametrize(("name", "shape"), TORCH_PARAMS, ids=[f"{n}-{m}x{nn}x{k}" for n, (m, nn, k) in TORCH_PARAMS])
def test_torch_entry_gradients_against_float64(name: str, shape, tmp_path_factory) -> None:
    """<name>_torch on CUDA tensors (leaves in the stored layouts, passed as the logical views): out and the gradients
    of A, B and the bias within the JAX entry's bound of float64 autograd (test_gradients_against_float64's), each in its
    leaf's shape, dtype and strides; the gradients' memory comes from JAX (nothing to poison on the torch side)."""
    import jax
    import jax.numpy as jnp
    import torch

    mod, spec = module(name, tmp_path_factory)
    args, grad = inputs(spec, shape)
    leaves = [torch.from_dlpack(jax.device_put(x, jax.devices("gpu")[0])).clone().requires_grad_() for x in args]
    a = leaves[0] if spec["a"]["major"] == "k" else leaves[0].t()
    b = leaves[1].t() if spec["b"]["major"] == "k" else leaves[1]
    out = getattr(mod, f"{name}_torch")(a, b, *leaves[2:])
    assert out.is_cuda and out.grad_fn is not None
    out.backward(torch.from_dlpack(jax.device_put(grad, jax.devices("gpu")[0])).clone())
    want_out, want = reference(spec, args, grad)
    ref_out, ref_grads = grads_of(plain_jnp(spec), args, grad)
    grads = [x.grad for x in leaves]
    for g, x in zip(grads, leaves, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype and (g.stride() == x.stride() or not x.numel())
    as_jnp = lambda t, like: jnp.asarray(t.detach().float().cpu().numpy(), like.dtype)  # noqa: E731 (exact: bf16 / f16 in f32)
    compare(f"torch {name} {shape}", (as_jnp(out, args[0]), [as_jnp(g, x) for g, x in zip(grads, args, strict=True)]),
            (want_out, want), (ref_out, ref_grads), args, 2e-2 if spec["a"]["dtype"] == "bf16" else 4e-3)


def test_torch_entry_compiled_step_has_no_graph_break(tmp_path_factory) -> None:
    """torch.compile(fullgraph=True, aot_eager) of a step over the torch entry on CUDA: no graph break, gradients equal
    eager's (the same kernels: the op and its backward op)."""
    import torch
    from torch._dynamo.utils import counters

    mod, spec = module("mg_gelu_tanh_pre", tmp_path_factory)
    fn = mod.mg_gelu_tanh_pre_torch
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(300, 200, generator=g, device="cuda").bfloat16(), torch.randn(520, 200, generator=g, device="cuda").bfloat16() / 15,
          torch.randn(520, generator=g, device="cuda").bfloat16()]

    def step(a, w, bias):
        return fn(a, w.t(), bias).float().square().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = [x.clone().requires_grad_() for x in xs]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = [x.clone().requires_grad_() for x in xs]
    step(*eager).backward()
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got.grad, want.grad)  # (bf16's default tolerance)
