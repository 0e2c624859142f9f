"""The Triton GEMM design's compile hook: `triton.compile` of a rendered module's kernel for one target,
on a CPU machine, with the compiler's shared-memory figure beside the plan's.

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


def compile_module(module: ModuleType, target: TargetInfo) -> CompileResult:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = module._launcher.kernel
    cc = target.compute_capability
    assert cc is not None
    meta = module.METADATA
    name, plan_smem, params = meta["kernel"], meta["plan"][cc]["smem_bytes"], meta["parameters"]
    # the module's own constexpr values, with the GPU's fast math (the interpreter's exact forms are for CPUs)
    constexprs = {**module._CONSTEXPRS, "FAST_MATH": True}
    src = ASTSource(fn=kernel, signature={n: ty for n, ty, _ in params}, constexprs=constexprs, attrs=_attrs(params))
    start = time.perf_counter()
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=dict(module.CONFIGS[cc]))
    except Exception as e:  # the compiler's own message is the useful part
        return CompileResult(name, target.name, plan_smem, None, time.perf_counter() - start,
                             compiler_message(e))
    return CompileResult(name, target.name, plan_smem, compiled.metadata.shared, time.perf_counter() - start)
