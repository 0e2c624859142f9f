"""The C++ export on a Hopper GPU: `specgen compile --export` of the catalogue, built with CMake into a
shared library, called through ctypes with torch's tensors and stream, bit-for-bit against the Python
(torch) launcher of the same module on M = 1, tails, K = 0 and every size-selected config; the error
codes for misaligned and invalid arguments; the example program's own check.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import ctypes
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
# (33, 2056, 4104): gemm_bf16's M <= 64, N <= 4096 variant splits K across its cluster
SHAPES = [(1, 256, 512), (200, 144, 96), (517, 264, 1040), (1024, 1024, 1024), (3000, 2048, 2064), (64, 4112, 0),
          (33, 2056, 4104)]
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from specgen.kinds.gemm.designs.cute_export import toolkit

    out = tmp_path_factory.mktemp("export")
    run = subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(out / "kernels"),
                          "--target", "cute:sm90"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    toolkit.cmake_build(ROOT / "examples" / "cute_export", out / "build", (f"-DSPECGEN_EXPORT_DIR={out / 'kernels'}",))
    return out


@pytest.fixture(scope="module")
def lib(built):
    return ctypes.CDLL(str(built / "build" / "specgen_kernels" / "libspecgen_kernels_shared.so"))


def operands(name: str, M: int, N: int, K: int, batch: int = 0):
    """The module's spec operands as torch tensors (A (M, K), B (K, N) in their major modes)."""
    mod = importlib.import_module(f"generated.cute.{name}")
    spec = mod.SPEC
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    lead = (batch,) if batch else ()

    def mat(rows, cols, dtype, contiguous_rows):
        t = torch.randn(*lead, cols, rows, device="cuda", generator=g) if contiguous_rows else \
            torch.randn(*lead, rows, cols, device="cuda", generator=g)
        t = (t / 4).to(TORCH[dtype])
        return t.transpose(-1, -2) if contiguous_rows else t

    a = mat(M, K, spec["a"]["dtype"], spec["a"]["major"] != "k")
    b = mat(K, N, spec["b"]["dtype"], spec["b"]["major"] == "k")
    extra = []
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            extra.append(torch.randn(M if op["along"] == "m" else N, device="cuda", generator=g).to(TORCH[op["dtype"]]))
        elif op["op"] == "residual":
            extra.append(torch.randn(*lead, M, N, device="cuda", generator=g).to(TORCH[op["dtype"]]))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            extra += [torch.rand(M, device="cuda", generator=g), torch.rand(N, device="cuda", generator=g)]
        elif op["op"] == "scale" and op.get("value") is None:
            extra.append(0.75)
    return mod, a, b, extra, TORCH[spec["out"]["dtype"]]


def c_args(a, b, extra, out, M, N, K, batch):
    """The exported function's arguments, in the header's order."""
    def mat(t, contiguous_rows):
        ld = t.stride(-1) if contiguous_rows else t.stride(-2)
        return [ctypes.c_void_p(t.data_ptr()), ctypes.c_int64(ld)] + ([ctypes.c_int64(t.stride(0))] if batch else [])

    args = [ctypes.c_int32(M), ctypes.c_int32(N), ctypes.c_int32(K)] + ([ctypes.c_int32(batch)] if batch else [])
    args += mat(a, a.stride(-2) == 1) + mat(b, b.stride(-2) == 1)
    for x in extra:
        if isinstance(x, float):
            args.append(ctypes.c_float(x))
        elif x.dim() == 1:
            args.append(ctypes.c_void_p(x.data_ptr()))
        else:
            args += mat(x, False)
    args += mat(out, False)
    return args + [ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)]


NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "gemm_fp8_rowwise",
         "gemm_residual_bf16", "bmm_bf16"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_exported_equals_the_python_launcher(lib, name, shape):
    M, N, K = shape
    batch = 3 if name.startswith("bmm") else 0
    mod, a, b, extra, out_dtype = operands(name, M, N, K, batch)
    expected = getattr(mod, name)(a, b, *extra)
    out = torch.full_like(expected, float("nan"))
    rc = getattr(lib, f"specgen_{name}")(*c_args(a, b, extra, out, M, N, K, batch))
    torch.cuda.synchronize()
    if K > 0 and any(t.stride(-1 if t.stride(-2) == 1 else -2) * t.element_size() % 16 for t in (a, b)):
        # a leading dimension TMA cannot stride (here: a column-major A with M = 1): the Python launcher
        # copies the operand, the C entry refuses it and says so (README: CuTe kernels from C++)
        assert rc == -2 and torch.isnan(out.float()).all()
        return
    assert rc == 0
    assert torch.equal(out.view(torch.uint8), expected.view(torch.uint8)), f"{name} {shape}: not bit-for-bit"


def test_error_codes(lib):
    mod, a, b, extra, out_dtype = operands("gemm_bf16", 64, 128, 64)
    out = torch.empty(64, 128, device="cuda", dtype=out_dtype)
    args = c_args(a, b, extra, out, 64, 128, 64, 0)
    fn = lib.specgen_gemm_bf16
    assert fn(*args) == 0
    odd = list(args)
    odd[3] = ctypes.c_void_p(a.data_ptr() + 2)  # a base off 16 bytes: the Python launcher copies, C refuses
    assert fn(*odd) == -2
    short = list(args)
    short[4] = ctypes.c_int64(8)  # lda below K
    assert fn(*short) == -1
    assert fn(ctypes.c_int32(-1), *args[1:]) == -1


def test_example_program_runs(built):
    run = subprocess.run([str(built / "build" / "specgen_example"), "256", "512", "128"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "first result" in run.stdout
