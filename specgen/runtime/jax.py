"""Tiny helpers the generated Pallas modules import: trace-time argument checks, placement, the
interpret-mode default, the refusal of derivatives (no rule yet) and torch interop through DLPack.
Imported only by generated code."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero


@functools.cache
def strict_interpret() -> object:
    """The CPU interpreter, as strict as it gets: uninitialized VMEM (and block reads past an array's end)
    read NaN, so an unmasked K tail shows up in the numbers (an output block nobody writes reads 0, not NaN: tests
    compare every element with a reference on random data to see one). Built on first use:
    importing Pallas TPU costs ~0.14 s that a Mosaic GPU module never needs."""
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.InterpretParams(out_of_bounds_reads="uninitialized", uninitialized_memory="nan")


def interpret_mode(flag: object, varying: frozenset = frozenset()) -> object:
    """None: native on a TPU, else the strict interpreter (Pallas's plain one under `jax.shard_map`,
    where the strict one, simulating every device of the mesh together, stalls on jax 0.10 CPU
    devices: `varying` non-empty with check_vma, the abstract mesh's manual axes without it);
    True: Pallas's plain interpreter; False: native; an `InterpretParams` passes through."""
    if flag is None:
        if jax.default_backend() == "tpu":
            return False
        return True if varying or jax.sharding.get_abstract_mesh().manual_axes else strict_interpret()
    return flag


def no_derivative(fn: str, names: tuple[str, ...], kernel: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """`kernel` (a pallas_call on the arrays `names`, in order) as a jax.custom_jvp whose rule raises at
    trace time, naming the op and the arguments being differentiated: jax.grad, jax.vjp, jax.jvp and
    jax.linearize refuse before anything runs (pallas_call's own JVP rule fails on these kernels with a bare
    AssertionError). The forward, jax.jit, vmap and shard_map see the kernel as before. A real derivative
    replaces this wrapper (a custom_vjp around the same call)."""
    call = jax.custom_jvp(lambda *xs: kernel(*xs))

    def rule(primals: tuple, tangents: tuple) -> Any:
        raise derivative_error(fn, [n for n, t in zip(names, tangents, strict=True) if type(t) is not SymbolicZero])

    call.defjvp(rule, symbolic_zeros=True)  # zero tangents arrive as SymbolicZero: the others are named
    return call


def derivative_error(fn: str, differentiated: list[str]) -> NotImplementedError:
    """The refusal of a derivative through a generated op (NotImplementedError, as jax's own for a primitive
    without a rule)."""
    names = ", ".join(f"'{n}'" for n in differentiated)
    which = {0: "an argument is", 1: f"argument {names} is"}.get(len(differentiated), f"arguments {names} are")
    return NotImplementedError(
        f"{fn}: {which} being differentiated (jax.grad, jax.vjp, jax.jvp or jax.linearize), and specgen's "
        f"generated ops have no derivative rule yet: wrap each in jax.lax.stop_gradient, or differentiate "
        f"around the call")


def operand(fn: str, name: str, x: Any, dtype: Any, rank: int, doc: str) -> tuple[int, ...]:
    """Check a jax.Array argument's type, dtype and rank; return its shape."""
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument '{name}' must be a jax.Array ({doc}), got {type(x).__name__}")
    if x.dtype != jnp.dtype(dtype):
        raise TypeError(f"{fn}: argument '{name}' is {x.dtype}, expected {jnp.dtype(dtype)} ({doc})")
    if x.ndim != rank:
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(x.shape)}, expected rank {rank} ({doc})")
    return tuple(x.shape)


def halved(fn: str, what: str, value: int, symbol: str) -> int:
    """Half of a gated B's extent (2N columns: gate and up), refusing an odd one (runtime/guards.py's, torch-free)."""
    if value % 2:
        raise ValueError(f"{fn}: {what} = {value} must be even: the gated epilogue reads gate and up columns, "
                         f"2{symbol} of them for {symbol} outputs (a (K, 2N) weight)")
    return value // 2


def expect_shape(fn: str, name: str, got: tuple[int, ...], want: tuple[int, ...], doc: str) -> None:
    if tuple(got) != tuple(want):
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(got)}, expected {tuple(want)} from the other "
                         f"arguments ({doc})")


