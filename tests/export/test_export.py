"""`specgen compile --export` on the CPU, for both CuTe archs (cute:sm90 for sm_90a, cute:sm100 for sm_100a:
one export implementation, specgen/kinds/gemm/designs/cute_export/): every catalogue kernel exported through the
CuTe DSL's `export_to_c`, the C header's entry points (one per kernel, the spec's operands, alike on both
archs), the dispatch the launchers render, the host code compiled and linked with the CUDA toolkit from
the package index (`specgen[export]`; those tests skip only where a package of that extra is missing),
and the C entry's argument checks run (they refuse before any CUDA call, so no GPU is needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass")

from specgen.kinds.gemm.designs.cute_export import toolkit  # noqa: E402
from specgen.kinds.gemm.designs.cute_export.abi import c_kernel, render_files  # noqa: E402
from specgen.kinds.gemm.designs.cute_export.export import HOOK  # noqa: E402
from specgen.registry import design_for  # noqa: E402
from specgen.resolve import resolve  # noqa: E402
from specgen.spec.load import load_paths  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPECS = load_paths([ROOT / "specs"])
ARCHS = ["cute:sm90", "cute:sm100"]
FLAGS = {"cute:sm90": "sm_90a", "cute:sm100": "sm_100a"}
TOOLKIT = toolkit.find()
needs_toolkit = pytest.mark.skipif(TOOLKIT is None, reason="the CUDA toolkit extra: pip install 'specgen[export]'")
# one worker: the module-scoped export of the catalogue (a CLI compile of every CuTe config, ~20-50 s an arch) is built
# once, not once on each xdist worker its tests land on
pytestmark = pytest.mark.xdist_group("export")


def catalogue(target: str) -> list:
    """The catalogue's kernels on `target` whose design exports (the grouped kind's CuTe design does not yet)."""
    return [ls for ls in SPECS for t in ls.spec.targets if str(t) == target and design_for(ls.spec.kind, t).export_hook]


def kernel(name: str, target: str = "cute:sm90"):
    ls = next(ls for ls in catalogue(target) if ls.name == name)
    t = next(t for t in ls.spec.targets if str(t) == target)
    return c_kernel(design_for(ls.spec.kind, t).plan(ls, [t], {str(t): resolve(ls.spec, t)}))


def test_both_cute_designs_export_through_one_hook():
    for target in ARCHS:
        ls = catalogue(target)[0]
        assert design_for(ls.spec.kind, target).export_hook == HOOK


@pytest.fixture(scope="module", params=ARCHS)
def exported(request, tmp_path_factory) -> tuple[str, Path]:
    """The catalogue exported once per arch through the CLI (what a user runs)."""
    target = request.param
    out = tmp_path_factory.mktemp("export")
    run = subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(out), "--target", target],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(catalogue(target))} exported, 0 failed" in run.stdout
    return target, out


def test_every_catalogue_kernel_exports_each_config(exported):
    target, exported = exported
    assert len(catalogue(target)) >= 7
    manifest = json.loads((exported / "MANIFEST.json").read_text())
    assert {k["arch"] for k in manifest["kernels"]} == {FLAGS[target]}
    for ls in catalogue(target):
        k = kernel(ls.name, target)
        for tag, _ in k.configs:  # the DSL's own export: an object with the cubin and its header
            obj, header = exported / "cute" / f"{k.name}_{tag}.o", exported / "cute" / f"{k.name}_{tag}.h"
            assert obj.read_bytes()[:4] == b"\x7fELF"
            assert f"cute_dsl_{k.prefix(tag)}_wrapper" in header.read_text()
        assert (exported / "src" / f"{k.name}.cpp").is_file()
    assert (exported / "lib" / "libcuda_dialect_runtime_static.a").is_file()
    for name in ("CMakeLists.txt", "MANIFEST.json", "include/specgen_kernels.h"):
        assert (exported / name).is_file()
    assert manifest["generator"] == "specgen compile --export" and manifest["complete"] is True
    on_disk = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {"MANIFEST.json"}  # it owns every file, and left nothing else


def test_header_declares_one_function_per_kernel_with_the_spec_operands(exported):
    """The same functions and parameters on both archs: a program builds against either export."""
    target, exported = exported
    header = (exported / "include" / "specgen_kernels.h").read_text()
    assert f"compiled ahead of time for {FLAGS[target]}." in header
    declared = dict(re.findall(r"^int (specgen_\w+)\((.*)\);$", header, re.M))
    names = {ls.name for ls in catalogue(target)}
    assert set(declared) == {f"specgen_{n}" for n in names} | {f"specgen_{n}_load" for n in names}
    params = {k: [p.split()[-1].lstrip("*") for p in v.split(", ")] for k, v in declared.items()}
    assert params["specgen_gemm_bias_gelu_bf16"] == ["M", "N", "K", "a", "lda", "b", "ldb", "bias", "out", "ldout", "stream"]
    assert params["specgen_gemm_fp8_rowwise"] == ["M", "N", "K", "a", "lda", "b", "ldb", "scale_a", "scale_b", "out",
                                                 "ldout", "stream"]
    assert params["specgen_bmm_bf16"] == ["M", "N", "K", "batch", "a", "lda", "batch_stride_a", "b", "ldb",
                                         "batch_stride_b", "out", "ldout", "batch_stride_out", "stream"]
    assert "const void *a" in declared["specgen_gemm_bf16"] and "void *out" in declared["specgen_gemm_bf16"]
    assert "cudaStream_t stream" in declared["specgen_gemm_bf16"]
    residual = kernel("gemm_residual_bf16", target)
    matrix = next(o for o in residual.operands if o.role == "matrix")
    assert f"int64_t ld{matrix.name}" in declared["specgen_gemm_residual_bf16"]


def test_descriptors_follow_the_dsl_header_layout(exported):
    """Each tensor descriptor the launcher fills has the DSL header's dynamic shapes and strides."""
    _, exported = exported
    dsl = (exported / "cute" / "bmm_bf16_default.h").read_text()
    assert re.search(r"void \*data;\s+int32_t dynamic_shapes\[3\];\s+int64_t dynamic_strides\[2\];\s+\} "
                     r"specgen_bmm_bf16_default_Tensor_a_t", dsl)
    src = (exported / "src" / "bmm_bf16.cpp").read_text()
    assert "{ batch, M, K }, { batch_stride_a, lda }" in src and "{ batch, K, N }, { batch_stride_b, ldb }" in src
    fp8 = (exported / "cute" / "gemm_fp8_rowwise_default.h").read_text()
    assert re.search(r"int32_t dynamic_shapes\[1\];\s+\} specgen_gemm_fp8_rowwise_default_Tensor_scale_a_t", fp8)


