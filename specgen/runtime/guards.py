"""Argument guards for generated launchers: cheap checks with errors that name the kernel, the
argument, what the spec expects and what was passed. Each returns what the launcher needs next.

dtype and Python-type mismatches raise TypeError; shape, stride, alignment and device mismatches
raise ValueError. Nothing here allocates or launches.
"""

from __future__ import annotations

import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
ALIGN = 16  # bytes: TMA's base and stride rule, and the pointer specialization the kernels are compiled for


def _fail(kernel: str, name: str, text: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{kernel}: argument '{name}' {text}")


def _tensor(kernel: str, name: str, t: object, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise _fail(kernel, name, f"must be a torch.Tensor, got {type(t).__name__}", TypeError)
    if t.dtype is not dtype:
        raise _fail(kernel, name, f"must have dtype {dtype}, got {t.dtype}", TypeError)
    return t


def device_of(kernel: str, a: object) -> int:
    """The device index every tensor must share (-1: CPU, only under TRITON_INTERPRET=1)."""
    if not isinstance(a, torch.Tensor):
        raise _fail(kernel, "a", f"must be a torch.Tensor, got {type(a).__name__}", TypeError)
    if INTERPRET:
        if a.device.type != "cpu":
            raise _fail(kernel, "a", f"must be on the CPU under TRITON_INTERPRET=1, got {a.device}")
        return -1
    if not a.is_cuda:
        raise _fail(kernel, "a", f"must be on a CUDA device, got {a.device}")
    return a.get_device()


def cuda_device_of(kernel: str, a: object) -> int:
    """The CUDA device every tensor must share, for kernels with no CPU interpreter (CuTe DSL)."""
    if not isinstance(a, torch.Tensor):
        raise _fail(kernel, "a", f"must be a torch.Tensor, got {type(a).__name__}", TypeError)
    if not a.is_cuda:
        raise _fail(kernel, "a", f"must be on a CUDA device, got {a.device}")
    return a.get_device()


def _same_device(kernel: str, name: str, t: torch.Tensor, device: int) -> None:
    # get_device() is -1 for every non-CUDA tensor (cpu, meta, ...): compare the device type too.
    if t.device.type != ("cpu" if device < 0 else "cuda") or t.get_device() != device:
        want = "cpu" if device < 0 else f"cuda:{device}"
        raise _fail(kernel, name, f"must be on {want} (where 'a' is), got {t.device}")


def _aligned(kernel: str, name: str, t: torch.Tensor) -> None:
    if t.data_ptr() % ALIGN:
        raise _fail(kernel, name, f"must start at a {ALIGN}-byte aligned address, got data_ptr() % {ALIGN} = "
                    f"{t.data_ptr() % ALIGN} (a sliced view? pass a .clone())")


def _layout_hint(name: str, rank: int, contiguous_dim: int) -> str:
    """The fix for an operand laid out the other way: for `b`, the usual cause is a weight stored
    (N, K) the way nn.Linear keeps it."""
    inner = contiguous_dim == rank - 1  # stride 1 along the last dim: row-major
    if name == "b" and not inner:
        return ('for a weight stored (N, K) (nn.Linear\'s layout) pass w.t(); for a (K, N) row-major b set '
                'b.major = "mn" in the spec')
    if name == "b":
        return 'pass a (K, N) row-major tensor (w.t().contiguous() for a weight stored (N, K)), or set b.major = "k"'
    if name == "a" and not inner:
        return 'pass x.t() of a (K, M) row-major tensor, or set a.major = "k" in the spec'
    return "pass a row-major tensor (.contiguous())"


def matrix(kernel: str, name: str, t: object, dtype: torch.dtype, rank: int, contiguous_dim: int, device: int,
           tma: bool = False) -> tuple[int, ...]:
    """An operand of `rank` dims whose `contiguous_dim` has stride 1 (its major mode). With `tma`, every
    other stride must be a multiple of 16 bytes (cuTensorMapEncodeTiled)."""
    t = _tensor(kernel, name, t, dtype)
    if t.dim() != rank:
        raise _fail(kernel, name, f"must have {rank} dims, got shape {tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    shape, strides = t.shape, t.stride()
    if strides[contiguous_dim] != 1 and shape[contiguous_dim] > 1:
        raise _fail(kernel, name, f"must be contiguous along dim {contiguous_dim} (stride 1, the spec's major mode), "
                    f"got strides {strides}; {_layout_hint(name, rank, contiguous_dim)}")
    _aligned(kernel, name, t)
    if tma and t.numel():  # an empty tensor is never addressed: its strides are torch's filler ((M, 0) has (1, 1))
        nbytes = t.element_size()
        for dim, stride in enumerate(strides):
            if dim != contiguous_dim and (stride * nbytes) % ALIGN:
                raise _fail(kernel, name, f"stride {stride} of dim {dim} is {stride * nbytes} bytes, not a multiple of "
                            f"{ALIGN} (TMA needs that: pad the contiguous dim)")
    return tuple(shape)


def output_like(kernel: str, name: str, t: object, dtype: torch.dtype, shape: tuple[int, ...], device: int,
                tma: bool = False) -> None:
    """A row-major tensor of exactly `shape` (the output, or a residual shaped like it)."""
    got = matrix(kernel, name, t, dtype, len(shape), len(shape) - 1, device, tma)
    if got != shape:
        raise _fail(kernel, name, f"must have shape {shape}, got {got}")


def vector(kernel: str, name: str, t: object, dtype: torch.dtype, n: int, extent: str, device: int) -> None:
    """A contiguous vector of n values: shape (n,), (n, 1) or (1, n)."""
    t = _tensor(kernel, name, t, dtype)
    ok_shape = t.dim() == 1 or (t.dim() == 2 and 1 in t.shape)
    if not ok_shape or t.numel() != n:
        raise _fail(kernel, name, f"must hold {extent} = {n} values, shape ({n},), ({n}, 1) or (1, {n}); got shape "
                    f"{tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    if n > 1 and t.stride(list(t.shape).index(n)) != 1:  # the dim holding the n values; (1, n) has strides (n, 1)
        raise _fail(kernel, name, f"must be contiguous, got strides {t.stride()}")
    _aligned(kernel, name, t)


def tma_rows(kernel: str, name: str, n: int, elem_bytes: int) -> None:
    """A TMA-stored matrix with rows of n elements needs row strides of a multiple of 16 bytes."""
    if n * elem_bytes % ALIGN:
        raise _fail(kernel, name, f"rows of N = {n} elements are {n * elem_bytes} bytes; the TMA store needs a "
                    f"multiple of {ALIGN} (N a multiple of {ALIGN // elem_bytes}), or pass out= a view of a wider buffer")


INT32_SPAN = 2**31  # pointer kernels index within one matrix in int32 (batch offsets are int64)


def int32_span(kernel: str, name: str, outer: int, lead_stride: int) -> None:
    """A matrix a pointer kernel addresses must span fewer than 2**31 elements."""
    if outer * lead_stride >= INT32_SPAN:
        raise _fail(kernel, name, f"spans {outer} x {lead_stride} = {outer * lead_stride} elements; this kernel "
                    f"indexes within a matrix in 32 bits (< {INT32_SPAN}): use a persistent TMA spec or split the call")


def scalar(kernel: str, name: str, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(kernel, name, f"must be a Python float, got {type(v).__name__}", TypeError)


def same_extent(kernel: str, what: str, value: int, other_what: str, other: int) -> None:
    if value != other:
        raise ValueError(f"{kernel}: {what} = {value} must equal {other_what} = {other}")
