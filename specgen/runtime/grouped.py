"""Argument guards and launch facts of the grouped GEMM kind's torch entries (specgen/kinds/grouped/), beside
the dense kind's in guards.py (whose operand, vector and scalar guards they reuse). Errors name the kernel and
the argument; nothing here reads a device tensor's values (the group index stays on the device: no sync)."""

from __future__ import annotations

import torch

from specgen.runtime.guards import ALIGN, _fail, _same_device, _tensor, aligned_copy, output

INT32_SPAN = 2**31  # what a 32-bit offset addresses; past it the kernel indexes in 64 bits


def group_index(kernel: str, name: str, t: object, groups: int, device: int, what: str) -> torch.Tensor:
    """The group index: an int32 vector of one value per group (`what` says which: cumulative ends as
    torch._grouped_mm's offs, or sizes as jax.lax.ragged_dot's group_sizes), on the operands' device; a strided
    or misaligned one is copied (on the device: its values are never read here)."""
    if isinstance(t, torch.Tensor) and t.dtype is not torch.int32:
        raise _fail(kernel, name, f"must be int32 ({what}, as torch._grouped_mm takes them), got {t.dtype}", TypeError)
    t = _tensor(kernel, name, t, torch.int32)
    if t.dim() != 1 or t.shape[0] != groups:
        raise _fail(kernel, name, f"must have shape ({groups},), one value per group of b (G = b.shape[0] = {groups}); "
                    f"got shape {tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    return _fresh(t) if groups and (t.stride(0) != 1 or t.data_ptr() % ALIGN) else t


def group_count(kernel: str, name: str, t: object) -> int:
    """A ragged-K kernel's group count: the length of its group index (no operand holds G), which must be a
    vector (`group_index` checks the rest)."""
    if not isinstance(t, torch.Tensor):
        raise _fail(kernel, name, f"must be a torch.Tensor, got {type(t).__name__}", TypeError)
    if t.dim() != 1:
        raise _fail(kernel, name, f"must be a vector (G,), one value per group; got shape {tuple(t.shape)}")
    return t.shape[0]


def group_rows(kernel: str, name: str, t: object, dtype: torch.dtype, groups: int, n: int, device: int) -> torch.Tensor:
    """An operand indexed by group, (G, N): row g serves group g (a bias per expert). Returned as it is, or as a
    contiguous copy where strided or misaligned."""
    t = _tensor(kernel, name, t, dtype)
    if tuple(t.shape) != (groups, n):
        raise _fail(kernel, name, f"must have shape (G, N) = ({groups}, {n}), one row per group; got {tuple(t.shape)}")
    _same_device(kernel, name, t, device)
    return _fresh(t) if t.numel() and (not t.is_contiguous() or t.data_ptr() % ALIGN) else t


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of `t` in a new allocation (so 16-byte aligned), made on its device."""
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def kept_output(kernel: str, t: object, dtype: torch.dtype, shape: tuple[int, int], device: int,
                like: torch.Tensor, keeps_tail: bool, tma: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`guards.output`, for a kernel that writes only some rows: where the caller's `out` must be staged (a base
    off 16 bytes; with `tma`, rows that are no 16-byte multiple: a kernel storing 16-byte vectors), the staging
    buffer starts as a copy of it when rows past the groups are to stay untouched, so that copying it back after
    the launch changes only the rows the kernel wrote."""
    out, result = output(kernel, t, dtype, shape, device, like, tma)
    if out is not result and keeps_tail:
        out.copy_(result)
    return out, result


def output_grad(kernel: str, grad: object, dtype: torch.dtype, shape: tuple[int, int], device: int) -> torch.Tensor:
    """The output's gradient a grouped backward reads (autograd hands over the output's dtype and shape; a direct
    call of the backward op may not): checked, and row-major with unit column stride (a contiguous copy of an
    expanded or strided one, such as the gradient of out.sum())."""
    t = _tensor(kernel, "grad", grad, dtype)
    if tuple(t.shape) != shape:
        raise _fail(kernel, "grad", f"must have shape {shape} (the output's), got {tuple(t.shape)}")
    _same_device(kernel, "grad", t, device)
    return t if t.stride(-1) == 1 and t.stride(0) >= t.shape[-1] else t.contiguous()


def last_offset(t: torch.Tensor) -> int:
    """The largest element offset the kernel computes into `t` from its base (0 for an empty tensor)."""
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0


def needs_int64(*tensors: torch.Tensor) -> bool:
    """Whether an offset the kernel computes into one of `tensors` reaches 2^31 (rows x leading stride for A
    and out, groups x group stride for B and a per-group bias), so that it must index in 64 bits. 32-bit
    indexing is cheaper, and kept where every offset fits."""
    return any(last_offset(t) >= INT32_SPAN for t in tensors)


def k_descriptors(a: torch.Tensor, b: torch.Tensor, a_inner: int, b_inner: int, block_m: int, block_n: int,
                  block_k: int, descriptor) -> tuple[object, object]:
    """The ragged-K kernel's TMA descriptors over A (M, K) and B (K, N) as stored (checked or staged by the guards:
    a 16-byte base and 16-byte strides but the unit one), each with its contiguous dim inner (`a_inner`, `b_inner`:
    0 or 1), so an M-major A is described as (K, M) and a K-major B as (N, K). With K = 0 (every group empty:
    nothing is loaded) a zero (M, 1) / (1, N) stand-in takes each operand's place: TMA encodes no empty tensor."""
    if a.shape[1] == 0:
        a = aligned_copy(a.new_zeros((a.shape[0], 1)), a_inner)
        b = aligned_copy(b.new_zeros((1, b.shape[1])), b_inner)
    boxes = ((a, a_inner, (block_m, block_k)), (b, b_inner, (block_k, block_n)))
    return tuple(descriptor(t, [t.shape[1 - inner], t.shape[inner]], [t.stride(1 - inner), 1],
                            [box[1 - inner], box[inner]]) for t, inner, box in boxes)  # type: ignore[return-value]


def out_descriptor(out: torch.Tensor, block_m: int, block_n: int, descriptor) -> object | None:
    """The ragged-K kernel's out (G, M, N) as one 3-D TMA descriptor with boxes of one group's (block_m, block_n) tile
    (its TMA store: TMA clips a box at M within its group, where a (G * M, N) view would spill a partial tile's rows
    into out[g + 1]), or None where TMA cannot store into out in place, so the kernel stores through masked pointers
    (any strides; the host decides per call). TMA wants a 16-byte base, group and row strides of 16-byte multiples
    that do not overlap, and a row extent of one: a store writes a row's last 16 bytes whole (guards._needs_copy: into
    a view of N = 29 bf16 columns it wrote the caller's columns 29-31). A dim of one is never stepped along: its stride
    is described as packed, whatever the caller's view says."""
    groups, m, n = out.shape
    size = out.element_size()
    sg, sm, sn = out.stride()
    if not out.numel() or out.data_ptr() % ALIGN or sn != 1 or (n * size) % ALIGN:
        return None
    sm = n if m == 1 else sm
    sg = m * sm if groups == 1 else sg
    if (sm * size) % ALIGN or sm < n or (sg * size) % ALIGN or sg < m * sm:
        return None
    return descriptor(out, [groups, m, n], [sg, sm, 1], [1, block_m, block_n])
