"""The CUDA toolkit an exported library builds with, from the package index (`pip install
'specgen[export]'`: nvidia-cuda-runtime-cu12 for the runtime headers and libcudart, nvidia-cuda-nvcc-cu12
for `crt/host_config.h` that cuda_runtime.h includes, nvidia-cuda-cccl-cu12 for `nv/target` that the
DSL's headers reach through cuda_fp16.h), or from `$SPECGEN_CUDA_TOOLKIT` (folders holding `nvidia/`).
"""

from __future__ import annotations

import os
import site
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGES = {"cuda_runtime": "include/cuda_runtime_api.h", "cuda_nvcc": "include/crt/host_config.h",
            "cuda_cccl": "include/nv/target"}


@dataclass(frozen=True)
class Toolkit:
    include_dirs: tuple[Path, ...]
    cudart: Path  # libcudart.so.12

    def cxx_flags(self) -> list[str]:
        return [f"-I{d}" for d in self.include_dirs]


def _roots() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("SPECGEN_CUDA_TOOLKIT", "").split(os.pathsep) if p]
    paths = [*extra, *(Path(p) for p in sys.path if p), *(Path(p) for p in site.getsitepackages())]
    return list(dict.fromkeys(paths))


def find() -> Toolkit | None:
    """The pip-installed CUDA 12 headers and runtime, or None when a package of the extra is missing."""
    found: dict[str, Path] = {}
    for root in _roots():
        for pkg, probe in PACKAGES.items():
            base = root / "nvidia" / pkg
            if pkg not in found and (base / probe).exists():
                found[pkg] = base
    if len(found) < len(PACKAGES):
        return None
    cudart = next(iter(sorted((found["cuda_runtime"] / "lib").glob("libcudart.so.12*"))), None)
    if cudart is None:
        return None
    return Toolkit(tuple(found[p] / "include" for p in PACKAGES), cudart)


def dsl_runtime_library() -> Path:
    """libcuda_dialect_runtime_static.a: the CuTe DSL's CUDA-runtime shim its exported objects call."""
    from cutlass.cute.export.aot_config import get_libdir  # type: ignore[import-not-found]

    return Path(get_libdir()) / "libcuda_dialect_runtime_static.a"


def cmake_build(source: Path, build: Path, extra: tuple[str, ...] = ()) -> None:
    """Configure and build a CMake project over an export (the export folder itself, or a program that
    adds it): with the pip toolkit where `specgen[export]` is installed, else the system's CUDAToolkit."""
    import subprocess

    tk = find()
    cuda = [f"-DSPECGEN_CUDA_INCLUDE_DIRS={';'.join(map(str, tk.include_dirs))}", f"-DSPECGEN_CUDART={tk.cudart}"] if tk else []
    for cmd in (["cmake", "-S", str(source), "-B", str(build), "-DSPECGEN_SHARED=ON", *cuda, *extra],
                ["cmake", "--build", str(build), "-j", "4"]):
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
