"""Every torch entry under CUDA graphs (issue 20): captured once in a `torch.cuda.CUDAGraph`, replayed
with new data copied into the captured inputs, the output poisoned before each replay; each replay must
equal an eager call on the same data bit for bit and the float64 reference within bf16 rounding. The
Mosaic GPU torch entry cannot be captured (JAX launches on its own stream and allocates the output): it
must say so before anything launches, not fail inside torch's capture.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.gpu.test_catalogue_gpu import build_args, reference

pytestmark = pytest.mark.gpu

NAMES = ["gemm_bf16", "gemm_bias_gelu_bf16", "gemm_fp8_rowwise", "gemm_residual_bf16", "bmm_bf16"]
# a decode shape (the size-selected variants) and a prefill one with tails
SHAPES = [(16, 4096, 2048), (1000, 2048, 1040)]


def _module(backend: str, name: str):
    if backend == "cute":
        pytest.importorskip("cutlass")
    return importlib.import_module(f"generated.{backend}.{name}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("backend", ["triton", "cute"])
def test_captured_entry_replays_new_data_like_eager(backend: str, name: str, shape) -> None:
    mod = _module(backend, name)
    fn, spec = getattr(mod, name), mod.SPEC
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((backend, name, shape)) % 2**31)
    static = build_args(spec, M, N, K, gen)
    out = fn(*static)  # the output buffer the graph writes, and the compile before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch's graph docs ask
        for _ in range(2):
            fn(*static, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*static, out=out)
    for _ in range(2):
        fresh = build_args(spec, M, N, K, gen)
        for held, new in zip(static, fresh, strict=True):
            if isinstance(held, torch.Tensor):
                held.copy_(new)  # scalars stay: the captured launch holds their values
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = fn(*static)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"{backend} {name} {shape}: replay differs from an eager call on the same data"
        ref = reference(fn, spec, static)
        tol = 2e-2 * (ref.abs().max().item() + 1.0)
        err = (out.double() - ref).abs().max().item()
        assert err <= tol, f"{backend} {name} {shape}: max |err| {err:.4g} > {tol:.4g}"


def test_mosaic_gpu_torch_entry_refuses_capture_before_launching() -> None:
    pytest.importorskip("jax")
    mod = importlib.import_module("generated.pallas.gpu_sm90.gemm_bf16")
    a = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16).t()
    mod.gemm_bf16_torch(a, b)  # compiled and working outside a capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"gemm_bf16_torch cannot be captured in a CUDA graph"), \
            torch.cuda.graph(graph):
        mod.gemm_bf16_torch(a, b)
    # the capture was abandoned cleanly: the entry still works
    torch.cuda.synchronize()
    out = mod.gemm_bf16_torch(a, b)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert (out.double() - ref).abs().max().item() <= 2e-2 * (ref.abs().max().item() + 1.0)
