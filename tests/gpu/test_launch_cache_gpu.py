"""Cached launches on a real GPU (specgen/runtime/triton/launch.py: launch_cached): repeat calls with the
same tensors take the cached launch, and every change between calls (an operand's address or contents,
a stride with the address kept, the problem size and with it the variant and split-K workspace, going
back to an earlier entry) still computes the right product into the poisoned output. With a launch
hook installed, every call goes through Triton's JIT, so the hook sees it.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them on the H200.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu


def check(fn, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, what: str) -> None:
    out.fill_(float("nan"))
    fn(a, b, out=out)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = (out.double() - ref).abs().max().item()
    tol = 2e-2 * (ref.abs().max().item() + 1.0)
    assert not torch.isnan(out).any() and err <= tol, f"{what}: max |err| {err:.4g} > {tol:.4g}"


@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_small_bf16"])
def test_cached_launches_follow_every_change(name: str) -> None:
    mod = importlib.import_module(f"generated.triton.{name}")
    fn = getattr(mod, name)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    K, N = 512, 256
    abuf, wbuf, obuf = randn(256 * 2 * K), randn(N * 2 * K), randn(256 * 2 * N)
    for M in (64, 16, 128, 1, 200, 64):  # variants (and split-K workspaces) change, then an earlier shape
        a, a_wide = abuf[:M * K].view(M, K), abuf.view(256, 2 * K)[:M, :K]
        w, w_wide = wbuf[:N * K].view(N, K), wbuf.view(N, 2 * K)[:, :K]
        out, out_wide = obuf[:M * N].view(M, N), obuf.view(256, 2 * N)[:M, :N]
        for _ in range(3):  # compile, build, then the cached launch
            check(fn, a, w.t(), out, f"M={M} repeat")
        assert len(mod._launcher._expanded) >= 1, "repeat calls should have a cached launch"
        check(fn, a_wide, w.t(), out, f"M={M} a stride")
        check(fn, a, w_wide.t(), out, f"M={M} b stride")
        check(fn, a, w.t(), out_wide, f"M={M} out stride")
        check(fn, abuf[K * 8:K * 8 + M * K].view(M, K), w.t(), out, f"M={M} a address")
        abuf[:M * K].mul_(-0.5)  # new contents at the same address
        check(fn, a, w.t(), out, f"M={M} a contents")
        check(fn, a, w.t(), torch.empty(M, N, device="cuda", dtype=torch.bfloat16), f"M={M} out address")


def test_launch_hooks_see_every_call() -> None:
    import triton

    mod = importlib.import_module("generated.triton.gemm_bf16")
    a = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        mod.gemm_bf16(a, w.t(), out=out)  # cached from here on
    seen: list = []

    def record(metadata) -> None:
        seen.append(metadata)

    hook = triton.knobs.runtime.launch_enter_hook
    hook.add(record)
    try:
        for _ in range(4):
            check(mod.gemm_bf16, a, w.t(), out, "under a launch hook")
    finally:
        hook.remove(record)
    assert len(seen) == 4
