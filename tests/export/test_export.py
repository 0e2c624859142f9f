"""`specgen compile --export` on the CPU: every cute:sm90 catalogue kernel exported through the CuTe DSL's
`export_to_c`, the C header's entry points (one per kernel, the spec's operands), the dispatch the
launchers render, and the host code compiled and linked with the CUDA toolkit from the package index
(`specgen[export]`; those tests skip only where a package of that extra is missing)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass")

from specgen.designs.gemm_cute_sm90.design import CuteSm90Gemm, serves  # noqa: E402
from specgen.designs.gemm_cute_sm90.export_abi import c_kernel, render_files  # noqa: E402
from specgen.export import toolkit  # noqa: E402
from specgen.resolve import resolve  # noqa: E402
from specgen.spec.load import load_paths  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = [ls for ls in load_paths([ROOT / "specs"]) if any(serves(t) for t in ls.spec.targets)]
TOOLKIT = toolkit.find()
needs_toolkit = pytest.mark.skipif(TOOLKIT is None, reason="the CUDA toolkit extra: pip install 'specgen[export]'")


def kernel(name: str):
    ls = next(ls for ls in CATALOGUE if ls.name == name)
    t = next(t for t in ls.spec.targets if serves(t))
    return c_kernel(CuteSm90Gemm().plan(ls, resolve(ls.spec, t)))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """The catalogue exported once through the CLI (what a user runs)."""
    out = tmp_path_factory.mktemp("export")
    run = subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(out), "--target", "cute:sm90"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(CATALOGUE)} exported, 0 failed" in run.stdout
    return out


def test_every_cute_sm90_kernel_exports_each_config(exported):
    assert len(CATALOGUE) >= 7
    for ls in CATALOGUE:
        k = kernel(ls.name)
        for tag, _ in k.configs:  # the DSL's own export: an object with the cubin and its header
            obj, header = exported / "cute" / f"{k.name}_{tag}.o", exported / "cute" / f"{k.name}_{tag}.h"
            assert obj.read_bytes()[:4] == b"\x7fELF"
            assert f"cute_dsl_{k.prefix(tag)}_wrapper" in header.read_text()
        assert (exported / "src" / f"{k.name}.cpp").is_file()
    assert (exported / "lib" / "libcuda_dialect_runtime_static.a").is_file()
    for name in ("CMakeLists.txt", "MANIFEST.json", "include/specgen_kernels.h"):
        assert (exported / name).is_file()


def test_header_declares_one_function_per_kernel_with_the_spec_operands(exported):
    header = (exported / "include" / "specgen_kernels.h").read_text()
    declared = dict(re.findall(r"^int (specgen_\w+)\((.*)\);$", header, re.M))
    names = {ls.name for ls in CATALOGUE}
    assert set(declared) == {f"specgen_{n}" for n in names} | {f"specgen_{n}_load" for n in names}
    params = {k: [p.split()[-1].lstrip("*") for p in v.split(", ")] for k, v in declared.items()}
    assert params["specgen_gemm_bias_gelu_bf16"] == ["M", "N", "K", "a", "lda", "b", "ldb", "bias", "out", "ldout", "stream"]
    assert params["specgen_gemm_fp8_rowwise"] == ["M", "N", "K", "a", "lda", "b", "ldb", "scale_a", "scale_b", "out",
                                                 "ldout", "stream"]
    assert params["specgen_bmm_bf16"] == ["M", "N", "K", "batch", "a", "lda", "batch_stride_a", "b", "ldb",
                                         "batch_stride_b", "out", "ldout", "batch_stride_out", "stream"]
    assert "const void *a" in declared["specgen_gemm_bf16"] and "void *out" in declared["specgen_gemm_bf16"]
    assert "cudaStream_t stream" in declared["specgen_gemm_bf16"]
    residual = kernel("gemm_residual_bf16")
    matrix = next(o for o in residual.operands if o.role == "matrix")
    assert f"int64_t ld{matrix.name}" in declared["specgen_gemm_residual_bf16"]


def test_descriptors_follow_the_dsl_header_layout(exported):
    """Each tensor descriptor the launcher fills has the DSL header's dynamic shapes and strides."""
    dsl = (exported / "cute" / "bmm_bf16_default.h").read_text()
    assert re.search(r"void \*data;\s+int32_t dynamic_shapes\[3\];\s+int64_t dynamic_strides\[2\];\s+\} "
                     r"specgen_bmm_bf16_default_Tensor_a_t", dsl)
    src = (exported / "src" / "bmm_bf16.cpp").read_text()
    assert "{ batch, M, K }, { batch_stride_a, lda }" in src and "{ batch, K, N }, { batch_stride_b, ldb }" in src
    fp8 = (exported / "cute" / "gemm_fp8_rowwise_default.h").read_text()
    assert re.search(r"int32_t dynamic_shapes\[1\];\s+\} specgen_gemm_fp8_rowwise_default_Tensor_scale_a_t", fp8)


def test_launcher_tries_variants_in_order_then_the_default():
    k = kernel("gemm_fp8_rowwise")
    src = render_files([k], "4.8.1")["src/gemm_fp8_rowwise.cpp"]
    bounds = [" && ".join(f"{'K_pick' if d == 'K' else d} <= {n}" for d, n in c.bounds) for _, c in k.variants]
    at = [src.index(f"if ({b}) {{") for b in bounds] + [src.index("    else {\n        specgen_gemm_fp8_rowwise_default")]
    assert at == sorted(at) and len(k.variants) == 2
    assert "max_clusters(2)" in src  # the 2x1 cluster caps the persistent grid at SMs / 2
    assert "SPECGEN_ERROR_MISALIGNED" in src and "cudaMallocAsync" in src  # the guards and the empty-K zeros


@needs_toolkit
def test_host_code_compiles_with_the_pip_toolkit(exported, tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx is not None, "a host C++ compiler"
    assert TOOLKIT is not None
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{exported / 'include'}", "-isystem",
             str(exported / "cute"), *TOOLKIT.cxx_flags()]
    objects = []
    for src in sorted((exported / "src").glob("*.cpp")) + [ROOT / "examples" / "cute_export" / "main.cpp"]:
        obj = tmp_path / f"{src.stem}.o"
        run = subprocess.run([cxx, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        objects.append(str(obj))
    dsl = [str(p) for p in sorted((exported / "cute").glob("*.o"))]
    exe = tmp_path / "example"
    link = [cxx, *objects, *dsl, str(exported / "lib" / "libcuda_dialect_runtime_static.a"), str(TOOLKIT.cudart),
            "-ldl", "-lpthread", "-lrt", "-o", str(exe)]
    run = subprocess.run(link, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr  # every symbol the DSL's objects and the launchers need resolves
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True).stdout
    assert all(f" T specgen_{ls.name}\n" in symbols for ls in CATALOGUE)


@needs_toolkit
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_builds_the_library_and_the_example(exported, tmp_path):
    toolkit.cmake_build(ROOT / "examples" / "cute_export", tmp_path, (f"-DSPECGEN_EXPORT_DIR={exported}",))
    assert (tmp_path / "specgen_example").is_file()
    assert (tmp_path / "specgen_kernels" / "libspecgen_kernels_shared.so").is_file()


def test_export_refuses_other_backends(tmp_path):
    run = subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(tmp_path), "--target", "triton:sm90"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "no design exports triton:sm90 for C++ programs" in run.stderr
