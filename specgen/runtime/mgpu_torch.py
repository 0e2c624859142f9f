"""The Mosaic GPU modules' direct torch path: a kernel compiled once per config and shape, then launched
from torch with the tensors' addresses on torch's current stream, with no jax dispatch and no DLPack
(which cost ~190 us a call on an H100 host, issue 20). Imported by generated code on its first torch call.

A kernel takes this path where its jitted program is the Mosaic GPU custom call alone, its operands the
program's arguments in order and its result the program's result: then the call is exactly what XLA
would run (the same serialized Mosaic GPU module, compiled by the same `MosaicGpuCompile` of jax's CUDA
plugin that `jax.experimental.pallas.mosaic_gpu.as_torch_kernel` uses), launched on the stream torch
gives. That public helper launches on the device's default stream; this one takes torch's current stream,
so the call orders with torch's work and can be captured in a CUDA graph (Mosaic GPU builds its TMA
descriptors on the host and passes them as kernel parameters: a captured launch keeps them). Where a
program is anything else, or this jax lacks the pieces, `compile` returns None and the module's
DLPack path serves the call."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import torch

Launch = Callable[[Sequence[int], int], None]


@functools.cache
def _plugin() -> Any:
    """jax's CUDA plugin library, with the Mosaic GPU compile and unload entry points typed; None where
    this jax has none (then every kernel takes the DLPack path)."""
    try:
        try:
            import jax_plugins.xla_cuda13 as cuda_plugin  # type: ignore[import-not-found]
        except ImportError:
            import jax_plugins.xla_cuda12 as cuda_plugin  # type: ignore[import-not-found]
        lib = ctypes.CDLL(cuda_plugin._get_library_path())
        compile_fn, unload_fn = lib.MosaicGpuCompile, lib.MosaicGpuUnload
    except (ImportError, AttributeError, OSError):
        return None
    compile_fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    compile_fn.restype = ctypes.POINTER(ctypes.c_void_p)
    unload_fn.argtypes = [compile_fn.restype]
    unload_fn.restype = None
    return lib


@dataclasses.dataclass(frozen=True)
class Program:
    """A jitted program the direct launch can run: its Mosaic GPU module (`asm`), called on the program's `args`
    arguments (in order) and then `zeroed`, buffers the program fills with zeros before the call (a kernel's GMEM
    scratch, pl.get_global's semaphores: jax zero-fills them, the call aliases each to a result), returning the
    program's results first and then `scratch` (a result the program drops, as `(shape, dtype, operand)`:
    `operand` the zeroed operand it aliases, or None for a buffer of the kernel's own, a split's partials)."""

    asm: bytes
    args: int
    zeroed: tuple[tuple[tuple[int, ...], str], ...] = ()
    scratch: tuple[tuple[tuple[int, ...], str, int | None], ...] = ()


def _tensor(value: Any) -> tuple[tuple[int, ...], str]:
    from jax._src.lib.mlir import ir

    t = ir.RankedTensorType(value.type)
    return tuple(t.shape), str(t.element_type)


def _zero_fill(value: Any) -> bool:
    """Whether `value` is a zero splat the program builds (a constant 0, or one broadcast)."""
    op = getattr(value.owner, "opview", value.owner)
    name = getattr(op, "name", "")
    if name == "stablehlo.broadcast_in_dim":
        return _zero_fill(op.operands[0])
    if name == "stablehlo.constant":
        return str(op.attributes["value"]).startswith(("dense<0>", "dense<0.000000e+00>"))
    return False


def program(kernel: Callable[..., Any], structs: Sequence[jax.ShapeDtypeStruct]) -> Program | None:
    """The Mosaic GPU program of `kernel` at `structs`, where its jitted program is that one custom call on the
    program's arguments (in order) and zero-filled scratch, returning its first results; else None."""
    import re

    from jax._src.lib.mlir import passmanager
    from jax._src.lib.mlir.dialects import func
    from jax.experimental.mosaic import gpu as mgpu

    ir_module = jax.jit(kernel).trace(*structs).lower(lowering_platforms=("cuda",)).compiler_ir()
    with ir_module.context:
        mgpu.dialect.register_inliner_extensions(ir_module.context)  # jax.jit outlines the kernel's body
        passmanager.PassManager.parse("builtin.module(inline{default-pipeline=})").run(ir_module.operation)
        mains = [op for op in ir_module.body.operations if isinstance(op, func.FuncOp) and op.name.value == "main"]
        if len(mains) != 1:
            return None
        [block] = mains[0].body.blocks
        ops = list(block.operations)
        calls = [op for op in ops if op.name == "stablehlo.custom_call"]
        if len(calls) != 1 or ops[-1].name != "func.return" or ops[-2] != calls[0]:
            return None
        call, ret = calls[0], ops[-1]
        if any(op.name not in ("stablehlo.constant", "stablehlo.broadcast_in_dim") for op in ops[:-2]):
            return None  # anything but the scratch's zeros runs before the call
        if call.attributes["call_target_name"].value != "mosaic_gpu_v2":
            return None
        operands, args = list(call.operands), list(block.arguments)
        if operands[:len(args)] != args or not all(_zero_fill(v) for v in operands[len(args):]):
            return None
        results, returned = list(call.results), list(ret.operands)
        if not returned or returned != results[:len(returned)]:
            return None
        aliases = {}
        if "output_operand_aliases" in call.attributes:
            text = str(call.attributes["output_operand_aliases"])
            for out, operand in re.findall(r"output_tuple_indices = \[(\d+)\], operand_index = (\d+)", text):
                aliases[int(out)] = int(operand)
        zeroed = range(len(args), len(operands))
        if any(out < len(returned) or operand not in zeroed for out, operand in aliases.items()) or (
                sorted(aliases.values()) != list(zeroed)):
            return None  # only the zeroed scratch is aliased, each to a dropped result
        config = call.attributes["mhlo.backend_config"]
        if "uses_xla_collective_metadata" in config and bool(config["uses_xla_collective_metadata"].value):
            return None
        return Program(bytes(config["module"].value_bytes), len(args),
                       tuple(_tensor(v) for v in operands[len(args):]),
                       tuple((*_tensor(results[i]), aliases.get(i)) for i in range(len(returned), len(results))))


