"""Outputs that are the first N columns of a wider caller buffer, on the GPU: rows of 16-byte multiples (so the
launchers write in place, through TMA where the layout allows it) while N x 2 bytes is no multiple of 16. The
columns past N belong to the caller and must stay as they were (NaN here) whatever box a TMA store uses: the Triton
dense catalogue's direct call, and the Triton training backward writing dA and dB into the caller's buffers.

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu


def wide(rows: int, cols: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): a NaN buffer of 16-byte rows with at least 3 columns past `cols`, and its first `cols`."""
    per = 16 // torch.empty((), dtype=dtype).element_size()
    buf = torch.full((rows, -(-(cols + 3) // per) * per), float("nan"), device="cuda", dtype=dtype)
    return buf, buf[:, :cols]


def outside(buf: torch.Tensor, cols: int) -> list:
    return (~torch.isnan(buf[:, cols:])).nonzero()[:6].tolist()


@pytest.mark.parametrize("n", [29, 300])
@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_bias_gelu_bf16"])
def test_triton_dense_out_keeps_the_columns_past_n(name: str, n: int) -> None:
    mod = importlib.import_module(f"generated.triton.{name}")
    gen = torch.Generator(device="cuda").manual_seed(n)
    M, K = 37, 64
    a = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, K, device="cuda", generator=gen).to(torch.bfloat16).t()  # K-major: an nn.Linear weight's w.t()
    extra = [torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)] if "bias" in name else []
    buf, out = wide(M, n)
    got = getattr(mod, name)(a, b, *extra, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    assert not outside(buf, n), f"{name} wrote past N = {n}: {outside(buf, n)}"
    ref = a.double() @ b.double() + (extra[0].double() if extra else 0)
    if "gelu" in name:
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    assert (out.double() - ref).abs().max().item() <= 2e-2 * (ref.abs().max().item() + 1)


@pytest.mark.parametrize("k", [29, 300])
def test_triton_training_backward_keeps_the_columns_past_k(k: int) -> None:
    """dA (M, K) and dB (K, N) written into wider buffers: K x 2 bytes off 16, the rows 16-byte multiples."""
    mod = importlib.import_module("generated.triton.linear_gelu_train_bf16")
    gen = torch.Generator(device="cuda").manual_seed(k)
    M, N = 64, 96
    a_buf, a = wide(M, k)
    a.copy_(torch.randn(M, k, device="cuda", generator=gen))
    w_buf, w = wide(N, k)  # the weight (N, K) in a wider buffer too; b = w.t() (K-major)
    w.copy_(torch.randn(N, k, device="cuda", generator=gen))
    b = w.t()
    bias = torch.randn(N, device="cuda", generator=gen).to(torch.bfloat16)
    out, pre = mod._forward_pre(a, b, bias)
    grad = torch.randn(M, N, device="cuda", generator=gen).to(torch.bfloat16)
    da_buf, da = wide(M, k)
    db_buf, db_t = wide(N, k)  # dB in b's layout: the transpose of a wider (N, K) buffer's first K columns
    db = db_t.t()
    got_a, got_b, _ = mod._backward(grad, a, b, bias, pre, da=da, db=db)
    torch.cuda.synchronize()
    assert got_a.data_ptr() == da.data_ptr() and not torch.isnan(da).any() and not torch.isnan(db).any()
    assert not outside(da_buf, k), f"dA written past K = {k}: {outside(da_buf, k)}"
    assert not outside(db_buf, k), f"dB written past K = {k}: {outside(db_buf, k)}"
    fresh_a, fresh_b, _ = mod._backward(grad, a, b, bias, pre)
    assert torch.equal(fresh_a, da) and torch.equal(fresh_b, db)
