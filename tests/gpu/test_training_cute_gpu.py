"""Training on the CuTe sm90 design (issue 38) on a Hopper GPU: the shipped linear_gelu_train_cute_bf16 (preact) and
specs rendered here (recompute; relu, gelu, silu, sigmoid; no activation; f16; mn-major A and B, whose gradients
come back from the transposed GEMMs) give gradients within bf16 / f16 rounding of float64 autograd of the reference
and no worse than twice eager's error, in their operands' layouts; odd shapes (M, N, K off the tiles, M = 1, a K
whose row pitch TMA cannot read in place; the recompute's dOut ring over several tiles a CTA and an odd N),
NaN-poisoned gradient buffers written everywhere, and a CUDA graph over forward and backward replaying to the
gradients of fresh inputs; jax.grad under jax.jit of the JAX entry.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

CATALOGUE = "linear_gelu_train_cute_bf16"
SHAPES = [(256, 512, 384), (200, 136, 96), (1, 264, 72), (1000, 1032, 520), (37, 104, 75)]
ACTS = {"": lambda v: v, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
        "silu": F.silu, "sigmoid": torch.sigmoid}


def rendered_spec(name: str, act: str, bias: bool, save: str, dtype: str = "bf16", a: str = "k", b: str = "k") -> dict:
    epilogue = ([{"op": "bias", "dtype": dtype}] if bias else []) + ([{"op": "activation", "fn": act}] if act else [])
    return {"name": name, "kind": "gemm", "a": {"dtype": dtype, "major": a}, "b": {"dtype": dtype, "major": b},
            "out": {"dtype": dtype}, "epilogue": epilogue, "training": {"save": save},
            "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True, "group_m": 8}, "targets": ["cute:sm90"]}


# (spec, act, bias): each covered chain in some mode, both majors of A and B, f16 and bf16
RENDERED = {
    "cute_train_recompute_gelu_tanh": (rendered_spec("cute_train_recompute_gelu_tanh", "gelu_tanh", True, "recompute"),
                                       "gelu_tanh", True),
    "cute_train_silu_f16_mn": (rendered_spec("cute_train_silu_f16_mn", "silu", True, "preact", "f16", "mn", "mn"), "silu", True),
    "cute_train_recompute_relu_f16": (rendered_spec("cute_train_recompute_relu_f16", "relu", False, "recompute", "f16", "k", "mn"),
                                      "relu", False),
    "cute_train_gelu_a_mn": (rendered_spec("cute_train_gelu_a_mn", "gelu", False, "preact", "bf16", "mn", "k"), "gelu", False),
    "cute_train_recompute_sigmoid": (rendered_spec("cute_train_recompute_sigmoid", "sigmoid", True, "recompute"), "sigmoid", True),
    "cute_train_bias_only": (rendered_spec("cute_train_bias_only", "", True, "preact"), "", True),
    # the recompute GEMM alone on the ping-pong schedule (training.pre.schedule), its epilogue under the other
    # warpgroup's mainloop
    "cute_train_recompute_pingpong": ({**rendered_spec("cute_train_recompute_pingpong", "gelu_tanh", True, "recompute"),
                                       "training": {"save": "recompute", "pre": {"schedule": "pingpong"}}}, "gelu_tanh", True),
    # the recompute GEMM on two cooperative warpgroups a 128x256 tile (128x32 subtiles, a ring of 2)
    "cute_train_recompute_coop256": ({**rendered_spec("cute_train_recompute_coop256", "gelu_tanh", True, "recompute"),
                                      "tile": {"m": 128, "n": 256, "k": 64}}, "gelu_tanh", True),
}
_MODULES: dict[str, object] = {}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        if name == CATALOGUE:
            _MODULES[name] = importlib.import_module(f"generated.cute.{name}")
        else:
            from kernels import load_target_module

            _MODULES[name] = load_target_module(RENDERED[name][0], "cute:sm90", Path(tmp_path_factory.mktemp(name)))[0]
    return _MODULES[name]


def layout(name: str) -> tuple[str, bool, str, str, torch.dtype]:
    """(activation, bias, A's major, B's major, dtype) of a kernel."""
    if name == CATALOGUE:
        return "gelu_tanh", True, "k", "k", torch.bfloat16
    spec, act, bias = RENDERED[name]
    return act, bias, spec["a"]["major"], spec["b"]["major"], torch.float16 if spec["a"]["dtype"] == "f16" else torch.bfloat16


def data(name: str, shape: tuple[int, int, int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """x (M, K), w (N, K) (nn.Linear's), bias, dOut; and a, b as the kernel takes them (its majors)."""
    _, _, am, bm, dtype = layout(name)
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda").to(dtype)
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).to(dtype)
    bias = torch.randn(N, generator=gen, device="cuda").to(dtype)
    grad = torch.randn(M, N, generator=gen, device="cuda").to(dtype)
    a = x if am == "k" else x.t().contiguous().t()  # mn-major: M contiguous
    b = w.t() if bm == "k" else w.t().contiguous()  # k-major: the weight's (N, K) storage; mn: (K, N) row-major
    return a, b, bias, grad


