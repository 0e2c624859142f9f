"""`specgen compile` for CuTe DSL modules: `cute.compile` for the module's arch (sm_90a) on a machine
without a GPU, the compiler's SMEM beside the plan's, SASS instruction counts, and the disk cache the
launcher reads (runtime/cute.py) filled on the way.

The compiler's SMEM is what the compiled host code launches with (the dynamic shared memory of the
launch config, read from the lowered module) plus any static `.nv.shared.<kernel>` the cubin
declares. SASS comes from nvdisasm (`pip install nvidia-cuda-nvdisasm`).

Imports cutlass (and the generated module, which imports torch): never imported by check/render.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specgen.compile import CompileResult
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


def _sections(cubin: bytes) -> list[tuple[str, tuple]]:
    """(name, header) of each ELF64 section: (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size,
    sh_link, sh_info, sh_addralign, sh_entsize)."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]

    def name(h: tuple) -> str:
        end = cubin.index(b"\0", names_off + h[0])
        return cubin[names_off + h[0]:end].decode()

    return [(name(h), h) for h in headers]


def static_smem(cubin: bytes) -> int:
    """Bytes of the cubin's `.nv.shared.<kernel>` sections (static shared memory; ELF64)."""
    return sum(h[5] for n, h in _sections(cubin) if n.startswith(".nv.shared.") and not n.startswith(".nv.shared.reserved"))


EIATTR_REGCOUNT, EIATTR_FRAME_SIZE = 0x2F, 0x11  # `.nv.info` attributes: registers, stack frame per thread


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """Per-thread registers ptxas allocated and stack frame bytes (spills live there), the largest over
    the cubin's kernels: the EIATTR_REGCOUNT and EIATTR_FRAME_SIZE entries of its `.nv.info` sections
    (entries: format u8, attribute u8, then for EIF_SVAL (4) a u16 size and that many payload bytes,
    here kernel symbol u32, value u32; other formats carry a u16 value). With setmaxnreg the register
    count is the consumers' ceiling (232), not what they use: see `sass_counts`' `registers_used`."""
    found = {EIATTR_REGCOUNT: 0, EIATTR_FRAME_SIZE: 0}
    for name, h in _sections(cubin):
        if not name.startswith(".nv.info"):
            continue
        at, end = h[4], h[4] + h[5]
        while at + 4 <= end:
            fmt, attr, size = struct.unpack_from("<BBH", cubin, at)
            if fmt == 0x04 and attr in found and size >= 8:
                found[attr] = max(found[attr], struct.unpack_from("<I", cubin, at + 8)[0])
            at += 4 + (size if fmt == 0x04 else 0)
    return {"registers": found[EIATTR_REGCOUNT], "frame_bytes": found[EIATTR_FRAME_SIZE]}


def nvdisasm() -> str | None:
    """nvdisasm from the nvidia-cuda-nvdisasm wheel (cu13 or cu12 layout), else from PATH."""
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cuda_nvdisasm", "cu12"):
                exe = Path(root) / sub / "bin" / "nvdisasm"
                if exe.is_file():
                    return str(exe)
    except ImportError:
        pass
    return shutil.which("nvdisasm")


_LOCAL_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}  # LDL/STL bytes; bare: 4


def sass_counts(cubin_path: str, ops: tuple[str, ...] = SASS_OPS) -> tuple[dict[str, int], dict[str, int]]:
    """(opcode counts of `ops`, this design's SASS_OPS by default; resources): `spill_store_bytes` / `spill_load_bytes` sum the widths of
    the STL / LDL instructions, as ptxas' `-v` counts its "bytes spill stores / loads";
    `registers_used` is the highest general register the code names, plus one (a 64- or 128-bit
    operand names only its first register: a lower bound by up to 3)."""
    exe = nvdisasm()
    if exe is None:
        raise RuntimeError("nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    text = subprocess.run([exe, "-c", cubin_path], capture_output=True, text=True, check=True).stdout
    counts = dict.fromkeys(ops, 0)
    local = {"spill_store_bytes": 0, "spill_load_bytes": 0, "registers_used": 0}
    for line in text.splitlines():
        regs = [int(r) for r in re.findall(r"\bR(\d+)\b", line)]
        if regs:
            local["registers_used"] = max(local["registers_used"], max(regs) + 1)
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)((?:\.[A-Z0-9]+)*)", line)
        if m and m.group(1) in counts:
            counts[m.group(1)] += 1
            if m.group(1) in ("LDL", "STL"):
                width = next((_LOCAL_WIDTH[x] for x in m.group(2).split(".") if x in _LOCAL_WIDTH), 4)
                local["spill_store_bytes" if m.group(1) == "STL" else "spill_load_bytes"] += width
    return counts, local


def compile_module(module: ModuleType, target: TargetInfo, sass: bool = False,
                   fill_cache: bool = True) -> list[CompileResult]:
    """Compile one rendered CuTe module for its target (the `compile_hook` of kinds/gemm/designs/cute_sm90/design.py):
    every config, the default first, then each size-selected variant (reported as `<kernel>[variant i]`),
    each beside its own plan SMEM; optionally count SASS opcodes; fill the disk cache the launcher reads."""
    launcher = module._launcher
    meta = module.METADATA
    plan = meta["plan"][target.compute_capability]
    smem = [plan["smem_bytes"]] + [v["smem_bytes"] for v in plan.get("variants", [])]
    return [compile_config(launcher, meta["kernel"], variant, target, plan_smem, sass, fill_cache)
            for variant, plan_smem in zip(launcher.configs, smem, strict=True)]


def compile_config(launcher, name: str, variant: int | None, target: TargetInfo, plan_smem: int, sass: bool,
                   fill_cache: bool, ops: tuple[str, ...] = SASS_OPS, keep: str = "--keep-cubin",
                   more: Callable[[Any], dict[str, int]] | None = None) -> CompileResult:
    """One config of a CuTe module (either design's): compiled SMEM beside the plan's, with `sass` the
    counts of `ops` and the cubin's resources, plus what `more(compiled)` reads (the sm100 design: TMEM
    columns from the PTX `keep` keeps); the disk cache filled on the way."""
    label = name if variant is None else f"{name}[variant {variant}]"
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
        counts, local = sass_counts(str(cubin_path), ops) if sass else ({}, {})
        resources = cubin_resources(cubin_path.read_bytes()) | local if sass else {}
        if more is not None:
            resources |= more(compiled)
        from specgen.runtime.cute import TVM_FFI

        cache = str(launcher.export(compiled, variant)) if fill_cache and TVM_FFI else ""
    return CompileResult(label, target.name, plan_smem, total, seconds, sass=counts, cache=cache,
                         cpu_seconds=cpu_seconds, resources=resources)
