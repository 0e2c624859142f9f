"""`specgen compile --export DIR --target cute:sm90|cute:sm100`: the export hook of every CuTe design (the
designs name it as their `export_hook`; each target's design and plan come from the registry). Each
catalogue kernel's configs compiled by the CuTe DSL for the module's arch (sm_90a, sm_100a) and written
with its own `export_to_c` (an object holding the host code and the embedded cubin, and a header
declaring its tensor descriptors and wrapper), plus what specgen writes around them (abi.py): one C
entry per kernel, a CMake file, the DSL's runtime shim, a manifest.

One arch per export folder: the C functions are named for the kernel alone (`specgen_<kernel>`), so that
a program builds against either arch's export unchanged. Targets of one arch write into DIR; where one
run exports several archs (no `--target`), each arch's export is a complete folder of its own, DIR/<arch>
(DIR/sm90, DIR/sm100).

What the DSL's export does: TMA descriptors (built by its host code), the grid and the cluster launch
(cudaLaunchKernelEx with the cluster dims; a 2-CTA pair of sm100 is two CTAs of that cluster, as in the
module's `gemm_host`), SMEM attributes, loading the cubin on every device. What it cannot, written here
alike for both archs (their modules share the torch launcher `_run`, templates/cute/host.jinja): the
spec's operand-level signature, the size-selected config, the SM count that caps a persistent grid, the
argument checks, and the zeros standing in for an empty K.

Imports cutlass and the rendered module (torch): never imported by check/render.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from specgen.compile import MissingModule, load_rendered
from specgen.designs.base import DesignBase
from specgen.designs.cute_export.abi import CKernel, c_kernel, render_files
from specgen.export.toolkit import dsl_runtime_library
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target

HOOK = f"{__name__}:export"  # the designs' `export_hook`


@dataclass(frozen=True)
class Exported:
    kernel: str
    target: str
    configs: int
    seconds: float
    error: str = ""


def export_targets(ls: LoadedSpec, wanted: set[str]) -> list[tuple[Target, DesignBase]]:
    """The spec's wanted targets whose design exports through this hook, each with its design."""
    out = []
    for t in ls.spec.targets:
        design = design_for(ls.spec.kind, t)
        if design is not None and design.export_hook == HOOK and (not wanted or str(t) in wanted):
            out.append((t, design))
    return out


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
    """Export every rendered CuTe kernel of `specs` (the wanted targets) into `out`, or into `out/<arch>`
    for each arch where they span several; an arch's C files are written only when every kernel of it
    exported (a failed kernel is reported, the others' objects stay)."""
    by_arch: dict[str, list[tuple[ModuleType, Target, CKernel]]] = {}
    for ls in specs:
        for t, design in export_targets(ls, wanted):
            path = rendered / next(iter(design.modules(ls.spec, [t])))
            if not path.is_file():
                raise MissingModule(f"{path} is missing: run `specgen render` first")
            module = load_rendered(path)
            if module.METADATA.get("spec_hash") != ls.spec_hash:
                raise MissingModule(f"{path} was rendered from another version of {ls.file}: run `specgen render` first")
            kernel = c_kernel(design.plan(ls, resolve(ls.spec, t)))
            by_arch.setdefault(kernel.target_arch, []).append((module, t, kernel))
    results: list[Exported] = []
    for arch, kernels in by_arch.items():
        results += export_arch(kernels, out / arch if len(by_arch) > 1 else out)
    return results


def export_arch(kernels: list[tuple[ModuleType, Target, CKernel]], out: Path) -> list[Exported]:
    """Export the kernels of one arch (each with its rendered module) into `out`."""
    cute_dir = out / "cute"
    cute_dir.mkdir(parents=True, exist_ok=True)
    done, results = [], []
    for module, t, kernel in kernels:
        start = time.perf_counter()
        try:
            for tag, config in kernel.configs:
                compile_config(module, kernel, tag, config.index, cute_dir)
        except Exception as e:  # the DSL's own message is the useful part
            first = next((ln for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()), type(e).__name__)
            results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start, first[:300]))
            continue
        done.append(kernel)
        results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start))
    if done and not any(r.error for r in results):
        write(done, out)
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