def vector(fn: str, name: str, x: Any, dtype: Any, extent: int, along: str) -> jax.Array:
    """A per-row (`m`) or per-column (`n`) vector, given as (extent,) or as (extent, 1) / (1, extent);
    returned 2-D ((extent, 1) for rows, (1, extent) for columns) as its BlockSpec wants."""
    want = (extent, 1) if along == "m" else (1, extent)
    doc = f"({extent},) or {want} {jnp.dtype(dtype)}"
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument '{name}' must be a jax.Array ({doc}), got {type(x).__name__}")
    if x.dtype != jnp.dtype(dtype):
        raise TypeError(f"{fn}: argument '{name}' is {x.dtype}, expected {jnp.dtype(dtype)}")
    if tuple(x.shape) not in ((extent,), want):
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(x.shape)}, expected {doc}")
    return x.reshape(want)


def scalar(fn: str, name: str, x: Any) -> jax.Array:
    """A scalar multiplier: a Python number or a one-element array, passed to SMEM as (1,) f32."""
    if isinstance(x, bool) or not (isinstance(x, (int, float)) or (hasattr(x, "shape") and x.size == 1)):
        raise TypeError(f"{fn}: argument '{name}' must be a number or a one-element array, got {type(x).__name__}")
    return jnp.asarray(x, jnp.float32).reshape(1)


def check_placement(fn: str, args: dict[str, Any]) -> None:
    """Array arguments are jax.Arrays, on one device per call. A concrete array spread over several devices raises: the kernel sees one
    device's memory, so split the work with `jax.shard_map` (inside it the arguments are per-device
    shards, traced, and pass)."""
    for name, x in args.items():
        if not isinstance(x, jax.Array):  # (numpy arrays too: the kernel takes device arrays, no silent copies)
            raise TypeError(f"{fn}: argument '{name}' must be a jax.Array, got {type(x).__name__}")
        if not isinstance(x, jax.core.Tracer):
            devices = x.sharding.device_set
            if len(devices) > 1:
                raise ValueError(f"{fn}: argument '{name}' is spread over {len(devices)} devices; call {fn} inside "
                                 "jax.shard_map (one shard per device) or put the arrays on one device")


def varying_axes(*args: Any) -> frozenset:
    """Under `jax.shard_map` (check_vma): the mesh axes any argument varies over; the output varies
    over all of them. Empty outside shard_map. (jax 0.10 names it `mat.varying`, older jax `vma`.)"""
    axes: set = set()
    for x in args:
        aval = jax.typeof(x)
        mat = getattr(aval, "mat", None)
        axes |= set(mat.varying) if mat is not None else set(getattr(aval, "vma", ()))
    return frozenset(axes)


def vary(varying: frozenset, *args: Any) -> tuple[Any, ...]:
    """Each argument made to vary over every axis in `varying` (under `jax.shard_map`; unchanged outside it): a
    custom_vjp's backward returns each cotangent with its primal's type, and the gradients its kernels compute
    vary over the mesh axes, so the primals must too. An argument that did not vary (replicated weights) gets its
    cotangent summed over the axes it is cast along (the transpose of the cast: a psum), as jax's own
    autodiff of a replicated weight does."""
    out = []
    for x in args:
        missing = tuple(sorted(varying - varying_axes(x)))
        out.append(jax.lax.pcast(x, missing, to="varying") if missing else x)
    return tuple(out)


def out_struct(shape: tuple[int, ...], dtype: Any, varying: frozenset) -> jax.ShapeDtypeStruct:
    """The pallas_call's out_shape, varying over `varying` mesh axes under shard_map."""
    if not varying:
        return jax.ShapeDtypeStruct(shape, dtype)
    manual = getattr(jax.sharding, "ManualAxisType", None)
    if manual is not None:
        return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=manual(varying=varying))
    return jax.ShapeDtypeStruct(shape, dtype, vma=varying)


