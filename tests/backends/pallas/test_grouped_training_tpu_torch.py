"""A grouped Pallas training module's torch entry is differentiable (issue 38, session 35; specgen/runtime/jax_torch.py,
the dense module's machinery): with grad on and a tensor that requires grad, `<name>_torch` is a torch op running
jax.vjp of the module's JAX entry (its custom_vjp: ragged-M dgrad, ragged-K wgrad), its backward the pullback. Here,
on torch CPU tensors in Pallas's strict TPU interpreter (uninitialized VMEM and fresh outputs read as NaN: an
unwritten gradient element shows), for the f32 bias + GELU-tanh preact form (B K-major, passed as torch._grouped_mm
takes it: the (G, N, K) weight transposed), odd group sizes with an empty group and rows past the last group:
out and every gradient against float64 torch autograd of the per-group loop (the group sizes get none; an empty
group's dB and dbias exactly 0, dA past the groups exactly 0); `out=` refused with grad, taken without. One shape:
the interpreted programs (the vjp forward, the pullback, the plain forward) compile once each. (Only the gradients
asked for, a frozen weight: the dense module's test, test_training_tpu_torch.py.)"""

from __future__ import annotations

import pytest
import torch

from backends.pallas.test_grouped_tpu import render
from specgen.kinds.grouped.testing.reference import grouped
from specgen.kinds.grouped.testing.tpu_specs import TPU_TRAINING_FORMS

NAME = "gtt_bias_gelu_tanh_preact"
SIZES = (5, 0, 9, 4)  # 18 of M = 21 rows: three past the last group
M, N, K = 21, 40, 24


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> object:
    return render(TPU_TRAINING_FORMS[NAME], tmp_path_factory.mktemp("grouped_torch_grad"))


def leaves(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A (M, K), the weight (G, N, K) as stored (K-major), the bias (G, N), the group sizes (int32)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, K, generator=g) / K ** 0.5, torch.randn(len(SIZES), N, K, generator=g),
            torch.randn(len(SIZES), N, generator=g), torch.tensor(SIZES, dtype=torch.int32))


def reference(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, sizes: torch.Tensor,
              dout: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """out and the gradients of a, w (stored (G, N, K)) and bias: float64 autograd of the per-group loop (rows past
    the last group zeros: tail = "zero")."""
    xs = [x.detach().double().requires_grad_() for x in (a, w, bias)]
    out, _ = grouped(TPU_TRAINING_FORMS[NAME], xs[0], xs[1].transpose(1, 2), sizes, {"bias": xs[2]})
    out.backward(dout.double())
    return out.detach(), [x.grad for x in xs]


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert not got.isnan().any(), f"{what}: NaN (an element no kernel wrote)"
    err = (got.double() - want).abs().max().item()
    assert err <= 2e-4 * max(want.abs().max().item(), 1.0), f"{what}: max error {err:.3g}"


def test_gradients_against_float64_autograd_with_an_empty_group(module) -> None:
    """Every gradient against float64 autograd (dB in the weight's stored (G, N, K) layout, through the transposed
    view passed); the empty group's dB and dbias exactly 0, dA past the groups exactly 0; the sizes get none (the
    index sits between the differentiated tensors). Then `out=`: refused with grad, written under torch.no_grad()."""
    fn = getattr(module, f"{NAME}_torch")
    a, w, bias, sizes = (x.requires_grad_() if x.is_floating_point() else x for x in leaves())
    out = fn(a, w.transpose(1, 2), sizes, bias, interpret=True)
    assert "specgen_" in type(out.grad_fn).__name__
    dout = torch.randn(M, N, generator=torch.Generator().manual_seed(1))
    out.backward(dout)
    want_out, want = reference(a, w, bias, sizes, dout)
    close(out.detach(), want_out, "out")
    for got, ref, what in zip((a.grad, w.grad, bias.grad), want, ("da", "dw", "dbias"), strict=True):
        close(got, ref, what)
    assert w.grad.stride() == w.stride() and not sizes.requires_grad
    assert not a.grad[sum(SIZES):].any() and not w.grad[1].any() and not bias.grad[1].any()

    poisoned = torch.full((M, N), float("nan"))
    with pytest.raises(TypeError, match=f"{NAME}: out= is not supported when an argument requires grad"):
        fn(a, w.transpose(1, 2), sizes, bias, out=poisoned, interpret=True)
    with torch.no_grad():
        got = fn(a, w.transpose(1, 2), sizes, bias, out=poisoned, interpret=True)
    assert got is poisoned and got.grad_fn is None
    close(got, want_out, "no grad, out=")
