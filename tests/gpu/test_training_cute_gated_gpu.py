"""The gated up-projection's backward on the CuTe sm90 design (issue 38; docs/training/triton.md's "A gated epilogue" and
docs/training/cute_sm90.md) on a Hopper GPU: specs rendered here (SwiGLU, GeGLU-tanh and erf GeGLU over B's 2N columns, `halves`
and `interleaved`, both save modes, with and without a bias after the gate; B K-major: the (2N, K) gate_up weight
passed as w.t()) give bf16 gradients of A, B and the bias within rounding of float64 autograd of
act(gate) * up (+ bias) and no worse than twice eager's error; odd shapes (M, N, K off the tiles, M = 1, a K whose row
pitch TMA cannot read in place, an N whose halves are no whole 16 bytes); NaN-poisoned gradient buffers written
everywhere, new gradients in the operands' layouts, the bias gradient alone; pre's layout (forward_pre stores the gate
and up pre-activations in the forward's layout).

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

SHAPES = [(256, 256, 384), (200, 136, 96), (1, 264, 72), (37, 100, 75), (1000, 520, 264)]
ACTS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}


def gated_spec(name: str, fn: str, layout: str, save: str, bias: bool) -> dict:
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 64},
            "cute": {"mma_warpgroups": 2}, "schedule": {"persistent": True},
            "epilogue": [{"op": "gated", "fn": fn, "layout": layout}] + ([{"op": "bias", "dtype": "bf16"}] if bias else []),
            "training": {"save": save, **({"pre": PRE[name]} if name in PRE else {})}}


# name: (fn, layout, save, bias): each layout in each save mode, every gated fn, a bias after the gate or not
FORMS = {
    "cgt_swiglu_halves_pre": ("silu", "halves", "preact", True),
    "cgt_swiglu_il_rec": ("silu", "interleaved", "recompute", True),
    "cgt_geglu_tanh_il_pre": ("gelu_tanh", "interleaved", "preact", False),
    "cgt_geglu_halves_rec": ("gelu", "halves", "recompute", False),
    "cgt_swiglu_halves_pre_pp": ("silu", "halves", "preact", True),
    "cgt_swiglu_halves_rec_pp": ("silu", "halves", "recompute", False),
}
# the GEMM that computes pre on its own ping-pong schedule (training.pre.schedule): a whole 64x128 gated tile a
# warpgroup, the forward, dgrad and wgrad keeping the spec's cooperative 128x128
PRE = {name: {"tile": {"m": 64, "n": 128, "k": 64}, "schedule": "pingpong"} for name in FORMS if name.endswith("_pp")}
_MODULES: dict[str, object] = {}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        from kernels import load_target_module

        fn, layout, save, bias = FORMS[name]
        _MODULES[name] = load_target_module(gated_spec(name, fn, layout, save, bias), "cute:sm90",
                                            Path(tmp_path_factory.mktemp(name)), "_specgen_cute_gated_train_")[0]
    return _MODULES[name]


def halves_of(pre: torch.Tensor, layout: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) of a GEMM's 2N columns in the layout."""
    return (pre[:, :n], pre[:, n:]) if layout == "halves" else (pre[:, 0::2], pre[:, 1::2])