def zeros_call(out_shape: Any, varying: frozenset, fn: str, sums: bool) -> Callable[..., Any]:
    """The stand-in for a pallas_call whose grid is empty (an extent of 0: no rows, M = 0 or a batch of 0; no columns;
    no K), with no block of 0 to divide by sizing it: its outputs (`out_shape`, one ShapeDtypeStruct or a list, as
    pallas_call takes) as zeros, the inputs unread. An output with no elements is empty; a GEMM's output over a
    reduction of 0 (`sums`: dgrad's sum over no columns, wgrad's over no rows) is exactly 0, the sum over nothing.
    A kernel whose epilogue runs on the product (the forward, pre, G) with K = 0 and a non-empty output is refused."""
    structs = out_shape if isinstance(out_shape, list) else [out_shape]
    if not sums and any(math.prod(s.shape) for s in structs):
        raise ValueError(f"{fn}: K = 0 (the operands have no columns to reduce): the Pallas TPU kernels need K >= 1 "
                         f"(their epilogue runs at the last K step, and an empty product has none)")

    def call(*xs: Any) -> Any:
        outs = [vary(varying, jnp.zeros(s.shape, s.dtype))[0] for s in structs]
        return outs if isinstance(out_shape, list) else outs[0]

    return call


def torch_imported() -> bool:
    """Whether torch is imported already (a training module then registers its torch ops at import: see
    runtime/jax_torch.py)."""
    return "torch" in sys.modules


def _stored(fn: str, name: str, t: Any, transpose: bool | None) -> Any:
    """The tensor in the layout the kernel reads, contiguous (a jax.Array has no strides): `transpose`
    swaps the last two dims first (a K-major B given as a (K, N) view of an (N, K) tensor); None marks a
    vector, taken in any view. A legal view the import cannot share (padded rows, a strided vector, a
    base off 16 bytes) is copied once, as the torch launchers copy what their kernels cannot read in
    place; an operand in the other major mode raises, naming the argument, as theirs do."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if t.requires_grad:  # no backward yet (guards.py); DLPack refuses such a tensor even under torch.no_grad()
        if torch.is_grad_enabled():
            from specgen.runtime.guards import grad_error

            raise grad_error(fn, name)
        t = t.detach()
    if _narrowed(t.dtype):
        raise TypeError(f"{fn}: argument '{name}' must not be {t.dtype}: jax (without jax_enable_x64) would narrow "
                        "it silently; pass the spec's dtype")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{fn}: argument '{name}' must be on the CPU or a CUDA device (DLPack to jax), got {t.device}")
    # (a matrix of the wrong rank goes on as it is: the trace-time check names the argument and its shape)
    stored = t.transpose(-1, -2) if transpose and t.dim() >= 2 else t
    if stored.is_contiguous() and stored.data_ptr() % 16 == 0:
        return stored
    if transpose is not None and stored.dim() and stored.shape[-1] > 1 and stored.stride(-1) != 1:
        dim = t.dim() - (2 if transpose else 1)
        raise ValueError(f"{fn}: argument '{name}' must be contiguous along dim {dim} (stride 1, the spec's major "
                         f"mode), got strides {t.stride()}")
    return stored.clone(memory_format=torch.contiguous_format)


@functools.cache
def _narrowed(dtype: Any) -> bool:
    """True for a torch dtype jax would import as another (64-bit types without jax_enable_x64), which
    no spec dtype is: the call would otherwise compute on silently converted values."""
    name = str(dtype).removeprefix("torch.")
    try:
        np_dtype = jnp.dtype(name)
    except TypeError:
        return False
    return jax.dtypes.canonicalize_dtype(np_dtype) != np_dtype


def from_torch(fn: str, name: str, t: Any, transpose: bool | None) -> jax.Array:
    """A torch tensor as a jax.Array through DLPack (jax's own import, with its stream handshake); see
    `_stored` for `transpose`."""
    return jax.dlpack.from_dlpack(_stored(fn, name, t, transpose))


@functools.cache
def _cuda_bridge(index: int) -> tuple[Any, int, Any] | None:
    """For CUDA device `index`: jax's device, the stream jax's DLPack import records its ready event on
    (`Device.get_stream_for_external_ready_events`, what `jax.dlpack.from_dlpack` asks each call) and
    torch's handle on that stream. Read once: jax.dlpack.from_dlpack looks all three up per tensor (the
    backend, the device, the stream, a torch ExternalStream inside `Tensor.__dlpack__`), about 70 us per
    tensor on the H200's host. None where this jax lacks the pieces (then the public path serves)."""
    import torch

    try:
        from jax._src.lib import _jax

        device = next(d for d in jax.local_devices(backend="gpu") if d.local_hardware_id == index)
        stream = device.get_stream_for_external_ready_events()
        _jax.dlpack_managed_tensor_to_buffer  # noqa: B018 (present in jax 0.10 and 0.11)
    except Exception:
        return None
    return device, stream, torch.cuda.ExternalStream(stream, device=torch.device("cuda", index))


