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


def module_bytes(kernel: Callable[..., Any], structs: Sequence[jax.ShapeDtypeStruct]) -> bytes | None:
    """The serialized Mosaic GPU module of `kernel` at `structs`, where its jitted program is that one
    custom call on the program's arguments (in order) returning its result; else None."""
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
        if len(ops) != 2 or ops[0].name != "stablehlo.custom_call" or ops[1].name != "func.return":
            return None
        call, ret = ops
        if call.attributes["call_target_name"].value != "mosaic_gpu_v2":
            return None
        if list(call.operands) != list(block.arguments) or list(ret.operands) != list(call.results):
            return None
        if len(call.results) != 1 or list(getattr(call, "output_operand_aliases", None) or []):
            return None
        config = call.attributes["mhlo.backend_config"]
        if "uses_xla_collective_metadata" in config and bool(config["uses_xla_collective_metadata"].value):
            return None
        return bytes(config["module"].value_bytes)


# How the compiled host program is called changed between the two jax lines specgen supports (each
# jax's own `mosaic.gpu.core._compile_as_torch_gpu_kernel` spells it): jax 0.11 (0.11.2 on the H100) takes
# (function, stream, buffers); jax 0.10 (0.10.2) its MLIR C interface, the three packed as void*[3].
_PACKED_ARGS = jax.__version_info__ < (0, 11)


class Kernel:
    """One compiled Mosaic GPU module: `launch(addresses, stream)` with the inputs' then the output's
    device addresses (the XLA calling convention's buffer list) on a raw CUDA stream. Unloaded when
    garbage-collected."""

    def __init__(self, asm: bytes) -> None:
        lib = _plugin()
        handle = lib.MosaicGpuCompile(asm, len(asm))
        if not handle:
            raise RuntimeError("MosaicGpuCompile failed on a module jax lowered")
        self._function = ctypes.c_void_p(handle[0])
        if _PACKED_ARGS:
            self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(handle[1])
        else:
            self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_void_p))(handle[1])
        weakref.finalize(self, lib.MosaicGpuUnload, handle)

    def launch(self, addresses: Sequence[int], stream: int) -> None:
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
    asm = module_bytes(kernel, structs)
    return None if asm is None else Kernel(asm).launch


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