def data(shape: tuple[int, int, int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """a = x (M, K), b = w.t() (K, 2N) of the (2N, K) gate_up weight (K-major), the bias (N,) and dOut (M, N)."""
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    return x, w.t(), bias, grad


def autograd_of(name: str, a, b, bias, grad, dtype) -> dict[str, torch.Tensor]:
    """Autograd of act(gate) * up (+ bias) in `dtype` (float64: the reference; bf16: eager)."""
    fn, layout, _, has_bias = FORMS[name]
    leaves = {n: t.detach().to(dtype).requires_grad_() for n, t in (("a", a), ("b", b), ("bias", bias))}
    gate, up = halves_of(leaves["a"] @ leaves["b"], layout, grad.shape[1])
    out = ACTS[fn](gate) * up + (leaves["bias"] if has_bias else 0)
    out.backward(grad.to(dtype))
    return {n: t.grad for n, t in leaves.items() if n != "bias" or has_bias}


def call(name: str, mod, a, b, bias):
    return getattr(mod, name)(a, b, bias) if FORMS[name][3] else getattr(mod, name)(a, b)


def check(got: dict, want: dict, eager: dict | None, what: str) -> None:
    from gpu.test_training_cute_gpu import check_grads

    check_grads(got, want, eager, what, torch.bfloat16)



CASES = [(n, s) for n in FORMS for s in SHAPES]


@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in CASES])
def test_gradients_against_float64(name: str, shape: tuple[int, int, int], tmp_path_factory) -> None:
    mod = module(name, tmp_path_factory)
    a, b, bias, grad = data(shape)
    leaves = {n: t.detach().clone().requires_grad_() for n, t in (("a", a), ("b", b), ("bias", bias))}
    out = call(name, mod, leaves["a"], leaves["b"], leaves["bias"])
    out.backward(grad)
    got = {n: t.grad for n, t in leaves.items() if n != "bias" or FORMS[name][3]}
    check(got, autograd_of(name, a, b, bias, grad, torch.float64), autograd_of(name, a, b, bias, grad, torch.bfloat16),
          f"{name} {shape}")


@pytest.mark.parametrize("name", list(FORMS))
def test_poisoned_buffers_and_the_operands_layouts(name: str, tmp_path_factory) -> None:
    """_backward writes NaN-filled dA / dB / dbias everywhere (dB over both halves of B's 2N columns), new gradients
    come back in A's and B's layouts, and the bias gradient alone is dOut's column sum."""
    mod = module(name, tmp_path_factory)
    fn, layout, save, has_bias = FORMS[name]
    for shape in (SHAPES[1], SHAPES[3]):
        a, b, bias, grad = data(shape, seed=1)
        args = (a, b, bias) if has_bias else (a, b)
        pre = mod._forward_pre(*args)[1] if save == "preact" else None
        bufs = {"da": torch.full_like(a, float("nan")), "db": torch.full_like(b, float("nan"))}
        if has_bias:
            bufs["dbias"] = torch.full_like(bias, float("nan"))
        want = autograd_of(name, a, b, bias, grad, torch.float64)
        grads = mod._backward(grad, *args, pre, **bufs)
        check(dict(zip(("a", "b", "bias"), grads, strict=False)), want, None, f"{name} {shape} poisoned")
        fresh = mod._backward(grad, *args, pre)
        assert fresh[0].stride() == a.stride() and fresh[1].stride() == b.stride(), name
        check(dict(zip(("a", "b", "bias"), fresh, strict=False)), want, None, f"{name} {shape} fresh")
        if has_bias:  # only what autograd asks for: dbias alone
            _, _, dbias = mod._backward(grad, *args, pre, False, False, True)
            check({"bias": dbias}, {"bias": want["bias"]}, None, f"{name} {shape} dbias alone")


@pytest.mark.parametrize("name", [n for n, f in FORMS.items() if f[2] == "preact"])
def test_forward_pre_stores_gate_and_up_in_the_forwards_layout(name: str, tmp_path_factory) -> None:
    """pre (M, 2N) is A @ B rounded to bf16, its gate and up columns where the forward's layout puts them (NaN-free:
    every element written), and out is the forward's."""
    mod = module(name, tmp_path_factory)
    fn, layout, _, has_bias = FORMS[name]
    a, b, bias, _ = data(SHAPES[3], seed=2)
    args = (a, b, bias) if has_bias else (a, b)
    out, pre = mod._forward_pre(*args)
    want = a.double() @ b.double()
    assert pre.shape == want.shape and not pre.isnan().any()
    assert (pre.double() - want).abs().max().item() <= 1e-2 * want.abs().max().item()
    gate, up = halves_of(want, layout, out.shape[1])
    ref = ACTS[fn](gate) * up + (bias.double() if has_bias else 0)
    assert (out.double() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item()
    assert torch.equal(out, getattr(mod, name)(*args))  # the forward's bits