@pytest.mark.parametrize(("target", "variants", "clusters"), [
    ("cute:sm90", 5, ["max_clusters(1)"] + ["max_clusters(2)"] * 5),  # M <= 16 unclustered, then 2x1 clusters
    ("cute:sm100", 1, ["max_clusters(1)", "max_clusters(2)"]),  # M <= 128: one CTA; the default a 2-CTA pair
])
def test_launcher_tries_variants_in_order_then_the_default(target, variants, clusters):
    """As the module's `_run`: each variant whose bounds hold, else the default, and the persistent grid
    capped at SMs / CTAs per cluster (a 2-CTA pair is a cluster of two, as its `gemm_host` launches it)."""
    k = kernel("gemm_fp8_rowwise", target)
    src = render_files([k], "4.8.1")["src/gemm_fp8_rowwise.cpp"]
    bounds = [" && ".join(f"{'K_pick' if d == 'K' else d} <= {n}" for d, n in c.bounds) for _, c in k.variants]
    at = [src.index(f"if ({b}) {{") for b in bounds] + [src.index("    else {\n        specgen_gemm_fp8_rowwise_default")]
    assert at == sorted(at) and len(k.variants) == variants
    assert re.findall(r"int clusters = (max_clusters\(\d\))", src) == clusters
    assert "SPECGEN_ERROR_MISALIGNED" in src and "cudaMallocAsync" in src  # the guards and the empty-K zeros
    # out's row extent refused off 16 bytes (a TMA store would write the caller's columns past N)
    assert "N * 2 % 16 != 0" in src and "K * 1 % 16 != 0" not in src


def test_header_names_a_two_cta_config_by_its_pair():
    k = kernel("gemm_fp8_rowwise", "cute:sm100")
    header = render_files([k], "4.8.1")["include/specgen_kernels.h"]
    assert "configs: default 128x128x128 2-CTA (256x128 MMA); variant0 (M <= 128) 128x128x128\n" in header


@pytest.fixture(scope="module")
def host_objects(exported, tmp_path_factory) -> tuple[Path, list[str]]:
    """The export's launchers compiled with -Werror against the pip toolkit, once per arch."""
    _, exported = exported
    assert TOOLKIT is not None
    out = tmp_path_factory.mktemp("objects")
    objects = [str(compile_cxx(exported, src, out)) for src in sorted((exported / "src").glob("*.cpp"))]
    return exported, objects


