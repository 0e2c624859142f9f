"""An fp8 forward's bf16 backward on the dense CuTe sm90 design (issue 38; session 32) on a Hopper GPU: specs rendered
in the test (no catalogue kernel), rowwise scales then a bias and GELU-tanh, e4m3 in both save modes, e5m2 x e5m2
(preact) and e4m3 x e5m2 (recompute). The forward within bf16 rounding of float64's; dA and dB, into NaN-poisoned
buffers, the gradients of the dequantized operands (a scale_a, b scale_b) within bf16 rounding of float64 autograd of
gelu_tanh((A sa) @ (B sb) + bias) (the Triton design's bound: tests/gpu/test_training_chain_gpu.py
test_fp8_forward_bf16_backward), the bias's too, the scales none; M = 1, N and K off the tile (K = 72: an fp8 row
pitch TMA cannot read in place); `_backward` from a user's autograd.Function (docs/training/triton.md's Fp8Linear); the
RuntimeErrors for a scale or an fp8 operand that requires grad; the bias's gradient through autograd alone.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
FORMS = {  # name: (A dtype, B dtype, save)
    "cute_fp8_train_e4m3_pre": ("fp8_e4m3", "fp8_e4m3", "preact"),
    "cute_fp8_train_e4m3_rec": ("fp8_e4m3", "fp8_e4m3", "recompute"),
    "cute_fp8_train_e5m2_pre": ("fp8_e5m2", "fp8_e5m2", "preact"),
    "cute_fp8_train_e4m3_e5m2_rec": ("fp8_e4m3", "fp8_e5m2", "recompute"),
}
SHAPES = [(256, 512, 384), (200, 136, 96), (1, 264, 72), (37, 100, 160)]
_MODULES: dict[str, object] = {}


def spec(name: str) -> dict:
    a, b, save = FORMS[name]
    return {"name": name, "kind": "gemm", "a": {"dtype": a, "major": "k"}, "b": {"dtype": b, "major": "k"},
            "out": {"dtype": "bf16"}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 128},
            "schedule": {"persistent": True, "group_m": 8},
            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                         {"op": "activation", "fn": "gelu_tanh"}],
            "training": {"save": save}}


def module(name: str, tmp_path_factory: pytest.TempPathFactory):
    if name not in _MODULES:
        from kernels import load_target_module

        _MODULES[name] = load_target_module(spec(name), "cute:sm90", Path(tmp_path_factory.mktemp(name)))[0]
    return _MODULES[name]


def data(name: str, shape: tuple[int, int, int]) -> tuple[torch.Tensor, ...]:
    """a (M, K) fp8, b (K, N) fp8 K-major (the (N, K) weight's storage), scale_a (M,), scale_b (N,), bias, dOut."""
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, generator=gen, device="cuda").to(FP8[FORMS[name][0]])
    b = torch.randn(N, K, generator=gen, device="cuda").to(FP8[FORMS[name][1]]).t()
    sa = torch.rand(M, generator=gen, device="cuda") / 10 + 0.05
    sb = torch.rand(N, generator=gen, device="cuda") / 10 + 0.05
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    return a, b, sa, sb, bias, grad


