"""The Triton GEMM design's compile hook: `triton.compile` of a rendered module's kernel for one target,
on a CPU machine, with the compiler's shared-memory figure beside the plan's.

The kernel is specialized the way the JIT specializes the common case (16-byte aligned pointers, sizes
and strides multiples of 16); that fills Triton's on-disk cache, which the launcher's first call for
that specialization reuses. Imports triton: only `specgen compile` imports this module.
"""

from __future__ import annotations

import time
from types import ModuleType

from specgen.compile import CompileResult
from specgen.targets import TargetInfo


def _attrs(signature: dict[str, str], no_specialize: set[str]) -> dict[tuple[int], list[list[object]]]:
    """tt.divisibility=16 on every pointer and every specialized integer: the JIT's aligned case."""
    out = {}
    for i, (name, ty) in enumerate(signature.items()):
        if ty.startswith("*") or (ty in ("i32", "i64") and name not in no_specialize):
            out[(i,)] = [["tt.divisibility", 16]]
    return out


def compile_module(module: ModuleType, target: TargetInfo) -> CompileResult:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = module._launcher.kernel
    cc = target.compute_capability
    assert cc is not None
    name = module.SPEC["name"]
    plan_smem = module.PLAN_SMEM[cc]
    constexprs = {"BLOCK_M": module.BLOCK_M, "BLOCK_N": module.BLOCK_N, "BLOCK_K": module.BLOCK_K, "GROUP_M": module.GROUP_M,
                  "FAST_MATH": True}
    no_specialize = {kernel.arg_names[i] if isinstance(i, int) else i for i in kernel.do_not_specialize}
    src = ASTSource(fn=kernel, signature=dict(module.SIGNATURE), constexprs=constexprs,
                    attrs=_attrs(module.SIGNATURE, no_specialize))
    start = time.perf_counter()
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=dict(module.CONFIGS[cc]))
    except Exception as e:  # the compiler's own message is the useful part
        return CompileResult(name, target.name, plan_smem, None, time.perf_counter() - start,
                             f"{type(e).__name__}: {e}".splitlines()[0][:300])
    return CompileResult(name, target.name, plan_smem, compiled.metadata.shared, time.perf_counter() - start)