def module_bytes(kernel: Callable[..., Any], structs: Sequence[jax.ShapeDtypeStruct]) -> bytes | None:
    """The serialized Mosaic GPU module of `kernel` at `structs` where the direct launch can run its program
    (`program`); else None."""
    found = program(kernel, structs)
    return None if found is None else found.asm


# How the compiled host program is called changed between the two jax lines specgen supports (each
# jax's own `mosaic.gpu.core._compile_as_torch_gpu_kernel` spells it): jax 0.11 (0.11.2 on the H100) takes
# (function, stream, buffers); jax 0.10 (0.10.2) its MLIR C interface, the three packed as void*[3].
_PACKED_ARGS = jax.__version_info__ < (0, 11)


# The torch dtypes of the scratch buffers a program may carry (MLIR element types).
_TORCH_DTYPES = {"i32": torch.int32, "f32": torch.float32, "i64": torch.int64, "bf16": torch.bfloat16, "f16": torch.float16}


class Kernel:
    """One compiled Mosaic GPU module: `launch(addresses, stream)` with the inputs' then the output's
    device addresses (the XLA calling convention's buffer list) on a raw CUDA stream. Unloaded when
    garbage-collected. A program with scratch (`Program.zeroed`, `.scratch`) gets its buffers here, one set
    per device and stream (launches on one stream run in order; another stream's may overlap): the zeroed
    ones filled with zeros once, which the kernel must leave as it found them (a split's semaphores end at 0)."""

    def __init__(self, asm: bytes | Program) -> None:
        lib = _plugin()
        found = asm if isinstance(asm, Program) else Program(asm, -1)
        asm = found.asm
        handle = lib.MosaicGpuCompile(asm, len(asm))
        if not handle:
            raise RuntimeError("MosaicGpuCompile failed on a module jax lowered")
        self._program = found
        self._scratch: dict[tuple[int, int], tuple[list[Any], list[int], list[int]]] = {}
        self._function = ctypes.c_void_p(handle[0])
        if _PACKED_ARGS:
            self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(handle[1])
        else:
            self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_void_p))(handle[1])
        weakref.finalize(self, lib.MosaicGpuUnload, handle)

    def _buffers(self, stream: int) -> tuple[list[int], list[int]]:
        """The scratch's addresses on the current device for `stream`: the zeroed operands', the dropped results'."""
        device = torch.cuda.current_device()
        found = self._scratch.get((device, stream))
        if found is None:
            where = torch.device("cuda", device)
            zeroed = [torch.zeros(shape, dtype=_TORCH_DTYPES[dtype], device=where) for shape, dtype in self._program.zeroed]
            own = [None if operand is not None else torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=where)
                   for shape, dtype, operand in self._program.scratch]
            ins = [t.data_ptr() for t in zeroed]
            outs = [zeroed[operand - self._program.args].data_ptr() if t is None else t.data_ptr()
                    for t, (_, _, operand) in zip(own, self._program.scratch, strict=True)]
            found = self._scratch[(device, stream)] = (zeroed + [t for t in own if t is not None], ins, outs)
        return found[1], found[2]

    def launch(self, addresses: Sequence[int], stream: int) -> None:
        if self._program.zeroed or self._program.scratch:
            ins, outs = self._buffers(stream)
            split = self._program.args
            addresses = [*addresses[:split], *ins, *addresses[split:], *outs]
        buffers = (ctypes.c_void_p * len(addresses))(*addresses)
        if not _PACKED_ARGS:
            self._entry(self._function, stream, buffers)
            return
        buffers_ptr = ctypes.c_void_p(ctypes.addressof(buffers))
        stream_ptr = ctypes.c_void_p(stream)
        packed = (ctypes.c_void_p * 3)(ctypes.addressof(self._function), ctypes.addressof(stream_ptr),
                                       ctypes.addressof(buffers_ptr))
        self._entry(ctypes.addressof(packed))


