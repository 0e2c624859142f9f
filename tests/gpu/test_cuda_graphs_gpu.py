"""Every torch entry under CUDA graphs (issue 20): captured once in a `torch.cuda.CUDAGraph`, replayed
with new data copied into the captured inputs, the output poisoned before each replay; each replay must
equal an eager call on the same data bit for bit and the float64 reference within bf16 rounding. The
Mosaic GPU torch entry is captured where it launches its compiled kernel directly (tensors it reads in
place at shapes TMA takes unpadded); a call that needs the jitted path (padding) cannot be captured (JAX
launches on its own stream and allocates the output): it must say so before anything launches, not fail
inside torch's capture.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from specgen.kinds.gemm.testing.reference import REFERENCES
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
    _replays_like_eager(graph, out, fn, static, lambda: build_args(spec, M, N, K, gen),
                        lambda: reference(fn, spec, static), f"{backend} {name} {shape}")


def _replays_like_eager(graph, out: torch.Tensor, fn, static: list, fresh_args, ref, what: str) -> None:
    """Twice: new data copied into the captured inputs, the output poisoned, the graph replayed; the output
    must equal an eager call on the same data bit for bit and the float64 reference (`ref()`) within bf16
    rounding."""
    for _ in range(2):
        for held, new in zip(static, fresh_args(), strict=True):
            if isinstance(held, torch.Tensor):
                held.copy_(new)  # scalars stay: the captured launch holds their values
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = fn(*static)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"{what}: replay differs from an eager call on the same data"
        expected = ref()
        tol = 2e-2 * (expected.abs().max().item() + 1.0)
        err = (out.double() - expected).abs().max().item()
        assert err <= tol, f"{what}: max |err| {err:.4g} > {tol:.4g}"


def _mosaic_reference(fn, spec: dict, args: list) -> torch.Tensor:
    names = list(inspect.signature(fn).parameters)[2:]  # a, b, <epilogue arguments> (no out=)
    return REFERENCES[spec["kind"]](spec["epilogue"], args[0], args[1], dict(zip(names, args[2:], strict=True)))


# aligned shapes (the direct path): a decode shape (the size-selected variants) and a prefill one
MOSAIC_SHAPES = [(16, 4096, 2048), (1024, 2048, 1024)]


@pytest.mark.parametrize("shape", MOSAIC_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", NAMES)
def test_mosaic_gpu_direct_entry_is_captured_and_replays_like_eager(name: str, shape, monkeypatch) -> None:
    pytest.importorskip("jax")
    mod = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    fn, spec = getattr(mod, f"{name}_torch"), mod.SPEC
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(hash(("mosaic", name, shape)) % 2**31)
    static = build_args(spec, M, N, K, gen)
    with monkeypatch.context() as patch:  # the same call through DLPack and the jitted program
        patch.setattr(mod, "_direct", lambda *_: None)
        jitted = fn(*static)
    mod._DIRECT.clear()
    eager = fn(*static)  # compiles the direct launch before capture
    torch.cuda.synchronize()
    assert [v for v in mod._DIRECT.values() if v is not None], f"{name} {shape}: the call did not go direct"
    assert torch.equal(eager, jitted), f"{name} {shape}: the direct launch differs from the jitted program"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    _replays_like_eager(graph, out, fn, static, lambda: build_args(spec, M, N, K, gen),
                        lambda: _mosaic_reference(fn, spec, static), f"mosaic {name} {shape}")


@pytest.mark.parametrize(("name", "shape"), [("gemm_fp8_rowwise", (16, 2048, 1024)), ("gemm_bias_gelu_bf16", (256, 2112, 1024))])
def test_mosaic_gpu_direct_vector_padding_never_reaches_the_output(name: str, shape, monkeypatch) -> None:
    """The direct launch pads a vector that is no whole number of tiles (fp8's scale_a, 16 rows under a
    64-row tile; the bias, 2112 columns under 256-column tiles) into a buffer whose tail it leaves unset.
    With every torch.empty of the call filled with NaN (that tail, and the output), the result still
    equals the jitted program's (zero padding) bit for bit, and the float64 reference."""
    pytest.importorskip("jax")
    mod = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    fn, spec = getattr(mod, f"{name}_torch"), mod.SPEC
    gen = torch.Generator(device="cuda").manual_seed(7)
    args = build_args(spec, *shape, gen)
    with monkeypatch.context() as patch:
        patch.setattr(mod, "_direct", lambda *_: None)
        jitted = fn(*args)
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan")))
    mod._DIRECT.clear()
    direct = fn(*args)
    torch.cuda.synchronize()
    assert [v for v in mod._DIRECT.values() if v is not None], f"{name}: the call did not go direct"
    assert torch.equal(direct, jitted), f"{name}: the unset padding reached the output"
    expected = _mosaic_reference(fn, spec, args)
    err = (direct.double() - expected).abs().max().item()
    assert err <= 2e-2 * (expected.abs().max().item() + 1.0), f"{name}: max |err| {err:.4g}"


def test_mosaic_gpu_torch_entry_refuses_capture_before_launching() -> None:
    """K = 200 is no whole number of 64-element swizzle rows: TMA needs A and B padded, which only the jitted
    path does, and that path cannot be captured."""
    pytest.importorskip("jax")
    mod = importlib.import_module("generated.pallas.gpu_sm90.gemm_bf16")
    a = torch.randn(64, 200, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 200, device="cuda", dtype=torch.bfloat16).t()
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
