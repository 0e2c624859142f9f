"""The Triton GEMM design's compile hook: `triton.compile` of a rendered module's kernel for one target,
on a CPU machine, with the compiler's shared-memory figure beside the plan's, for the default config
and for each size-selected variant (each compiles a kernel of its own), then each kernel of a training
module's backward (`<kernel>[role]`, compile_backward.py; the grouped Triton design's modules too).

The kernel is specialized the way the JIT specializes the common case (16-byte aligned pointers, sizes
and strides multiples of 16); that fills Triton's on-disk cache, which the launcher's first call for
that specialization reuses. Imports triton: only `specgen compile` imports this module.

Registers and spills: Triton's `n_regs` / `n_spills` come from loading the binary on a GPU (the CUDA
driver), so here they are read off the compiled cubin (`compiled.asm["cubin"]`: the `.nv.info`
register count, and STL / LDL in its SASS through the nvdisasm Triton ships). A config that spills is
reported as failed, with the numbers (kinds/gemm/designs/cubin.py).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

from specgen.compile import CompileResult, compiler_message
from specgen.kinds.gemm.designs.cubin import read_cubin
from specgen.targets import TargetInfo


def _attrs(params: list[list[str]]) -> dict[tuple[int], list[list[object]]]:
    """tt.divisibility=16 on every pointer and every specialized integer: the JIT's aligned case."""
    return {(i,): [["tt.divisibility", 16]] for i, (_, ty, spec) in enumerate(params)
            if spec == "aligned" and (ty.startswith("*") or ty in ("i32", "i64"))}


def compile_module(module: ModuleType, target: TargetInfo, backward: bool = True, role: str = "") -> list[CompileResult]:
    """The default config and every size-selected variant (split-K ones included), each its own
    kernel (its constexprs, warps and stages): one result per config, the variants' labelled; then, with
    `backward`, each kernel of a training module's backward (`<kernel>[role]`: compile_backward.py). `role`:
    only that backward kernel (check's settle step of a companion's verdict)."""
    cc = target.compute_capability
    assert cc is not None
    if role:
        from specgen.kinds.gemm.designs.triton.compile_backward import compile_backward

        return compile_backward(module, target, timed_cubin, roles=(role,))
    meta = module.METADATA
    configs = [(None, module._CONSTEXPRS, module.CONFIGS[cc], meta["plan"][cc]["smem_bytes"], {})]
    for i, v in enumerate(meta.get("variants", ())):
        configs.append((i, module._VARIANT_CONSTEXPRS[i], module.VARIANT_CONFIGS[i][cc], v["plan"][cc]["smem_bytes"],
                        v.get("descriptors", {})))
    rows = [_compile(module, target, *c) for c in configs]
    if backward and hasattr(module, "BACKWARD_TILES"):  # a training module's backward kernels, `<kernel>[role]`
        from specgen.kinds.gemm.designs.triton.compile_backward import compile_backward

        rows += compile_backward(module, target, timed_cubin)
    return rows


def _compile(module: ModuleType, target: TargetInfo, variant: int | None, constexprs: dict, options: dict,
             plan_smem: int, descriptors: dict[str, str]) -> CompileResult:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = module._launcher.kernel
    meta = module.METADATA
    name, params = meta["kernel"], meta["parameters"]
    # the config's own constexpr values, with the GPU's fast math (the interpreter's exact forms are for CPUs)
    constexprs = {**constexprs, "FAST_MATH": True}
    signature = {n: descriptors.get(n, ty) for n, ty, _ in params}  # a variant's descriptors have its boxes
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=_attrs(params))
    return timed_cubin(name, target, plan_smem, variant,
                       lambda: triton.compile(src, target=GPUTarget("cuda", target.compute_capability, 32), options=dict(options)))


def timed_cubin(name: str, target: TargetInfo, plan_smem: int, variant: int | None, build) -> CompileResult:
    """`build()` (a triton.compile) timed, its SMEM beside the plan's, registers and spills read off its cubin."""
    start = time.perf_counter()
    try:
        compiled = build()
    except Exception as e:  # the compiler's own message is the useful part
        return CompileResult(name, target.name, plan_smem, None, time.perf_counter() - start,
                             compiler_message(e), variant=variant)
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="specgen-triton-") as folder:
        path = Path(folder) / f"{name}.cubin"
        path.write_bytes(compiled.asm["cubin"])
        try:
            read = read_cubin(path)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:  # no nvdisasm: no verdict on spills
            return CompileResult(name, target.name, plan_smem, compiled.metadata.shared, seconds, f"{e}"[:300],
                                 variant=variant)
    return CompileResult(name, target.name, plan_smem, compiled.metadata.shared, seconds, read.error, variant=variant,
                         registers=read.registers, spills=read.spills)
