"""Grouped training with an fp8 forward (issue 38's "fp8 forward with a bf16 backward" on the grouped Triton design),
under the CPU interpreter: A and B e4m3, e5m2 or one of each, torch._scaled_grouped_mm's rowwise scales first
(scale_a (M,), scale_b (G, N)), then a per-group bias and an activation, or the bias alone. The backward runs in the
output's 16-bit dtype (f16 here: the interpreter's bf16 dots are wrong) and gives dA and dB, the gradients of the
dequantized operands A scale_a and B[g] scale_b[g], against float64 autograd of the per-group loop over those;
dbias too; the scales get none (inputs without grad, as torch._scaled_grouped_mm's) and an fp8 operand or a scale that
requires grad is refused naming it. NaN-poisoned gradient buffers, empty groups, rows past the last group (dA = 0),
both B majors (N-major on sm100, GRP102), both save modes, both index formats; each spec checks clean."""

from __future__ import annotations

import json

import pytest
import torch

from specgen.check import check_specs
from specgen.spec.load import load_text

FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
BIAS = {"op": "bias", "dtype": "f16"}
# (save, A, B, B major, index, tail, group sizes, rows past the last group, activation or "")
CASES = {
    "e4m3_preact_gelu": ("preact", "fp8_e4m3", "fp8_e4m3", "k", "offs", "untouched", [0, 5, 17, 0], 3, "gelu"),
    "e5m2_recompute_silu_sizes": ("recompute", "fp8_e5m2", "fp8_e5m2", "k", "sizes", "zero", [3, 0, 0, 20, 1], 2, "silu"),
    "mix_mn_bias_only": ("preact", "fp8_e4m3", "fp8_e5m2", "mn", "offs", "zero", [9, 0, 18], 4, ""),
}
N, K = 20, 40  # off the 16 x 16 x 32 tiles: N and K tails


def spec_of(case: str) -> dict:
    save, a, b, b_major, index, tail, _, _, act = CASES[case]
    return {"name": f"gtrain_fp8_{case}", "kind": "grouped", "a": {"dtype": a, "major": "k"},
            "b": {"dtype": b, "major": b_major}, "out": {"dtype": "f16"}, "groups": {"index": index, "tail": tail},
            "epilogue": [{"op": "scale", "by": "rowcol"}, BIAS] + ([{"op": "activation", "fn": act}] if act else []),
            "training": {"save": save}, "tile": {"m": 16, "n": 16, "k": 32}, "triton": {"num_warps": 4},
            "targets": ["triton:sm100" if b_major == "mn" else "triton:sm90"]}  # sm90 takes 8-bit B K-major (GRP102)


def close(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 1e-2) -> None:
    assert tuple(got.shape) == tuple(want.shape), what
    scale = max(want.abs().max().item(), 1.0)
    err = (got.double() - want).abs().max().item()
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


def dequantized_reference(a, b, sa, sb, bias, sizes, act: str, grad):
    """float64: the per-group loop over the dequantized operands (a * scale_a rows, b[g] * scale_b[g] columns, then
    bias[g] and `act`): the groups' rows of out, and torch autograd's dA, dB, dbias for dOut = `grad` (zeros where no
    row reads an operand). tests/gpu/test_grouped_training_gpu.py's fp8 test checks against it too."""
    deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
    deq_b = (b.double() * sb.double()[:, None, :]).requires_grad_()
    bias64 = bias.double().requires_grad_()
    outs, start = [], 0
    for i, size in enumerate(sizes):
        y = deq_a[start:start + size] @ deq_b[i] + bias64[i]
        outs.append({"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[act](y) if act else y)
        start += size
    want = torch.cat(outs) if outs else deq_a.new_zeros(0, bias.shape[1])
    if start:
        (want * grad[:start].double()).sum().backward()
    return want.detach(), tuple(t.grad if t.grad is not None else torch.zeros_like(t) for t in (deq_a, deq_b, bias64))


@pytest.mark.parametrize("case", list(CASES))
def test_fp8_forward_backward_is_the_dequantized_operands_gradient(case: str, load_kernel) -> None:
    save, a_dt, b_dt, b_major, index, tail, sizes, tail_rows, act = CASES[case]
    spec = spec_of(case)
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    assert not [d for d in check_specs([loaded]).diagnostics if d.severity == "error"]
    mod = load_kernel(spec)
    fn = getattr(mod, spec["name"])
    gen = torch.Generator().manual_seed(len(sizes))
    rows, g = sum(sizes) + tail_rows, len(sizes)
    a = torch.randn(rows, K, generator=gen).to(FP8[a_dt])
    b = (torch.randn(g, N, K, generator=gen).to(FP8[b_dt]).transpose(1, 2) if b_major == "k"
         else torch.randn(g, K, N, generator=gen).to(FP8[b_dt]))
    sa, sb = torch.rand(rows, generator=gen) + 0.5, (torch.rand(g, N, generator=gen) + 0.5) / K**0.5
    bias = torch.randn(g, N, generator=gen).half()
    ends = torch.tensor(sizes).cumsum(0) if index == "offs" else torch.tensor(sizes)
    ix = ends.to(torch.int32)
    grad = torch.randn(rows, N, generator=gen).half()
    want, (want_da, want_db, want_dbias) = dequantized_reference(a, b, sa, sb, bias, sizes, act, grad)
    start = sum(sizes)
    close(fn(a, b, ix, sa, sb, bias)[:start], want, "out", 4e-3)
    # the backward into NaN-poisoned buffers
    pre = mod._forward_train(a, b, ix, sa, sb, bias)[1] if save == "preact" and act else None
    poisoned = {"da": torch.full((rows, K), float("nan"), dtype=torch.half),
                "db": torch.full_like(b, float("nan"), dtype=torch.half), "dbias": torch.full((g, N), float("nan"), dtype=torch.half)}
    da, db, dsa, dsb, dbias = mod._backward(grad, a, b, ix, sa, sb, bias, pre, **poisoned)
    assert da is poisoned["da"] and db is poisoned["db"] and dbias is poisoned["dbias"]
    assert da.dtype == db.dtype == torch.half and dsa.numel() == dsb.numel() == 0
    close(da[:start], want_da[:start], "dA (dequantized)")
    assert not da[start:].any(), "dA past the last group: zeros"
    close(db, want_db, "dB (dequantized)")
    close(dbias, want_dbias, "dbias")
    for i in (i for i, s in enumerate(sizes) if s == 0):  # an empty group: exact zeros
        assert not db[i].any() and not dbias[i].any(), f"group {i}"
    # through autograd: the bias's gradient; an fp8 operand or a scale that requires grad is refused, naming it
    leaf = bias.clone().requires_grad_()
    fn(a, b, ix, sa, sb, leaf).backward(grad)
    close(leaf.grad, want_dbias, "dbias (autograd)")
    with pytest.raises(RuntimeError, match=rf"a \({a_dt}\) requires grad.*_backward\(grad, \.\.\.\)"):
        fn(a.clone().requires_grad_(), b, ix, sa, sb, bias)
    with pytest.raises(RuntimeError, match="scale_b requires grad, but an fp8 forward's dequantization scales"):
        fn(a, b, ix, sa, sb.clone().requires_grad_(), bias)