def reference(a, b, sa, sb, bias, grad) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The forward and the gradients of the dequantized operands and the bias, in float64."""
    deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
    deq_b = (b.double() * sb.double()[None, :]).requires_grad_()
    bias64 = bias.double().requires_grad_()
    out = torch.nn.functional.gelu(deq_a @ deq_b + bias64, approximate="tanh")
    out.backward(grad.double())
    return out.detach(), {"da": deq_a.grad, "db": deq_b.grad, "dbias": bias64.grad}


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype is torch.bfloat16 and got.shape == want.shape, what
    assert not got.isnan().any(), f"{what}: NaN (an element not written?)"
    err, scale = (got.double() - want).abs().max().item(), want.abs().max().item()
    assert err <= 2e-2 * scale, f"{what}: {err:.4g} > 2e-2 x {scale:.4g}"


@pytest.mark.parametrize("name", list(FORMS))
def test_fp8_forward_bf16_backward(name: str, tmp_path_factory) -> None:
    mod = module(name, tmp_path_factory)
    fn = getattr(mod, name)
    preact = FORMS[name][2] == "preact"
    for shape in SHAPES:
        M, N, K = shape
        a, b, sa, sb, bias, grad = data(name, shape)
        want_out, want = reference(a, b, sa, sb, bias, grad)
        close(fn(a, b, sa, sb, bias), want_out, f"{name} {shape} out")
        pre = None
        if preact:
            out, pre = mod._forward_pre(a, b, sa, sb, bias)
            close(out, want_out, f"{name} {shape} forward_pre's out")
        poisoned = {"da": torch.full((M, K), float("nan"), device="cuda", dtype=torch.bfloat16),
                    "db": torch.full((N, K), float("nan"), device="cuda", dtype=torch.bfloat16).t(),
                    "dbias": torch.full((N,), float("nan"), device="cuda", dtype=torch.bfloat16)}
        da, db, dsa, dsb, dbias = mod._backward(grad, a, b, sa, sb, bias, pre, **poisoned)
        assert dsa.numel() == 0 and dsb.numel() == 0, "the scales get no gradient"
        for n, g in (("da", da), ("db", db), ("dbias", dbias)):
            assert g.data_ptr() == poisoned[n].data_ptr(), f"{name} {shape} {n}: not written in place"
            close(g, want[n], f"{name} {shape} {n}")
        fresh = mod._backward(grad, a, b, sa, sb, bias, pre)  # new tensors: the same bits
        for n, g, f in zip(("da", "db", "dbias"), (da, db, dbias), (fresh[0], fresh[1], fresh[4]), strict=True):
            torch.testing.assert_close(g, f, rtol=0, atol=0, msg=lambda m, n=n, s=shape: f"{name} {s} {n}: {m}")
        assert fresh[1].stride() == b.stride(), "dB in B's layout"


def quantize(x: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise: x (R, C) bf16 -> fp8 values and f32 scales (amax / the format's max), x ~ values * scales[:, None]."""
    scale = x.float().abs().amax(dim=1).clamp(min=1e-12) / FP8_MAX[dtype]
    return (x.float() / scale[:, None]).to(FP8[dtype]), scale


class Fp8Linear(torch.autograd.Function):  # docs/training/triton.md's example: x (M, K), w (N, K) in bf16
    @staticmethod
    def forward(ctx, x, w, bias, mod):
        (a, sx), (w8, sw) = quantize(x, "fp8_e4m3"), quantize(w, "fp8_e4m3")
        out, pre = mod._forward_pre(a, w8.t(), sx, sw, bias)  # save = "preact"
        ctx.save_for_backward(a, w8.t(), sx, sw, bias, pre)
        ctx.mod = mod
        return out

    @staticmethod
    def backward(ctx, grad):
        da, db, _, _, dbias = ctx.mod._backward(grad, *ctx.saved_tensors)  # bf16: d(a sx), d(b sw)
        return da, db.t(), dbias, None


def test_backward_from_a_users_autograd_function(tmp_path_factory) -> None:
    """The straight-through recipe: x and w bf16 leaves, quantized in the Function's forward; their gradients are the
    dequantized operands' (float64 autograd at the same fp8 values and scales)."""
    name = "cute_fp8_train_e4m3_pre"
    mod = module(name, tmp_path_factory)
    M, N, K = 200, 136, 96
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    Fp8Linear.apply(x, w, bias, mod).backward(grad)
    (a, sx), (w8, sw) = quantize(x.detach(), "fp8_e4m3"), quantize(w.detach(), "fp8_e4m3")
    _, want = reference(a, w8.t(), sx, sw, bias.detach(), grad)
    close(x.grad, want["da"], "x.grad")
    close(w.grad, want["db"].t(), "w.grad")
    close(bias.grad, want["dbias"], "bias.grad")


@pytest.mark.parametrize("name", ["cute_fp8_train_e4m3_pre", "cute_fp8_train_e4m3_e5m2_rec"])
def test_the_scales_and_fp8_operands_refuse_grad_and_the_bias_takes_it(name: str, tmp_path_factory) -> None:
    mod = module(name, tmp_path_factory)
    fn = getattr(mod, name)
    a, b, sa, sb, bias, grad = data(name, (64, 96, 128))
    with pytest.raises(RuntimeError, match=r"scale_a requires grad, but an fp8 forward's dequantization scales are "
                                           r"inputs without grad \(as torch._scaled_mm's\): detach it"):
        fn(a, b, sa.clone().requires_grad_(), sb, bias)
    with pytest.raises(RuntimeError, match=r"scale_b requires grad"):
        fn(a, b, sa, sb.clone().requires_grad_(), bias)
    with pytest.raises(RuntimeError, match=rf"b \({FORMS[name][1]}\) requires grad, but autograd would round its "
                                           r"gradient to fp8.*_backward\(grad, \.\.\.\)"):
        fn(a, b.detach().clone().requires_grad_(), sa, sb, bias)
    leaf = bias.clone().requires_grad_()
    fn(a, b, sa, sb, leaf).backward(grad)
    close(leaf.grad, reference(a, b, sa, sb, bias, grad)[1]["dbias"], f"{name} bias.grad through autograd")
