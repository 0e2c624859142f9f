"""Host-side TMA descriptors without re-validation on every call.

`TensorDescriptor(...)` re-checks alignment and strides in `__post_init__` (about 2 us each on the H200);
the generated guards have already checked the same rules with better messages, so the per-call path
fills the dataclass directly. Its optional fields (padding; round_f32_to_tf32 in newer Triton) keep
the constructor's defaults.
"""

from __future__ import annotations

import dataclasses

from triton.tools.tensor_descriptor import TensorDescriptor

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TensorDescriptor) if f.default is not dataclasses.MISSING}


def descriptor(base, shape: list[int], strides: list[int], block_shape: list[int]) -> TensorDescriptor:
    d = object.__new__(TensorDescriptor)
    d.__dict__.update(_DEFAULTS)
    d.base, d.shape, d.strides, d.block_shape = base, shape, strides, block_shape
    return d


# --- the encoded-descriptor cache ------------------------------------------------------------------
# Triton encodes each TMA descriptor's CUtensorMap on the host at every launch (`make_tensordesc_arg`:
# cuTensorMapEncodeTiled plus Python around it, microseconds per descriptor). The encoding depends
# only on the tensor's address, shape, strides and dtype, the box and the kernel's swizzle/element
# metadata (and the padding and tf32-rounding flags), so encodings are cached per launcher under
# exactly those: a changed address, shape, stride, dtype or box is a different key, never a stale hit.
# (A repeat launch with the same tensors skips the wrapper altogether: launch.py's cached launches. This
# cache serves the launches built anew, where often only one operand changed.)
MAX_CACHED = 256  # per launcher; cleared whole when full (a serving loop reuses a handful)
_ENCODER = "make_tensordesc_arg"


def descriptor_key(arg, metadata) -> tuple:
    """Everything an encoded descriptor depends on; `metadata` is the launcher's own per-parameter
    record (swizzle, element size and type, block), fixed for that launcher's lifetime."""
    base = arg.base
    return (base.data_ptr(), base.dtype, tuple(arg.shape), tuple(arg.strides), tuple(arg.block_shape),
            arg.padding, getattr(arg, "round_f32_to_tf32", False), id(metadata))


def caching_encoder(encode):
    """`encode` (Triton's make_tensordesc_arg) with its results cached by `descriptor_key`."""
    cache: dict[tuple, object] = {}

    def cached(arg, metadata=None, *rest):
        if metadata is None:  # no TMA metadata: Triton passes the raw pieces (nothing is encoded)
            return encode(arg, metadata, *rest)
        key = descriptor_key(arg, metadata)
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= MAX_CACHED:
                cache.clear()
            hit = cache[key] = encode(arg, metadata, *rest)
        return hit

    cached.cache = cache  # for tests and tools
    return cached


def with_descriptor_cache(launch):
    """A copy of a Triton launcher's tensordesc wrapper whose encoder caches (the launcher itself and
    every other kernel untouched), or `launch` unchanged where its shape is not one we know: Triton
    3.6 looks `make_tensordesc_arg` up as a module global, 3.7+ passes it into the wrapper's closure."""
    import types

    code = getattr(launch, "__code__", None)
    if code is None:  # a C function: the kernel has no tensor descriptors
        return launch
    closure = launch.__closure__ or ()
    if _ENCODER in code.co_freevars:
        i = code.co_freevars.index(_ENCODER)
        cells = list(closure)
        cells[i] = types.CellType(caching_encoder(closure[i].cell_contents))
        return types.FunctionType(code, launch.__globals__, launch.__name__, launch.__defaults__, tuple(cells))
    if _ENCODER in code.co_names and _ENCODER in launch.__globals__:
        scope = {**launch.__globals__, _ENCODER: caching_encoder(launch.__globals__[_ENCODER])}
        return types.FunctionType(code, scope, launch.__name__, launch.__defaults__, closure or None)
    return launch
