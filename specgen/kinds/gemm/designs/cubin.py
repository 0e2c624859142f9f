"""Reading a compiled cubin, for the compile hooks of the designs that build one (CuTe sm90 and sm100,
Triton): its sections, static SMEM, the registers and stack frame ptxas allocated, SASS opcode counts
(nvdisasm), and the local-memory spills that make `specgen compile` fail a config.

A spill is a failed config for this project (the CUTLASS reference kernels have none): any STL or LDL
in the SASS. Their widths summed are ptxas' own "bytes spill stores / loads".

nvdisasm: the nvidia-cuda-nvdisasm wheel (in the `cute` and `test` extras), else the one Triton ships
(`triton/backends/nvidia/bin`), else PATH. Never imported by check/render.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specgen.compile import Spills

EIATTR_REGCOUNT, EIATTR_FRAME_SIZE = 0x2F, 0x11  # `.nv.info` attributes: registers, stack frame per thread


def sections(cubin: bytes) -> list[tuple[str, tuple]]:
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
    return sum(h[5] for n, h in sections(cubin) if n.startswith(".nv.shared.") and not n.startswith(".nv.shared.reserved"))


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """Per-thread registers ptxas allocated and stack frame bytes (spills live there), the largest over
    the cubin's kernels: the EIATTR_REGCOUNT and EIATTR_FRAME_SIZE entries of its `.nv.info` sections
    (entries: format u8, attribute u8, then for EIF_SVAL (4) a u16 size and that many payload bytes,
    here kernel symbol u32, value u32; other formats carry a u16 value). With setmaxnreg the register
    count is what the kernel launches with, not what its consumers raise to: see `sass_counts`'
    `registers_used`."""
    found = {EIATTR_REGCOUNT: 0, EIATTR_FRAME_SIZE: 0}
    for name, h in sections(cubin):
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
    """nvdisasm from the nvidia-cuda-nvdisasm wheel (cu13 or cu12 layout), else Triton's, else PATH."""
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cuda_nvdisasm", "cu12"):
                exe = Path(root) / sub / "bin" / "nvdisasm"
                if exe.is_file():
                    return str(exe)
    except ImportError:
        pass
    triton = importlib.util.find_spec("triton")  # found, not imported
    for root in (triton.submodule_search_locations or []) if triton else []:
        exe = Path(root) / "backends" / "nvidia" / "bin" / "nvdisasm"
        if exe.is_file():
            return str(exe)
    return shutil.which("nvdisasm")


_LOCAL_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}  # LDL/STL bytes; bare: 4


def sass_counts(cubin_path: str, ops: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int]]:
    """(opcode counts of `ops`, LDL and STL always among them; resources): `spill_store_bytes` /
    `spill_load_bytes` sum the widths of the STL / LDL instructions, as ptxas' `-v` counts its "bytes
    spill stores / loads"; `registers_used` is the highest general register the code names, plus one (a
    64- or 128-bit operand names only its first register: a lower bound by up to 3); `setmaxnreg`, where
    the kernel raises a warpgroup's registers (USETMAXREG.TRY_ALLOC), the most it raises them to."""
    exe = nvdisasm()
    if exe is None:
        raise RuntimeError("nvdisasm not found (it reads the SASS for spills): pip install nvidia-cuda-nvdisasm")
    text = subprocess.run([exe, "-c", cubin_path], capture_output=True, text=True, check=True).stdout
    counts = dict.fromkeys((*ops, *(op for op in ("LDL", "STL") if op not in ops)), 0)
    local = {"spill_store_bytes": 0, "spill_load_bytes": 0, "registers_used": 0}
    for line in text.splitlines():
        raised = re.search(r"USETMAXREG\.TRY_ALLOC\S*\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+|\d+)", line)
        if raised:  # setmaxnreg: the warpgroups that raise their registers (the MMA consumers) run at this
            local["setmaxnreg"] = max(local.get("setmaxnreg", 0), int(raised.group(1), 0))
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


@dataclass(frozen=True)
class CubinReading:
    """What a compile hook reads off one cubin: registers, spills, and the `--sass` figures."""

    registers: int  # per thread: the cubin's count, or what setmaxnreg raises the MMA warpgroups to
    spills: Spills
    sass: dict[str, int]  # opcode -> count
    resources: dict[str, int]  # registers, frame_bytes, spill bytes, registers_used

    @property
    def error(self) -> str:
        """The failure a spilling config is reported with ('' when it spills nothing)."""
        return self.spills.message(self.registers) if self.spills.spilled else ""


def read_cubin(cubin_path: str | Path, ops: tuple[str, ...] = ("LDL", "STL")) -> CubinReading:
    """Registers and spills (STL / LDL in its SASS) of a compiled cubin. Registers: the most a thread
    holds, the cubin's `.nv.info` count or, where setmaxnreg raises a warpgroup's, that ceiling (the
    sm90 consumers: 232 where the kernel launches with 168)."""
    counts, local = sass_counts(str(cubin_path), ops)
    resources = cubin_resources(Path(cubin_path).read_bytes()) | local
    spills = Spills(stores=counts["STL"], loads=counts["LDL"], store_bytes=local["spill_store_bytes"],
                    load_bytes=local["spill_load_bytes"])
    return CubinReading(max(resources["registers"], resources.get("setmaxnreg", 0)), spills, counts, resources)
