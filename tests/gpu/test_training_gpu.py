"""Training on a Hopper GPU (issue 38): the shipped Linear + bias + GELU-tanh bf16 kernels with a backward
(specs/training.toml, save = "preact" and "recompute") give bf16 gradients within bf16 rounding of float64
autograd of the reference (aligned and odd shapes, M = 1), NaN-poisoned gradient buffers written everywhere,
and a CUDA graph over forward and backward replays to the gradients of fresh inputs.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

NAMES = ["linear_gelu_train_bf16", "linear_gelu_train_recompute_bf16"]
SHAPES = [(256, 512, 384), (200, 136, 96), (1, 264, 72), (1000, 1032, 520)]


def entry(name: str):
    mod = importlib.import_module(f"generated.triton.{name}")
    return mod, getattr(mod, name)


def data(shape: tuple[int, int, int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16()  # nn.Linear's (N, K) weight
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    return x, w, bias, grad


def reference(x, w, bias, grad) -> dict[str, torch.Tensor]:
    leaves = {n: t.detach().double().requires_grad_() for n, t in (("x", x), ("w", w), ("bias", bias))}
    F.gelu(leaves["x"] @ leaves["w"].t() + leaves["bias"], approximate="tanh").backward(grad.double())
    return {n: t.grad for n, t in leaves.items()}


def within(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 2e-2) -> None:
    """bf16 gradients (G rounded to bf16 before each dot, sums in f32) within `rel` of want's largest magnitude."""
    assert got.dtype is torch.bfloat16 and got.shape == want.shape, what
    err = (got.double() - want).abs().max().item()
    assert err <= rel * want.abs().max().item(), f"{what}: {err:.4g} > {rel} x {want.abs().max().item():.4g}"


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("name", NAMES)
def test_bf16_gradients_against_float64(name: str, shape: tuple[int, int, int]) -> None:
    _, fn = entry(name)
    x, w, bias, grad = data(shape)
    leaves = [t.clone().requires_grad_() for t in (x, w, bias)]
    out = fn(leaves[0], leaves[1].t(), leaves[2])
    out.backward(grad)
    want = reference(x, w, bias, grad)
    for t, n in zip(leaves, ("x", "w", "bias"), strict=True):
        within(t.grad, want[n], f"{name} d{n}")
    # eager bf16 autograd's own distance from float64, for scale: ours is no worse than twice it
    eager = [t.clone().requires_grad_() for t in (x, w, bias)]
    F.gelu(F.linear(*eager), approximate="tanh").backward(grad)
    for ours, theirs, n in zip(leaves, eager, ("x", "w", "bias"), strict=True):
        e_ours = (ours.grad.double() - want[n]).abs().max().item()
        e_eager = (theirs.grad.double() - want[n]).abs().max().item()
        assert e_ours <= 2 * e_eager + 1e-3 * want[n].abs().max().item(), f"{name} d{n}: {e_ours:.4g} vs eager {e_eager:.4g}"


@pytest.mark.parametrize("name", NAMES)
def test_poisoned_gradient_buffers_are_written(name: str) -> None:
    mod, _ = entry(name)
    x, w, bias, grad = data(SHAPES[1], seed=1)
    pre = mod._forward_pre(x, w.t(), bias)[1] if "recompute" not in name else None
    bufs = {"da": torch.full_like(x, float("nan")), "db": torch.full_like(w.t(), float("nan")),
            "dbias": torch.full_like(bias, float("nan"))}
    da, db, dbias = mod._backward(grad, x, w.t(), bias, pre, **bufs)
    want = reference(x, w, bias, grad)
    for got, n in ((da, "x"), (db.t(), "w"), (dbias, "bias")):
        assert not got.isnan().any(), f"{name} d{n}: an element was not written"
        within(got, want[n], f"{name} d{n}")


@pytest.mark.parametrize("name", NAMES)
def test_cuda_graph_over_forward_and_backward(name: str) -> None:
    """One training step captured whole (forward, the backward's kernels, the gradients' allocation) replays
    to the gradients of new inputs copied into the captured ones."""
    _, fn = entry(name)
    x, w, bias, grad = data(SHAPES[0], seed=2)
    sx, sw, sb = (t.clone().requires_grad_() for t in (x, w, bias))
    sgrad = grad.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile every kernel outside the capture
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
    x2, w2, b2, g2 = data(SHAPES[0], seed=3)
    with torch.no_grad():
        for dst, src in ((sx, x2), (sw, w2), (sb, b2), (sgrad, g2)):
            dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    want = reference(x2, w2, b2, g2)
    for t, n in zip((sx, sw, sb), ("x", "w", "bias"), strict=True):
        within(t.grad, want[n], f"{name} replayed d{n}")


# --- the gated up-projection (SwiGLU, halves; specs/training.toml): pre of 2N columns, G = [dgate, dup] ---------------
GATED_NAMES = ["mlp_up_swiglu_train_bf16", "mlp_up_swiglu_train_recompute_bf16"]
GATED_SHAPES = [(256, 512, 384), (200, 136, 96), (1, 264, 72), (1000, 1032, 520)]  # M x N (outputs) x K


def gated_data(shape: tuple[int, int, int], seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda").to(dtype)
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).to(dtype)  # gate_up_proj's (2N, K) weight
    grad = torch.randn(M, N, generator=gen, device="cuda").to(dtype)
    return x, w, grad


