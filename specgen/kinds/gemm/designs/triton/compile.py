"""The Triton GEMM design's compile hook: `triton.compile` of a rendered module's kernel for one target,
on a CPU machine, with the compiler's shared-memory figure beside the plan's, for the default config
and for each size-selected variant (each compiles a kernel of its own).

The kernel is specialized the way the JIT specializes the common case (16-byte aligned pointers, sizes
and strides multiples of 16); that fills Triton's on-disk cache, which the launcher's first call for
that specialization reuses. Imports triton: only `specgen compile` imports this module.
"""

from __future__ import annotations

import time
from types import ModuleType

from specgen.compile import CompileResult, compiler_message
from specgen.targets import TargetInfo


def _attrs(params: list[list[str]]) -> dict[tuple[int], list[list[object]]]:
    """tt.divisibility=16 on every pointer and every specialized integer: the JIT's aligned case."""
    return {(i,): [["tt.divisibility", 16]] for i, (_, ty, spec) in enumerate(params)
            if spec == "aligned" and (ty.startswith("*") or ty in ("i32", "i64"))}


def compile_module(module: ModuleType, target: TargetInfo) -> list[CompileResult]:
    """The default config and every size-selected variant (split-K ones included), each its own
    kernel (its constexprs, warps and stages): one result per config, the variants' labelled."""
    cc = target.compute_capability
    assert cc is not None
    meta = module.METADATA
    configs = [(None, module._CONSTEXPRS, module.CONFIGS[cc], meta["plan"][cc]["smem_bytes"], {})]
    for i, v in enumerate(meta.get("variants", ())):
        configs.append((i, module._VARIANT_CONSTEXPRS[i], module.VARIANT_CONFIGS[i][cc], v["plan"][cc]["smem_bytes"],
                        v.get("descriptors", {})))
    return [_compile(module, target, *c) for c in configs]


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
    start = time.perf_counter()
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", target.compute_capability, 32), options=dict(options))
    except Exception as e:  # the compiler's own message is the useful part
        return CompileResult(name, target.name, plan_smem, None, time.perf_counter() - start,
                             compiler_message(e), variant=variant)
    return CompileResult(name, target.name, plan_smem, compiled.metadata.shared, time.perf_counter() - start,
                         variant=variant)