def reference(name: str, a, b, bias, grad) -> dict[str, torch.Tensor]:
    act, has_bias, *_ = layout(name)
    leaves = {n: t.detach().double().requires_grad_() for n, t in (("a", a), ("b", b), ("bias", bias))}
    pre = leaves["a"] @ leaves["b"] + (leaves["bias"] if has_bias else 0)
    ACTS[act](pre).backward(grad.double())
    return {n: t.grad for n, t in leaves.items() if n != "bias" or has_bias}


def eager_grads(name: str, a, b, bias, grad) -> dict[str, torch.Tensor]:
    act, has_bias, *_ = layout(name)
    leaves = {n: t.detach().clone().requires_grad_() for n, t in (("a", a), ("b", b), ("bias", bias))}
    pre = leaves["a"] @ leaves["b"] + (leaves["bias"] if has_bias else 0)
    ACTS[act](pre).backward(grad)
    return {n: t.grad for n, t in leaves.items() if n != "bias" or has_bias}


def call(name: str, mod, a, b, bias):
    fn = getattr(mod, name)
    return fn(a, b, bias) if layout(name)[1] else fn(a, b)


def check(name: str, got: dict, want: dict, eager: dict | None, what: str) -> None:
    check_grads(got, want, eager, what, layout(name)[4])


def check_grads(got: dict, want: dict, eager: dict | None, what: str, dtype: torch.dtype) -> None:
    """Each gradient in `dtype`, written everywhere, within 2e-2 of float64's scale and (given eager's) no worse than
    twice eager autograd's error (tests/gpu/test_training_cute_gated_gpu.py checks its gradients with it too)."""
    for n, w in want.items():
        g = got[n]
        assert g.shape == w.shape and g.dtype is dtype, f"{what} d{n}"
        assert not g.isnan().any(), f"{what} d{n}: NaN (an element not written?)"
        err, scale = (g.double() - w).abs().max().item(), w.abs().max().item()
        assert err <= 2e-2 * scale, f"{what} d{n}: {err:.4g} > 2e-2 x {scale:.4g}"
        if eager is not None:  # eager autograd's own distance from float64, for scale
            e_eager = (eager[n].double() - w).abs().max().item()
            assert err <= 2 * e_eager + 1e-3 * scale, f"{what} d{n}: {err:.4g} vs eager {e_eager:.4g}"


# the recompute GEMM's dOut ring (TMA loads into SMEM ahead of the epilogue, session 34): several tiles a CTA (the
# ring wrapping, the ping-pong warpgroups taking turns at it), edge tiles TMA zero-fills, an N whose rows TMA cannot
# read in place (dOut copied to 16-byte rows), M = 1
RING_SHAPES = [(4100, 2100, 136), (300, 1001, 64), (1, 1001, 40)]
RING = ("cute_train_recompute_pingpong", "cute_train_recompute_coop256", "cute_train_recompute_relu_f16")
CASES = [(CATALOGUE, s) for s in SHAPES] + [(n, s) for n in RENDERED for s in (SHAPES[1], SHAPES[4])] + [
    (n, s) for n in RING for s in RING_SHAPES]


@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES])
def test_gradients_against_float64(name: str, shape: tuple[int, int, int], tmp_path_factory) -> None:
    mod = module(name, tmp_path_factory)
    a, b, bias, grad = data(name, shape)
    leaves = {n: t.detach().clone().requires_grad_() for n, t in (("a", a), ("b", b), ("bias", bias))}
    out = call(name, mod, leaves["a"], leaves["b"], leaves["bias"])
    out.backward(grad)
    has_bias = layout(name)[1]
    got = {n: t.grad for n, t in leaves.items() if n != "bias" or has_bias}
    check(name, got, reference(name, a, b, bias, grad), eager_grads(name, a, b, bias, grad), f"{name} {shape}")


