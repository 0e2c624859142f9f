"""`specgen compile` for CuTe DSL modules: `cute.compile` for the module's arch (sm_90a) on a machine
without a GPU, the compiler's SMEM beside the plan's, SASS instruction counts, and the disk cache the
launcher reads (runtime/cute.py) filled on the way. A config whose SASS spills to local memory (any
STL or LDL) is reported as failed, with its registers and spill bytes (kinds/gemm/designs/cubin.py).

The compiler's SMEM is what the compiled host code launches with (the dynamic shared memory of the
launch config, read from the lowered module) plus any static `.nv.shared.<kernel>` the cubin
declares. SASS comes from nvdisasm (`pip install nvidia-cuda-nvdisasm`, in the `cute` extra), read
for spills on every compile; `--sass` also prints the opcode counts and the cubin's resources.

Imports cutlass (and the generated module, which imports torch): never imported by check/render.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specgen.compile import CompileResult
from specgen.kinds.gemm.designs import cubin as cubins
from specgen.kinds.gemm.designs.cubin import static_smem
from specgen.targets import TargetInfo

# SASS opcodes worth counting: TMA loads / stores, Hopper tensor-core MMAs, local-memory spills.
SASS_OPS = ("UTMALDG", "UTMASTG", "HGMMA", "QGMMA", "LDL", "STL")


_LAUNCH_SMEM = re.compile(
    r"(%\w+) = llvm\.getelementptr (%\w+)\[0, 2\] : \(!llvm\.ptr\) -> !llvm\.ptr, "
    r"!llvm\.struct<\(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32\)>"
)


def launch_smem(ir_text: str) -> int | None:
    """The dynamic SMEM bytes of the kernel launch: the constant stored into the launch config's
    `sharedMemBytes` field (CUlaunchConfig: grid, block, sharedMemBytes, stream, attrs, numAttrs)."""
    found = None
    for m in _LAUNCH_SMEM.finditer(ir_text):
        gep = m.group(1)
        store = re.search(rf"llvm\.store (%\w+), {re.escape(gep)} : i64", ir_text[m.end():])
        if store is None:
            continue
        starts = [f.start() for f in re.finditer(r"^\s*llvm\.func @", ir_text[:m.start()], re.M)]  # not `vararg(!llvm.func<`
        func_start = starts[-1] if starts else 0
        const = re.findall(rf"{re.escape(store.group(1))} = llvm\.mlir\.constant\((\d+) : i64\)", ir_text[func_start:m.start()])
        if const:
            found = int(const[-1])
    return found


def compile_module(module: ModuleType, target: TargetInfo, sass: bool = False,
                   fill_cache: bool = True, backward: bool = True, role: str = "") -> list[CompileResult]:
    """Compile one rendered CuTe module for its target (the `compile_hook` of kinds/gemm/designs/cute_sm90/design.py):
    every config, the default first, then each size-selected variant (reported as `<kernel>[variant i]`),
    each beside its own plan SMEM; optionally count SASS opcodes; fill the disk cache the launcher reads. `role`:
    that backward GEMM's kernel alone (check's settle step: forward_pre and recompute carry more than the forward)."""
    launcher = module._launcher
    meta = module.METADATA
    plan = meta["plan"][target.compute_capability]
    if role:
        return [compile_config(module._train_launcher, meta["kernel"], role, target,
                               plan["training"]["kernels"][role]["smem_bytes"], sass, fill_cache)]
    smem = [plan["smem_bytes"]] + [v["smem_bytes"] for v in plan.get("variants", [])]
    rows = [compile_config(launcher, meta["kernel"], variant, target, plan_smem, sass, fill_cache)
            for variant, plan_smem in zip(launcher.configs, smem, strict=True)]
    training = plan.get("training")
    if training and backward:  # the backward's GEMMs (`<kernel>[dgrad]`), each beside its plan SMEM, then its columns kernels (no SMEM)
        train = module._train_launcher
        rows += [compile_config(train, meta["kernel"], role, target, training["kernels"][role]["smem_bytes"], sass, fill_cache)
                 for role in train.configs]
        for name in ("_cols_launcher", "_cols_fp8_launcher", "_chain_launcher"):  # (an fp8 forward's, a chain's: their own)
            cols = getattr(module, name, None)
            rows += [compile_config(cols, meta["kernel"], v, target, 0, sass, fill_cache) for v in (cols.configs if cols else ())]
    return rows


def compile_config(launcher, name: str, variant: int | None, target: TargetInfo, plan_smem: int, sass: bool,
                   fill_cache: bool, ops: tuple[str, ...] = SASS_OPS, keep: str = "--keep-cubin",
                   more: Callable[[Any], dict[str, int]] | None = None) -> CompileResult:
    """One config of a CuTe module (either design's): compiled SMEM beside the plan's, with `sass` the
    counts of `ops` and the cubin's resources, plus what `more(compiled)` reads (the sm100 design: TMEM
    columns from the PTX `keep` keeps); the disk cache filled on the way. Its registers and spills are
    always read off the cubin: a config that spills is reported failed (and not cached)."""
    label = name if variant is None else f"{name}[{variant}]" if isinstance(variant, str) else f"{name}[variant {variant}]"
    start, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="specgen-cute-") as dump:
        try:
            compiled = launcher.compile(variant, f"{keep} --dump-dir {dump}")
        except Exception as e:  # the compiler's own message is the useful part
            first = next((ln for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()), type(e).__name__)
            return CompileResult(label, target.name, plan_smem, None, time.perf_counter() - start, first[:300])
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        cubin = compiled.artifacts.CUBIN  # the cubin's path, or (some DSL versions) its bytes
        if isinstance(cubin, bytes):
            cubin_path = Path(dump) / "kernel.cubin"
            cubin_path.write_bytes(cubin)
        else:
            cubin_path = Path(cubin)
        dynamic = launch_smem(str(compiled.ir_module))  # the SharedStorage struct
        total = None if dynamic is None else dynamic + static_smem(cubin_path.read_bytes())  # + base alignment pad
        try:
            read = cubins.read_cubin(cubin_path, ops)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:  # no nvdisasm: no verdict on spills
            return CompileResult(label, target.name, plan_smem, total, seconds, f"{e}"[:300], cpu_seconds=cpu_seconds)
        counts, resources = (read.sass, dict(read.resources)) if sass else ({}, {})
        if more is not None:
            resources |= more(compiled)
        from specgen.runtime.cute import TVM_FFI

        cache = str(launcher.export(compiled, variant)) if fill_cache and TVM_FFI and not read.error else ""
    return CompileResult(label, target.name, plan_smem, total, seconds, read.error, sass=counts, cache=cache,
                         cpu_seconds=cpu_seconds, resources=resources, registers=read.registers, spills=read.spills)