def swiglu(x: torch.Tensor, w: torch.Tensor, layout: str = "halves", act=F.silu) -> torch.Tensor:
    h = x @ w.t()
    gate, up = h.chunk(2, dim=-1) if layout == "halves" else (h[:, 0::2], h[:, 1::2])
    return act(gate) * up


def gated_reference(x, w, grad, layout: str = "halves", act=F.silu) -> dict[str, torch.Tensor]:
    leaves = {n: t.detach().double().requires_grad_() for n, t in (("x", x), ("w", w))}
    swiglu(leaves["x"], leaves["w"], layout, act).backward(grad.double())
    return {n: t.grad for n, t in leaves.items()}


@pytest.mark.parametrize("shape", GATED_SHAPES, ids=["x".join(map(str, s)) for s in GATED_SHAPES])
@pytest.mark.parametrize("name", GATED_NAMES)
def test_gated_bf16_gradients_against_float64(name: str, shape: tuple[int, int, int]) -> None:
    _, fn = entry(name)
    x, w, grad = gated_data(shape)
    leaves = [t.clone().requires_grad_() for t in (x, w)]
    out = fn(leaves[0], leaves[1].t())
    out.backward(grad)
    want = gated_reference(x, w, grad)
    eager = [t.clone().requires_grad_() for t in (x, w)]
    swiglu(*eager).backward(grad)
    for ours, theirs, n in zip(leaves, eager, ("x", "w"), strict=True):
        within(ours.grad, want[n], f"{name} d{n}")
        e_ours = (ours.grad.double() - want[n]).abs().max().item()
        e_eager = (theirs.grad.double() - want[n]).abs().max().item()
        assert e_ours <= 2 * e_eager + 1e-3 * want[n].abs().max().item(), f"{name} d{n}: {e_ours:.4g} vs eager {e_eager:.4g}"


@pytest.mark.parametrize("name", GATED_NAMES)
def test_gated_poisoned_buffers_and_a_cuda_graph(name: str) -> None:
    """NaN-filled dX / dW buffers are written everywhere; one step captured whole replays to fresh inputs' gradients."""
    mod, fn = entry(name)
    x, w, grad = gated_data(GATED_SHAPES[1], seed=1)
    pre = mod._forward_pre(x, w.t())[1] if "recompute" not in name else None
    bufs = {"da": torch.full_like(x, float("nan")), "db": torch.full_like(w.t(), float("nan"))}
    da, db = mod._backward(grad, x, w.t(), pre, **bufs)
    want = gated_reference(x, w, grad)
    for got, n in ((da, "x"), (db.t(), "w")):
        assert not got.isnan().any(), f"{name} d{n}: an element was not written"
        within(got, want[n], f"{name} d{n}")
    x, w, grad = gated_data(GATED_SHAPES[0], seed=2)
    sx, sw = (t.clone().requires_grad_() for t in (x, w))
    sgrad = grad.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            sx.grad = sw.grad = None
            fn(sx, sw.t()).backward(sgrad)
    torch.cuda.current_stream().wait_stream(side)
    sx.grad = sw.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(sx, sw.t()).backward(sgrad)
    x2, w2, g2 = gated_data(GATED_SHAPES[0], seed=3)
    with torch.no_grad():
        for dst, src in ((sx, x2), (sw, w2), (sgrad, g2)):
            dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    want = gated_reference(x2, w2, g2)
    for t, n in ((sx, "x"), (sw, "w")):
        within(t.grad, want[n], f"{name} replayed d{n}")


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_rendered_interleaved_gelu_with_bias_f16(save: str, tmp_path) -> None:
    """GeGLU (tanh), interleaved columns, a bias after the gate, f16 (not shipped: rendered here), aligned and odd
    shapes, each GEMM's TMA form on the GPU."""
    from kernels import load_module

    spec = {"name": f"gpu_train_geglu_il_{save}", "kind": "gemm", "a": {"dtype": "f16", "major": "k"},
            "b": {"dtype": "f16", "major": "k"}, "out": {"dtype": "f16"},
            "epilogue": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias", "dtype": "f16"}],
            "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 64},
            "schedule": {"persistent": True, "group_m": 8}, "triton": {"num_warps": 8}, "targets": ["triton:sm90"]}
    fn = getattr(load_module(spec, tmp_path), spec["name"])
    act = lambda v: F.gelu(v, approximate="tanh")  # noqa: E731
    for shape in ((512, 384, 256), (77, 200, 136)):
        x, w, grad = gated_data(shape, seed=4, dtype=torch.float16)
        bias = torch.randn(shape[1], device="cuda").half()
        leaves = [t.clone().requires_grad_() for t in (x, w, bias)]
        fn(leaves[0], leaves[1].t(), leaves[2]).backward(grad)
        ref = {n: t.detach().double().requires_grad_() for n, t in (("x", x), ("w", w), ("bias", bias))}
        (swiglu(ref["x"], ref["w"], "interleaved", act) + ref["bias"]).backward(grad.double())
        for t, n in zip(leaves, ("x", "w", "bias"), strict=True):
            err = (t.grad.double() - ref[n].grad).abs().max().item()
            assert err <= 1e-2 * ref[n].grad.abs().max().item(), f"{save} {shape} d{n}: {err:.4g}"
