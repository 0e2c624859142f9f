"""The shipped catalogue on a real GPU, in its real dtypes (bf16, fp8): numerics against a float64
reference, poisoned outputs, edge shapes, the direct-launch fast path, and torch.compile.

Marked `gpu`: CI (CPU only) deselects them; `nox -s gpu` / gpu/run.sh run them on the H200.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from specgen.kinds.gemm.testing.reference import REFERENCES

pytestmark = pytest.mark.gpu

NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise", "gemm_residual_bf16"]
# (M, N, K): tails on every dim, M = 1, K not a multiple of tile.k; N and K multiples of 16 so that
# every kernel (TMA ones need 16-byte rows) takes them.
SHAPES = [(1, 256, 512), (200, 144, 96), (517, 264, 1040), (1024, 1024, 1024), (3000, 2048, 2064)]


def module(name: str):
    return importlib.import_module(f"generated.triton.{name}")


def make_operand(spec_side: dict, rows: int, cols: int, batch: int | None, gen: torch.Generator) -> torch.Tensor:
    """A (rows, cols) logical operand laid out in the spec's major mode: `k`-major A is row-major, and
    `k`-major B (K, N) is column-major."""
    shape = (batch, rows, cols) if batch else (rows, cols)
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}[spec_side["dtype"]]
    x = x.to(dtype)
    return x


def layout(x: torch.Tensor, contiguous_dim: int) -> torch.Tensor:
    if contiguous_dim % x.dim() == x.dim() - 1:
        return x.contiguous()
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def reference(fn, spec: dict, args: list[torch.Tensor | float]) -> torch.Tensor:
    """The shared float64 reference (specgen/kinds/gemm/testing/reference.py), the launcher's positional arguments by name
    (read off its signature: the GPU machine needs no pydantic)."""
    names = list(inspect.signature(fn).parameters)[2:-1]  # a, b, <epilogue arguments>, out
    return REFERENCES[spec["kind"]](spec["epilogue"], args[0], args[1], dict(zip(names, args[2:], strict=True)))


def build_args(spec: dict, M: int, N: int, K: int, gen: torch.Generator) -> list:
    batch = 3 if spec["batch"] else None
    a = layout(make_operand(spec["a"], M, K, batch, gen), -1 if spec["a"]["major"] == "k" else -2)
    b = layout(make_operand(spec["b"], K, N, batch, gen), -2 if spec["b"]["major"] == "k" else -1)
    args: list = [a, b]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(torch.randn(N, generator=gen, device="cuda").to(getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[op["dtype"]])))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            args += [torch.rand(M, 1, generator=gen, device="cuda") + 0.5, torch.rand(1, N, generator=gen, device="cuda") + 0.5]
        elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
            args.append(0.75)
        elif op["op"] == "residual":
            shape = (batch, M, N) if batch else (M, N)
            args.append(torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16))
    return args


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_float64_reference(name: str, shape: tuple[int, int, int]) -> None:
    mod = module(name)
    spec = mod.SPEC
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    args = build_args(spec, M, N, K, gen)
    out_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["out"]["dtype"]]
    out_shape = (3, M, N) if spec["batch"] else (M, N)
    out = torch.full(out_shape, float("nan"), device="cuda", dtype=out_dtype)  # poisoned
    fn = getattr(mod, name)
    got = fn(*args, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any(), "some output elements were never written"
    ref = reference(fn, spec, args)
    # bf16/f16 output rounding (2^-8 relative) plus accumulation-order noise growing like sqrt(K)
    scale = ref.abs().max().item() + 1.0
    tol = (2e-2 if out_dtype is torch.bfloat16 else 5e-3) * scale
    err = (out.double() - ref).abs().max().item()
    assert err <= tol, f"{name} {shape}: max |err| {err:.4g} > {tol:.4g}"
    again = fn(*args)  # second call: the direct-launch path
    torch.cuda.synchronize()
    assert torch.equal(again, out)
    assert mod._launcher._compiled, "the second call should launch the cached compiled kernel directly"


def test_torch_compile_fullgraph() -> None:
    mod = module("gemm_bias_gelu_bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a, b, bias = build_args(mod.SPEC, 256, 512, 128, gen)

    @torch.compile(fullgraph=True)
    def layer(a, b, bias):
        return mod.gemm_bias_gelu_bf16(a, b, bias) * 2.0

    got = layer(a, b, bias)
    torch.testing.assert_close(got, mod.gemm_bias_gelu_bf16(a, b, bias) * 2.0)
