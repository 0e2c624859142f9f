"""`specgen compile` for the CuTe sm100 modules: `cute.compile` for sm_100a on a machine without a GPU
(no Blackwell here: this and the SASS are the whole verification), the compiler's SMEM and TMEM beside
the plan's, SASS instruction counts, and the disk cache the launcher reads filled on the way.

The SMEM is read as the sm90 hook reads it (the launch's dynamic shared memory in the lowered module,
plus the cubin's static `.nv.shared.<kernel>`); the TMEM is the column count of the kernel's
`tcgen05.alloc` in its PTX. SASS opcodes counted: TMA loads
and stores, the tcgen05 MMAs (UTCHMMA for 16-bit inputs, UTCQMMA for 8-bit), and local-memory spills:
a config whose SASS has any STL or LDL is reported as failed, with its registers and spill bytes.

Imports cutlass (and the generated module, which imports torch): never imported by check/render.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specgen.compile import CompileResult
from specgen.kinds.gemm.designs.cute_sm90 import compile as sm90
from specgen.targets import TargetInfo

SASS_OPS = ("UTMALDG", "UTMASTG", "UTCHMMA", "UTCQMMA", "UTCBAR", "LDL", "STL")

_TMEM_ALLOC = re.compile(r"tcgen05\.alloc\.\S+\s+\[[^\]]*\],\s*(%\w+|\d+);")


def tmem_alloc_columns(ptx: str) -> int | None:
    """The TMEM columns the kernel allocates: the column operand of its `tcgen05.alloc` in the PTX (an
    immediate, or the register a `mov.b32 %r, N` loaded), the largest where there are several."""
    found = None
    for m in _TMEM_ALLOC.finditer(ptx):
        operand = m.group(1)
        if operand.isdigit():
            cols = int(operand)
        else:
            movs = re.findall(rf"mov\.[bu]32\s+{re.escape(operand)},\s*(\d+);", ptx[:m.start()])
            if not movs:
                continue
            cols = int(movs[-1])
        found = max(found or 0, cols)
    return found


def compile_module(module: ModuleType, target: TargetInfo, sass: bool = False,
                   fill_cache: bool = True, backward: bool = True, role: str = "") -> list[CompileResult]:
    """Compile one rendered sm100 module: every config (the default first, then each size-selected
    variant, reported as `<kernel>[variant i]`), each beside its own plan SMEM and TMEM; with a `training`
    section (and `backward`) then each backward GEMM's role (`<kernel>[dgrad]`, beside its plan SMEM and TMEM) and
    the columns kernels (no SMEM, no TMEM), as the sm90 hook compiles them. `role`: that backward GEMM's kernel
    alone (check's settle step, as sm90's: forward_pre and recompute carry more than the forward)."""
    launcher = module._launcher
    meta = module.METADATA
    plan = meta["plan"][target.compute_capability]
    if role:
        roles = plan["training"]["kernels"]
        return [sm90.compile_config(module._train_launcher, meta["kernel"], role, target, roles[role]["smem_bytes"], sass,
                                    fill_cache, ops=SASS_OPS, keep=KEEP, more=_tmem(roles[role]))]
    plans = [plan] + list(plan.get("variants", []))
    rows = [sm90.compile_config(launcher, meta["kernel"], variant, target, p["smem_bytes"], sass, fill_cache,
                                ops=SASS_OPS, keep=KEEP, more=_tmem(p))
            for variant, p in zip(launcher.configs, plans, strict=True)]
    training = plan.get("training")
    if training and backward:
        roles = training["kernels"]
        rows += [sm90.compile_config(module._train_launcher, meta["kernel"], role, target, roles[role]["smem_bytes"], sass,
                                     fill_cache, ops=SASS_OPS, keep=KEEP, more=_tmem(roles[role]))
                 for role in module._train_launcher.configs]
        for name in ("_cols_launcher", "_cols_fp8_launcher", "_chain_launcher"):  # (an fp8 forward's, a chain's: their own)
            cols = getattr(module, name, None)
            rows += [sm90.compile_config(cols, meta["kernel"], v, target, 0, sass, fill_cache, ops=SASS_OPS)
                     for v in (cols.configs if cols else ())]
    return rows


KEEP = "--keep-cubin --keep-ptx"  # the PTX: its tcgen05.alloc is the TMEM read


def _tmem(plan: dict) -> Callable[[Any], dict[str, int]]:
    """The TMEM columns the compiled kernel allocates (its PTX's `tcgen05.alloc`) beside the plan's."""
    def read(compiled: Any) -> dict[str, int]:
        ptx = compiled.artifacts.PTX  # the PTX's path, or its text
        text = ptx if isinstance(ptx, str) and "tcgen05" in ptx else Path(ptx).read_text()
        return {"tmem_columns": tmem_alloc_columns(text) or 0, "plan_tmem_columns": plan["tmem_columns"]}
    return read
