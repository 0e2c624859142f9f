"""`specgen compile --export DIR --target cute:sm90`: each catalogue kernel's configs compiled by the CuTe
DSL and written with its own `export_to_c` (an object holding the host code and the embedded cubin, and
a header declaring its tensor descriptors and wrapper), plus what specgen writes around them
(export_abi.py): one C entry per kernel, a CMake file, the DSL's runtime shim, a manifest.

What the DSL's export does: TMA descriptors (built by its host code), the cluster launch
(cudaLaunchKernelEx with the cluster dims), SMEM attributes, loading the cubin on every device. What it
cannot, written here: the spec's operand-level signature, the size-selected config, the SM count that
caps a persistent grid, the argument checks, and the zeros standing in for an empty K.

Imports cutlass and the rendered module (torch): never imported by check/render.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from specgen.compile import MissingModule, load_rendered
from specgen.designs.gemm_cute_sm90.design import CuteSm90Gemm, serves
from specgen.designs.gemm_cute_sm90.export_abi import CKernel, c_kernel, render_files
from specgen.export.toolkit import dsl_runtime_library
from specgen.resolve import resolve
from specgen.spec.load import LoadedSpec


@dataclass(frozen=True)
class Exported:
    kernel: str
    target: str
    configs: int
    seconds: float
    error: str = ""


def export_targets(ls: LoadedSpec, wanted: set[str]) -> list:
    return [t for t in ls.spec.targets if serves(t) and (not wanted or str(t) in wanted)]


def compile_config(module, kernel: CKernel, tag: str, variant: int | None, cute_dir: Path) -> None:
    """cute.compile of one config of the module's `_export_host` over its fake tensors (no GPU) with
    the caller's stream, then the DSL's C export: cute_dir/<kernel>_<tag>.h and .o."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream

    from specgen.runtime.cute import compile_options, dsl_arch

    *tensors, max_clusters, _variant, _stream = module._fake_args(variant)
    with dsl_arch(module.ARCH):
        compiled = cute.compile(module._export_host, *tensors, max_clusters, make_fake_stream(), variant,
                                options=compile_options(module.ARCH, tvm_ffi=False))
    compiled.export_to_c(str(cute_dir), f"{kernel.name}_{tag}", function_prefix=kernel.prefix(tag))


def export(specs: list[LoadedSpec], rendered: Path, out: Path, wanted: set[str]) -> list[Exported]:
    """Export every rendered CuTe sm90 kernel of `specs` into `out`; the C files are written only when
    every kernel exported (a failed kernel is reported, the others' objects stay)."""
    design = CuteSm90Gemm()
    cute_dir = out / "cute"
    cute_dir.mkdir(parents=True, exist_ok=True)
    kernels, results = [], []
    for ls in specs:
        for t in export_targets(ls, wanted):
            path = rendered / next(iter(design.modules(ls.spec, [t])))
            if not path.is_file():
                raise MissingModule(f"{path} is missing: run `specgen render` first")
            module = load_rendered(path)
            if module.METADATA.get("spec_hash") != ls.spec_hash:
                raise MissingModule(f"{path} was rendered from another version of {ls.file}: run `specgen render` first")
            kernel = c_kernel(design.plan(ls, resolve(ls.spec, t)))
            start = time.perf_counter()
            try:
                for tag, config in kernel.configs:
                    compile_config(module, kernel, tag, config.index, cute_dir)
            except Exception as e:  # the DSL's own message is the useful part
                first = next((ln for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()), type(e).__name__)
                results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start, first[:300]))
                continue
            kernels.append(kernel)
            results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start))
    if kernels and not any(r.error for r in results):
        write(kernels, out)
    return results


def write(kernels: list[CKernel], out: Path) -> None:
    from specgen.runtime.cute import cutlass_version

    version = cutlass_version()
    for rel, text in render_files(kernels, version).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    (out / "lib").mkdir(exist_ok=True)
    shutil.copyfile(dsl_runtime_library(), out / "lib" / "libcuda_dialect_runtime_static.a")
    manifest = {"nvidia_cutlass_dsl": version, "kernels": [
        {"kernel": k.name, "function": k.function, "arch": k.arch,
         "parameters": [[c, n] for c, n in k.params],
         "configs": [{"tag": tag, "when": dict(c.bounds), "symbol_prefix": k.prefix(tag),
                      "object": f"cute/{k.name}_{tag}.o", "header": f"cute/{k.name}_{tag}.h"} for tag, c in k.configs]}
        for k in kernels]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