def compile(kernel: Callable[..., Any], structs: Sequence[jax.ShapeDtypeStruct]) -> Launch | None:
    """The direct launch of `kernel` at `structs`, or None where it cannot take the direct path."""
    if _plugin() is None:
        return None
    found = program(kernel, structs)
    return None if found is None else Kernel(found).launch


def stream(device: int) -> int:
    """torch's current stream on `device`, as the raw handle (what Triton's launcher reads: no Stream object)."""
    return torch._C._cuda_getCurrentRawStream(device)


def readable(t: Any, dtype: Any, device: int) -> bool:
    """A tensor the kernel reads in place: `dtype`, contiguous, 16-byte aligned, on CUDA device `device`."""
    return t.dtype is dtype and t.get_device() == device and t.is_contiguous() and t.data_ptr() % 16 == 0


def vector(t: Any, along: str, extent: int, padded: int, dtype: Any, device: int) -> Any:
    """A per-row (`along` "m") or per-column ("n") vector in the shapes the DLPack path takes ((extent,),
    or (extent, 1) for rows, (1, extent) for columns: `runtime.jax.vector`), flat, in a buffer of
    `padded` elements (the kernel reads whole subtiles); None where it cannot go direct (the DLPack path
    then raises or copies, so both paths accept the same inputs).

    The elements past `extent` are left unset: they scale or offset only rows (columns) past the
    output's extent, which the kernel's TMA store clips, so one copy does (a zero pad was a fill
    kernel and a copy, 2.1 us of a 16x8192x8192 fp8 call's 36 on the H100)."""
    if tuple(t.shape) == ((extent, 1) if along == "m" else (1, extent)):
        t = t.reshape(extent)
    if tuple(t.shape) != (extent,) or not readable(t, dtype, device):
        return None
    if padded == extent:
        return t
    buf = torch.empty(padded, dtype=t.dtype, device=t.device)
    buf[:extent].copy_(t)
    return buf


def scalar(x: Any, width: int, device: int) -> Any:
    """A Python number as the kernel takes a scalar: `width` f32 copies (one epilogue subtile's row);
    None for anything else (a tensor takes the DLPack path, which checks it)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return torch.full((width,), float(x), dtype=torch.float32, device=torch.device("cuda", device))