@functools.cache
def _cpu_bridge() -> tuple[Any, Callable[..., Any]] | None:
    """jax's CPU device and its DLPack import, read once: jax.dlpack.from_dlpack looks the backend and
    device up per tensor and then runs jnp.asarray on the result (a dispatch even where the dtype stays),
    about 30 us a tensor. None where this jax lacks the private import (then the public path serves)."""
    try:
        from jax._src.lib import _jax, jaxlib_extension_version

        if jaxlib_extension_version < 467:  # (the import's device-type argument)
            return None
        return jax.local_devices(backend="cpu")[0], _jax.dlpack_managed_tensor_to_buffer
    except Exception:
        return None


def torch_to_jax(fn: str, tensors: tuple[tuple[str, Any, bool | None], ...]) -> list[jax.Array]:
    """Torch tensors ((name, tensor, transpose) each) as jax.Arrays sharing their memory. CUDA tensors of
    one device take the short path: jax's import stream waits ONCE for torch's current stream (all of
    torch's work on these tensors so far), then each capsule is made without another handshake
    (`__dlpack__(stream=-1)`) and imported with that stream, as jax.dlpack.from_dlpack does (the buffer is
    ready when the stream reaches this point). CPU tensors are imported by jax's own call with no stream
    (`_cpu_bridge`). Anything else goes through `from_torch`."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{fn}_torch cannot be captured in a CUDA graph: JAX runs the kernel on its own stream and "
            "allocates the output, and torch's capture needs both on the capturing stream; capture the "
            "Triton or CuTe module's entry instead, or call the JAX entry under jax.jit")
    stored = [_stored(fn, name, t, transpose) for name, t, transpose in tensors]
    first = stored[0].device
    if not all(s.device == first for s in stored):
        return [jax.dlpack.from_dlpack(s) for s in stored]
    if first.type == "cpu":
        cpu = _cpu_bridge()
        if cpu is None:
            return [jax.dlpack.from_dlpack(s) for s in stored]
        device, to_buffer = cpu
        return [_canonical(to_buffer(s.__dlpack__(), device, None, None, _DL_CPU)) for s in stored]
    bridge = _cuda_bridge(first.index)
    if bridge is None:
        return [jax.dlpack.from_dlpack(s) for s in stored]
    from jax._src.lib import _jax

    device, stream, waiting = bridge
    waiting.wait_stream(torch.cuda.current_stream(first.index))
    return [_canonical(_jax.dlpack_managed_tensor_to_buffer(s.__dlpack__(stream=-1), device, stream, None, _DL_CUDA))
            for s in stored]


def _canonical(arr: jax.Array) -> jax.Array:
    """The import as jax.dlpack.from_dlpack returns it (its dtype canonical: an 8-byte type narrowed)."""
    return arr if arr.dtype == jax.dtypes.canonicalize_dtype(arr.dtype) else jnp.asarray(arr)


_DL_CPU = 1  # DLDeviceType kDLCPU
_DL_CUDA = 2  # DLDeviceType kDLCUDA


def to_torch(x: jax.Array) -> Any:
    """A single-device jax.Array as a torch tensor sharing its memory; torch's current stream waits for
    the array (jax's `__dlpack__(stream=...)` handshake, asked directly of the array's one buffer)."""
    import torch

    device = next(iter(x.devices()))
    if device.platform == "gpu":
        try:
            from jax._src.lib import _jax

            export = _jax.buffer_to_dlpack_managed_tensor
        except (ImportError, AttributeError):  # a private API: where a jax lacks it, the public path
            export = None
        if export is not None:
            stream = torch.cuda.current_stream(device.local_hardware_id).cuda_stream
            return torch.utils.dlpack.from_dlpack(export(x.addressable_data(0), stream=stream))
    return torch.from_dlpack(x)
