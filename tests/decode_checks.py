"""What the Triton decode GPU tests share (tests/gpu/test_split_k_gpu.py, test_swap_ab_gpu.py): random
operands for the shipped bf16 and fp8-rowwise GEMMs, the float64 comparison of a poisoned output, and
the split-K workspace's state after a launch. CUDA only: imported by GPU-marked tests."""

from __future__ import annotations

import torch

from specgen.kinds.gemm.testing.reference import REFERENCES


def operands(fp8: bool, M: int, N: int, K: int, gen: torch.Generator) -> tuple[list, dict]:
    """(positional arguments, the reference's named operands): a (M, K) and B as the K-major view of
    an (N, K) weight; fp8 e4m3 adds row and column scales, as the rowwise kernels take them."""
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    a = torch.randn(M, K, generator=gen, device="cuda").to(dtype)
    w = torch.randn(N, K, generator=gen, device="cuda").to(dtype)
    if not fp8:
        return [a, w.t()], {}
    sa, sb = torch.rand(M, 1, generator=gen, device="cuda") + 0.5, torch.rand(1, N, generator=gen, device="cuda") + 0.5
    return [a, w.t(), sa, sb], {"scale_a": sa, "scale_b": sb}


def run_against_float64(mod, fn, args: list, named: dict, label: str) -> torch.Tensor:
    """fn(*args) into a NaN-poisoned bf16 output, checked against the float64 reference of the module's
    epilogue (every element written, max error within 2% of the output's scale); returns the output."""
    M, N = args[0].shape[0], args[1].shape[1]
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = fn(*args, out=out)
    torch.cuda.synchronize()
    ref = REFERENCES["gemm"](mod.SPEC["epilogue"], args[0], args[1], named)
    assert not got.isnan().any()
    err = (got.double() - ref).abs().max().item()
    tol = 2e-2 * (ref.abs().max().item() + 1.0)
    assert err <= tol, f"{label}: max |err| {err:.4g} > {tol:.4g}"
    return got


def assert_workspaces_reset(launcher) -> None:
    """Every launch leaves its split-K arrival counters (and atomic partials) at zero."""
    torch.cuda.synchronize()
    for (_device, _stream, atomic), (ws, counts) in launcher._workspaces.items():
        assert not counts.any(), "a launch left arrival counters behind"
        if atomic:
            assert not ws.any(), "a launch left atomic partials behind"
