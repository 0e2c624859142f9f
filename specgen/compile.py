"""`specgen compile`: compile rendered Triton modules ahead of time, with no GPU.

For each module and each of its Triton targets, `triton.compile` runs on the kernel source for a
`GPUTarget` of that arch, with the argument types the module declares (SIGNATURE) specialized the
way the JIT specializes the common case (16-byte aligned pointers, sizes and strides multiples of
16). That fills Triton's on-disk cache, which the launcher's first call for that specialization
reuses, and gives the compiler's shared-memory figure to set beside the plan's estimate.

Imports triton (and the generated modules, which import torch): never imported by check/render.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ARCH_CC = {"sm90": 90, "sm100": 100}


@dataclass(frozen=True)
class CompileResult:
    kernel: str
    target: str
    plan_smem: int
    compiler_smem: int | None
    seconds: float
    error: str = ""

    @property
    def ratio(self) -> float | None:
        return None if not self.compiler_smem else self.plan_smem / self.compiler_smem


def _attrs(signature: dict[str, str], no_specialize: set[str]) -> dict[tuple[int], list[list[object]]]:
    """tt.divisibility=16 on every pointer and every specialized integer: the JIT's aligned case."""
    out = {}
    for i, (name, ty) in enumerate(signature.items()):
        if ty.startswith("*") or (ty in ("i32", "i64") and name not in no_specialize):
            out[(i,)] = [["tt.divisibility", 16]]
    return out


def compiler_message(e: BaseException) -> str:
    """One line from a compile failure: Triton's CompilationError reads "at 10:19:", the source lines,
    a caret, then what went wrong; keep the position and what went wrong (or the cause's message)."""
    lines = [line.rstrip() for line in str(e).splitlines()]
    caret = max((i for i, line in enumerate(lines) if line.strip() == "^"), default=0)
    detail = " ".join(line.strip() for line in lines[caret + 1 if caret else 1:] if line.strip())
    if not detail and e.__cause__ is not None:
        detail = f"{type(e.__cause__).__name__}: {e.__cause__}".splitlines()[0]
    head = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip()
    return f"{head} {detail}".strip()[:600]


def compile_module(module: ModuleType, arch: str) -> CompileResult:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    launcher = module._launcher
    kernel = launcher.kernel
    cc = ARCH_CC[arch]
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
        return CompileResult(name, f"triton:{arch}", plan_smem, None, time.perf_counter() - start,
                             compiler_message(e))
    return CompileResult(name, f"triton:{arch}", plan_smem, compiled.metadata.shared, time.perf_counter() - start)


def import_rendered(path: Path) -> ModuleType:
    """Import a rendered module from its file (any --out folder, importable as a package or not)."""
    name = f"_specgen_compiled_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
