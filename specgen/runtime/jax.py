"""Tiny helpers the generated Pallas modules import: trace-time argument checks, placement, the
interpret-mode default and torch interop through DLPack. Imported only by generated code."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

# The CPU interpreter, as strict as it gets: uninitialized VMEM (and block reads past an array's end)
# read NaN, so an unmasked K tail or an unwritten output shows up in the numbers.
STRICT_INTERPRET = pltpu.InterpretParams(out_of_bounds_reads="uninitialized", uninitialized_memory="nan")


def interpret_mode(flag: object, varying: frozenset = frozenset()) -> object:
    """None: native on a TPU, else the strict interpreter (Pallas's plain one under `jax.shard_map`,
    where the strict one, simulating every device of the mesh together, stalls on jax 0.10 CPU
    devices); True: Pallas's plain interpreter; False: native; an `InterpretParams` passes through."""
    if flag is None:
        if jax.default_backend() == "tpu":
            return False
        return True if varying else STRICT_INTERPRET
    return flag


def operand(fn: str, name: str, x: Any, dtype: Any, rank: int, doc: str) -> tuple[int, ...]:
    """Check a jax.Array argument's type, dtype and rank; return its shape."""
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: argument '{name}' must be a jax.Array ({doc}), got {type(x).__name__}")
    if x.dtype != jnp.dtype(dtype):
        raise TypeError(f"{fn}: argument '{name}' is {x.dtype}, expected {jnp.dtype(dtype)} ({doc})")
    if x.ndim != rank:
        raise ValueError(f"{fn}: argument '{name}' has shape {tuple(x.shape)}, expected rank {rank} ({doc})")
    return tuple(x.shape)


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


def out_struct(shape: tuple[int, ...], dtype: Any, varying: frozenset) -> jax.ShapeDtypeStruct:
    """The pallas_call's out_shape, varying over `varying` mesh axes under shard_map."""
    if not varying:
        return jax.ShapeDtypeStruct(shape, dtype)
    manual = getattr(jax.sharding, "ManualAxisType", None)
    if manual is not None:
        return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=manual(varying=varying))
    return jax.ShapeDtypeStruct(shape, dtype, vma=varying)


def from_torch(fn: str, name: str, t: Any, transpose: bool) -> jax.Array:
    """A torch tensor as a jax.Array through DLPack. `transpose` swaps the last two dims first (a
    K-major B given as a (K, N) view of an (N, K) tensor); the result must then be contiguous, since a
    jax.Array has no strides."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    stored = t.transpose(-1, -2) if transpose else t
    if not stored.is_contiguous():
        layout = "its last two dims transposed" if transpose else "it"
        raise ValueError(f"{fn}: argument '{name}' (shape {tuple(t.shape)}, strides {t.stride()}) must be contiguous "
                         f"with {layout} (a jax.Array has no strides)")
    return jax.dlpack.from_dlpack(stored)


def to_torch(x: jax.Array) -> Any:
    import torch

    return torch.from_dlpack(x)