@pytest.mark.parametrize("name", [CATALOGUE, "cute_train_silu_f16_mn", "cute_train_gelu_a_mn", "cute_train_recompute_relu_f16"])
def test_poisoned_buffers_and_the_operands_layouts(name: str, tmp_path_factory) -> None:
    """_backward writes NaN-filled dA / dB / dbias everywhere, and new gradients come back in A's and B's layouts."""
    mod = module(name, tmp_path_factory)
    act, has_bias, *_ = layout(name)
    a, b, bias, grad = data(name, SHAPES[1], seed=1)
    args = (a, b, bias) if has_bias else (a, b)
    pre = mod._forward_pre(*args)[1] if act and "recompute" not in name else None
    bufs = {"da": torch.full_like(a, float("nan")), "db": torch.full_like(b, float("nan"))}
    if has_bias:
        bufs["dbias"] = torch.full_like(bias, float("nan"))
    grads = mod._backward(grad, *args, pre, **bufs)
    got = dict(zip(("a", "b", "bias"), grads, strict=False))
    check(name, got, reference(name, a, b, bias, grad), None, f"{name} poisoned")
    fresh = mod._backward(grad, *args, pre)
    assert fresh[0].stride() == a.stride() and fresh[1].stride() == b.stride(), name
    check(name, dict(zip(("a", "b", "bias"), fresh, strict=False)), reference(name, a, b, bias, grad), None, f"{name} fresh")
    if has_bias:  # only what autograd asks for: dbias alone
        _, _, dbias = mod._backward(grad, *args, pre, False, False, True)
        check(name, {"bias": dbias}, {"bias": reference(name, a, b, bias, grad)["bias"]}, None, f"{name} dbias alone")


def test_cuda_graph_over_forward_and_backward(tmp_path_factory) -> None:
    """One training step captured whole replays to the gradients of new inputs copied into the captured ones."""
    mod = module(CATALOGUE, tmp_path_factory)
    fn = getattr(mod, CATALOGUE)
    a, b, bias, grad = data(CATALOGUE, SHAPES[0], seed=2)
    sx, sw, sb = (t.detach().clone().requires_grad_() for t in (a, b.t(), bias))
    sgrad = grad.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: every kernel loaded outside the capture
        for _ in range(2):
            for t in (sx, sw, sb):
                t.grad = None
            fn(sx, sw.t(), sb).backward(sgrad)
    torch.cuda.current_stream().wait_stream(side)
    for t in (sx, sw, sb):
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(sx, sw.t(), sb).backward(sgrad)
    a2, b2, bias2, grad2 = data(CATALOGUE, SHAPES[0], seed=3)
    with torch.no_grad():
        for dst, src in ((sx, a2), (sw, b2.t()), (sb, bias2), (sgrad, grad2)):
            dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    want = reference(CATALOGUE, a2, b2, bias2, grad2)
    check(CATALOGUE, {"a": sx.grad, "b": sw.grad.t(), "bias": sb.grad}, want, None, "replayed")



JAX_CASES = [(CATALOGUE, s) for s in (SHAPES[1], SHAPES[2], SHAPES[4], SHAPES[3])] + [
    (n, s) for n in ("cute_train_silu_f16_mn", "cute_train_recompute_relu_f16") for s in (SHAPES[1], SHAPES[4])]


@pytest.mark.parametrize(("name", "shape"), JAX_CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in JAX_CASES])
def test_jax_grad_under_jit_runs_the_modules_backward(name: str, shape: tuple[int, int, int], tmp_path_factory) -> None:
    """The JAX entry is a jax.custom_vjp (specgen/runtime/cute_jax_train.py): jax.grad under jax.jit runs the module's
    forward_pre (or forward), columns kernel (or recompute GEMM), dgrad and wgrad through XLA custom calls and gives
    gradients within rounding of float64 autograd and no worse than twice torch eager's error, each in its operand's
    stored layout; shapes off the tiles, M = 1, a K whose rows are padded; mn-major A and B (the transposed GEMMs)."""
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp
    import numpy as np

    mod = module(name, tmp_path_factory)
    fn = getattr(mod, f"{name}_jax")
    act, has_bias, am, bm, dtype = layout(name)
    jdtype = jnp.bfloat16 if dtype is torch.bfloat16 else jnp.float16

    def to_jax(t: torch.Tensor):
        return jnp.asarray(t.float().cpu().numpy()).astype(jdtype)

    def back(x) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x.astype(jnp.float32))).cuda().to(dtype)

    def loss(*xs):
        return (fn(*xs[:-1]).astype(jnp.float32) * xs[-1].astype(jnp.float32)).sum()

    a, b, bias, grad = data(name, shape)
    stored = [to_jax(a if am == "k" else a.t()), to_jax(b.t() if bm == "k" else b)]  # the JAX entry's layouts
    args = (*stored, *([to_jax(bias)] if has_bias else []), to_jax(grad))
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args) - 1))))(*args)
    for g, x in zip(grads, args, strict=False):
        assert g.shape == x.shape and g.dtype == x.dtype, (name, shape)
    got = {"a": back(grads[0]) if am == "k" else back(grads[0]).t(), "b": back(grads[1]).t() if bm == "k" else back(grads[1])}
    if has_bias:
        got["bias"] = back(grads[2])
    check(name, got, reference(name, a, b, bias, grad), eager_grads(name, a, b, bias, grad), f"jax {name} {shape}")