def compile_cxx(exported: Path, src: Path, out: Path) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx is not None, "a host C++ compiler"
    assert TOOLKIT is not None
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{exported / 'include'}", "-isystem",
             str(exported / "cute"), *TOOLKIT.cxx_flags()]
    obj = out / f"{src.stem}.o"
    run = subprocess.run([cxx, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return obj


def link(exported: Path, objects: list[str], exe: Path) -> None:
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx is not None and TOOLKIT is not None
    dsl = [str(p) for p in sorted((exported / "cute").glob("*.o"))]
    run = subprocess.run([cxx, *objects, *dsl, str(exported / "lib" / "libcuda_dialect_runtime_static.a"),
                          str(TOOLKIT.cudart), "-ldl", "-lpthread", "-lrt", "-o", str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr  # every symbol the DSL's objects and the launchers need resolves


@needs_toolkit
def test_host_code_compiles_with_the_pip_toolkit(exported, host_objects, tmp_path):
    target, _ = exported
    exported, objects = host_objects
    example = compile_cxx(exported, ROOT / "examples" / "cute_export" / "main.cpp", tmp_path)
    exe = tmp_path / "example"
    link(exported, [*objects, str(example)], exe)
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True).stdout
    assert all(f" T specgen_{ls.name}\n" in symbols for ls in catalogue(target))


@needs_toolkit
def test_c_entry_refuses_bad_arguments_without_a_gpu(host_objects, tmp_path):
    """Negative sizes, null pointers, short leading strides, misaligned bases and strides: refused with
    -1 / -2 before the entry loads a kernel; an empty M, N or batch returns 0 (tests/export/entry_checks.cpp)."""
    exported, objects = host_objects
    checks = compile_cxx(exported, Path(__file__).with_name("entry_checks.cpp"), tmp_path)
    exe = tmp_path / "entry_checks"
    link(exported, [*objects, str(checks)], exe)
    env = os.environ | {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(TOOLKIT.cudart.parent),
                                                                          os.environ.get("LD_LIBRARY_PATH")]))}
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0 and "all refused" in run.stdout, run.stdout + run.stderr


@needs_toolkit
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_builds_the_library_and_the_example(exported, tmp_path):
    _, exported = exported
    toolkit.cmake_build(ROOT / "examples" / "cute_export", tmp_path, (f"-DSPECGEN_EXPORT_DIR={exported}",))
    assert (tmp_path / "specgen_example").is_file()
    assert (tmp_path / "specgen_kernels" / "libspecgen_kernels_shared.so").is_file()


def test_each_arch_exports_into_its_own_folder_when_one_run_exports_both(tmp_path):
    """The C functions are named for the kernel alone, so two archs never share a folder: DIR/sm90, DIR/sm100. (One
    kernel of one config an arch, rendered here: the catalogue's every config is the fixture's.)"""
    spec = tmp_path / "one.toml"
    spec.write_text('[[kernels]]\nname = "one_bf16"\nkind = "gemm"\na = { dtype = "bf16", major = "k" }\n'
                    'b = { dtype = "bf16", major = "k" }\nout = { dtype = "bf16" }\ntile = { m = 128, n = 128, k = 64 }\n'
                    'targets = ["cute:sm90", "cute:sm100"]\n')
    rendered, out = tmp_path / "generated", tmp_path / "export"
    for args in (["render", str(spec), "--out", str(rendered), "--no-compile"],
                 ["compile", str(spec), "--out", str(rendered), "--export", str(out), "--target", "cute:sm90",
                  "--target", "cute:sm100"]):
        run = subprocess.run([sys.executable, "-m", "specgen", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["sm100", "sm90"]
    for arch, flag in (("sm90", "sm_90a"), ("sm100", "sm_100a")):
        header = (out / arch / "include" / "specgen_kernels.h").read_text()
        assert f"compiled ahead of time for {flag}." in header and "int specgen_one_bf16(" in header
        assert json.loads((out / arch / "MANIFEST.json").read_text())["kernels"][0]["arch"] == flag


def test_export_refuses_other_backends(tmp_path):
    run = subprocess.run([sys.executable, "-m", "specgen", "compile", "--export", str(tmp_path), "--target", "triton:sm90"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "no design exports triton:sm90 for C++ programs" in run.stderr
