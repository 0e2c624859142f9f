"""The torch entries and autograd on a Hopper GPU (no backward yet): the Triton and CuTe launchers, the
Mosaic GPU torch entry (direct launch and DLPack) and the CuTe JAX entry's torch door refuse a tensor
that requires grad in grad mode before anything launches (the poisoned `out` stays NaN), naming the op
and the argument; under torch.no_grad() or on detached tensors they run (numerics against float64), a
weight that requires grad keeping the fast paths; torch.compile refuses too, and runs without grad.
The CPU suite tests the same refusals (tests/backends/*/test_*autograd.py), with stand-ins where a path
needs CUDA.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import torch  # noqa: E402

from specgen.kinds.gemm.testing.reference import REFERENCES  # noqa: E402

pytestmark = pytest.mark.gpu

NAMES = ["gemm_bias_gelu_bf16", "gemm_fp8_rowwise", "gemm_residual_bf16", "bmm_bf16", "gemm_relu_f16"]
SHAPES = [(256, 512, 256), (200, 136, 96)]  # aligned: the Mosaic GPU entry launches directly; ragged: via jax
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "fp8_e4m3": torch.float8_e4m3fn}


def entry(backend: str, name: str):
    """(the module, the torch-facing function) of one backend; skipped where its framework is missing."""
    if backend in ("cute", "cute-jax"):
        pytest.importorskip("cutlass")
    if backend in ("mgpu", "cute-jax"):
        pytest.importorskip("jax")
    path = {"triton": "triton", "cute": "cute", "cute-jax": "cute", "mgpu": "pallas.gpu_sm90"}[backend]
    mod = importlib.import_module(f"generated.{path}.{name}")
    suffix = {"triton": "", "cute": "", "cute-jax": "_jax_torch", "mgpu": "_torch"}[backend]
    return mod, getattr(mod, name + suffix)


def build_args(spec: dict, gen: torch.Generator, shape: tuple[int, int, int] = SHAPES[0]) -> list:
    """The launcher's arguments in the logical shapes and the spec's major modes, on CUDA."""
    M, N, K = shape
    lead = (3,) if spec["batch"] else ()

    def operand(side: dict, rows: int, cols: int, contiguous_last: bool) -> torch.Tensor:
        x = torch.randn(*lead, rows, cols, generator=gen, device="cuda").to(DTYPES[side["dtype"]])
        return x.contiguous() if contiguous_last else x.transpose(-1, -2).contiguous().transpose(-1, -2)

    args: list = [operand(spec["a"], M, K, spec["a"]["major"] == "k"), operand(spec["b"], K, N, spec["b"]["major"] != "k")]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(torch.randn(N, generator=gen, device="cuda").to(DTYPES[op["dtype"]]))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            args += [torch.rand(M, generator=gen, device="cuda") + 0.5, torch.rand(N, generator=gen, device="cuda") + 0.5]
        elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
            args.append(0.75)
        elif op["op"] == "residual":
            args.append(torch.randn(*lead, M, N, generator=gen, device="cuda").to(DTYPES[op["dtype"]]))
    return args


def names_of(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("out", "interpret")]


def check(fn, spec: dict, args: list, got: torch.Tensor) -> None:
    torch.cuda.synchronize()
    names = names_of(fn)
    kwargs = {n: (v.detach() if isinstance(v, torch.Tensor) else v) for n, v in zip(names[2:], args[2:], strict=True)}
    ref = REFERENCES[spec["kind"]](spec["epilogue"], args[0].detach(), args[1].detach(), kwargs)
    scale = ref.abs().max().item() + 1.0
    tol = (2e-2 if got.dtype is torch.bfloat16 else 5e-3) * scale
    assert not got.requires_grad
    assert (got.double() - ref).abs().max().item() <= tol


BACKENDS = ["triton", "cute", "mgpu", "cute-jax"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_requires_grad_is_refused_before_launch(backend: str, name: str) -> None:
    mod, fn = entry(backend, name)
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = build_args(mod.SPEC, gen)
    M, N, _ = SHAPES[0]
    with_out = backend in ("triton", "cute")
    for i, arg in enumerate(names_of(fn)):
        if not isinstance(args[i], torch.Tensor):
            continue
        call = [x.detach().requires_grad_() if j == i else x for j, x in enumerate(args)]
        out = torch.full(((3,) if mod.SPEC["batch"] else ()) + (M, N), float("nan"), device="cuda",
                         dtype=DTYPES[mod.SPEC["out"]["dtype"]])
        kwargs = {"out": out} if with_out else {}
        with pytest.raises(NotImplementedError, match=re.escape(f"{name}: argument '{arg}' requires grad")):
            fn(*call, **kwargs)
        torch.cuda.synchronize()
        assert out.isnan().all(), "the kernel ran"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("how", ["no_grad", "inference_mode", "detach"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_without_grad_the_call_runs(backend: str, name: str, how: str, shape: tuple[int, int, int]) -> None:
    """Every tensor argument requires grad (a model's parameters)."""
    mod, fn = entry(backend, name)
    gen = torch.Generator(device="cuda").manual_seed(1)
    args = [x.requires_grad_() if isinstance(x, torch.Tensor) else x for x in build_args(mod.SPEC, gen, shape)]
    if how == "detach":
        got = fn(*[x.detach() if isinstance(x, torch.Tensor) else x for x in args])
    else:
        with torch.no_grad() if how == "no_grad" else torch.inference_mode():
            got = fn(*args)
    check(fn, mod.SPEC, args, got)


def test_mgpu_weight_that_requires_grad_launches_directly_under_no_grad(monkeypatch) -> None:
    """The Mosaic GPU torch entry keeps its direct launch (no jax, no DLPack) for parameters under no_grad."""
    mod, fn = entry("mgpu", "gemm_bias_gelu_bf16")
    args = [x.requires_grad_() for x in build_args(mod.SPEC, torch.Generator(device="cuda").manual_seed(2))]

    def dlpack(*_: object) -> None:
        raise AssertionError("took the DLPack path")

    monkeypatch.setattr(mod._rt, "torch_to_jax", dlpack)
    with torch.no_grad():
        got = fn(*args)
    check(fn, mod.SPEC, args, got)


@pytest.mark.parametrize("backend", ["triton", "cute"])
def test_torch_compile(backend: str) -> None:
    mod, fn = entry(backend, "gemm_bias_gelu_bf16")
    a, b, bias = build_args(mod.SPEC, torch.Generator(device="cuda").manual_seed(3))
    torch._dynamo.reset()
    try:
        layer = torch.compile(lambda a, b, bias: fn(a, b, bias) * 2.0, fullgraph=True)
        with pytest.raises(Exception, match=re.escape("gemm_bias_gelu_bf16: argument 'b' requires grad")):
            layer(a, b.detach().requires_grad_(), bias)
        torch._dynamo.reset()
        w = b.detach().requires_grad_()
        with torch.no_grad():
            got = layer(a, w, bias)
        torch.testing.assert_close(got, fn(a, b, bias) * 2.0)
    finally:
        torch._dynamo.reset()
