"""Argument guards for generated launchers: cheap checks with errors that name the kernel, the
argument, what the spec expects and what was passed. Each returns what the launcher needs next.

dtype and Python-type mismatches raise TypeError; shape, stride, alignment and device mismatches
raise ValueError; a tensor that requires grad in grad mode (no backward yet) and a bf16 GEMM under
Triton's CPU interpreter raise NotImplementedError. Nothing here allocates or launches.
"""

from __future__ import annotations

import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
ALIGN = 16  # bytes: TMA's base and stride rule, and the pointer specialization the kernels are compiled for


def _fail(kernel: str, name: str, text: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{kernel}: argument '{name}' {text}")


def grad_error(kernel: str, name: str) -> NotImplementedError:
    """The refusal of a tensor that requires grad in grad mode: the ops have no backward yet, and a
    launch would return an output autograd does not track (every parameter before the call silently
    gets no gradient). NotImplementedError: a RuntimeError, as torch's autograd errors are."""
    return NotImplementedError(
        f"{kernel}: argument '{name}' requires grad, and specgen's generated ops have no backward yet: call "
        f"{kernel} under torch.no_grad() or torch.inference_mode(), or on {name}.detach()")


def refuse_grad(kernel: str, tensors: dict[str, object]) -> None:
    """Raise `grad_error` for the first tensor that requires grad while grad mode is on (the slow path:
    `_check` folds the same test into its one boolean, `_validate` and the torch.compile branch call this)."""
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise grad_error(kernel, name)


def refuse_interpreter_bf16(kernel: str) -> None:
    """Triton's CPU interpreter (3.x) multiplies bf16 tiles as their raw uint16 storage (its `tl.dot` is
    np.matmul on the bits; it converts only 8-bit floats first): garbage, where f16, f32 and fp8 operands
    come out right. The launcher of a module whose A or B is bf16 calls this before the interpreter runs."""
    if INTERPRET:
        raise NotImplementedError(
            f"{kernel}: Triton's CPU interpreter (TRITON_INTERPRET=1) computes bf16 dot products wrongly (it "
            "multiplies the raw bits); run it on a GPU, or test an f16/f32 spec under the interpreter")


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


def aligned_copy(t: torch.Tensor, contiguous_dim: int) -> torch.Tensor:
    """A copy of `t` laid out as every kernel can take it: stride 1 along `contiguous_dim`, that dim's
    storage padded to a multiple of 16 bytes (so every other stride is one too), a fresh (aligned)
    base. Used where a caller's legal view cannot be read in place: a base off a 16-byte boundary, or a
    TMA kernel's stride that is not a multiple of 16 bytes. One copy, on the slow path only."""
    rank, cd = t.dim(), contiguous_dim % t.dim()
    other = rank - 2 if cd == rank - 1 else rank - 1
    order = [*range(rank - 2), other, cd]  # storage order: batch, the other matrix dim, the contiguous dim
    per = max(1, ALIGN // t.element_size())
    store = [t.shape[d] for d in order]
    store[-1] = -(-max(store[-1], 1) // per) * per
    storage = torch.empty(store, dtype=t.dtype, device=t.device)
    view = storage[..., : t.shape[cd]].permute(*[order.index(d) for d in range(rank)])
    view.copy_(t)
    return view


def _needs_copy(t: torch.Tensor, contiguous_dim: int, tma: bool, store: bool = False) -> bool:
    """True where the kernel cannot use `t` in place: its base is not 16-byte aligned (the kernels are
    compiled for aligned pointers), or, for TMA, a stride other than the contiguous one is not a
    multiple of 16 bytes (cuTensorMapEncodeTiled), or, for a TMA `store`, the contiguous extent is not: a
    TMA store writes a row's last 16 bytes whole, so into a view of a wider buffer (N = 29 bf16 columns in
    rows of 32) it wrote the caller's columns past N (seen on an H200, CuTe and Triton alike). TMA loads
    stop at the extent (the same views with NaN past it read in place gave no NaN), so inputs keep theirs.
    An empty tensor is never addressed."""
    if not t.numel():
        return False
    if t.data_ptr() % ALIGN:
        return True
    nbytes, inner = t.element_size(), contiguous_dim % t.dim()
    return tma and ((store and (t.shape[inner] * nbytes) % ALIGN != 0)
                    or any((s * nbytes) % ALIGN for d, s in enumerate(t.stride()) if d != inner))


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


def _checked(kernel: str, name: str, t: object, dtype: torch.dtype, rank: int, contiguous_dim: int,
             device: int) -> torch.Tensor:
    """A tensor of `dtype` and `rank` on `device` whose `contiguous_dim` has stride 1 (the spec's major mode)."""
    t = _tensor(kernel, name, t, dtype)
    if t.dim() != rank:
        raise _fail(kernel, name, f"must have {rank} dims, got shape {tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    shape, strides = t.shape, t.stride()
    if strides[contiguous_dim] != 1 and shape[contiguous_dim] > 1:
        raise _fail(kernel, name, f"must be contiguous along dim {contiguous_dim} (stride 1, the spec's major mode), "
                    f"got strides {strides}; {_layout_hint(name, rank, contiguous_dim)}")
    return t


def matrix(kernel: str, name: str, t: object, dtype: torch.dtype, rank: int, contiguous_dim: int, device: int,
           tma: bool = False, stage: bool = True) -> torch.Tensor:
    """An operand in the spec's major mode: returned as it is, or as an aligned copy (`aligned_copy`)
    where the kernel cannot read it in place, so that every backend accepts what torch.matmul accepts in
    that major mode. A wrong dtype, rank, device or major mode raises, naming the argument. `stage` False:
    checked only, `readable` copies it once the arguments' shapes agree (a call refused copies nothing)."""
    t = _checked(kernel, name, t, dtype, rank, contiguous_dim, device)
    return readable(t, contiguous_dim, tma) if stage else t


def readable(t: torch.Tensor, contiguous_dim: int, tma: bool = False) -> torch.Tensor:
    """A checked operand as the kernel reads it: itself, or an aligned copy where it cannot be read in place."""
    return aligned_copy(t, contiguous_dim) if _needs_copy(t, contiguous_dim, tma) else t


def input_like(kernel: str, name: str, t: object, dtype: torch.dtype, shape: tuple[int, ...], device: int,
               tma: bool = False) -> torch.Tensor:
    """A row-major input of exactly `shape` (a residual shaped like the output), copied where needed."""
    t = matrix(kernel, name, t, dtype, len(shape), len(shape) - 1, device, tma)
    if tuple(t.shape) != shape:
        raise _fail(kernel, name, f"must have shape {shape}, got {tuple(t.shape)}")
    return t


def output(kernel: str, t: object, dtype: torch.dtype, shape: tuple[int, ...], device: int, like: torch.Tensor,
           tma: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(where the kernel writes, what the call returns), for the caller's `out=` (or None: a new
    row-major tensor on `like`'s device). The kernel writes in place where it can; otherwise (a base off
    16 bytes; for TMA, rows or batch strides that are not 16-byte multiples) it writes to an aligned
    buffer that is copied into the result after the launch: one copy, on the slow path only."""
    if t is None:
        result = torch.empty(shape, device=like.device, dtype=dtype)
    else:
        result = _checked(kernel, "out", t, dtype, len(shape), len(shape) - 1, device)
        if tuple(result.shape) != shape:
            raise _fail(kernel, "out", f"must have shape {shape}, got {tuple(result.shape)}")
    return (aligned_empty(result) if _needs_copy(result, -1, tma, store=True) else result), result


def aligned_empty(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised row-major buffer shaped like `t` (any rank) with 16-byte rows and base: what a TMA store
    may write whole rows of (its padding is the buffer's own)."""
    per = max(1, ALIGN // t.element_size())
    cols = -(-max(t.shape[-1], 1) // per) * per
    return torch.empty((*t.shape[:-1], cols), dtype=t.dtype, device=t.device)[..., : t.shape[-1]]


def vector(kernel: str, name: str, t: object, dtype: torch.dtype, n: int, extent: str, device: int) -> torch.Tensor:
    """A vector of n values: shape (n,), (n, 1) or (1, n); returned as it is, or as a contiguous copy
    where it is strided or off a 16-byte boundary."""
    t = _tensor(kernel, name, t, dtype)
    ok_shape = t.dim() == 1 or (t.dim() == 2 and 1 in t.shape)
    if not ok_shape or t.numel() != n:
        raise _fail(kernel, name, f"must hold {extent} = {n} values, shape ({n},), ({n}, 1) or (1, {n}); got shape "
                    f"{tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    strided = n > 1 and t.stride(list(t.shape).index(n)) != 1  # the dim holding the n values; (1, n) has strides (n, 1)
    return t.reshape(-1).clone() if strided or (n and t.data_ptr() % ALIGN) else t


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


def halved(kernel: str, what: str, value: int, symbol: str) -> int:
    """Half of a gated operand's extent (B's 2N columns: gate and up), refusing an odd one."""
    if value % 2:
        raise ValueError(f"{kernel}: {what} = {value} must be even: the gated epilogue reads gate and up columns, "
                         f"2{symbol} of them for {symbol} outputs (a (K, 2N) weight)")
    return value // 2
