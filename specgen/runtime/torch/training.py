"""What every generated module's backward (a spec's `training` section) calls at run time, whichever design renders
its kernels: the checks of what autograd hands it, the choice of the differentiable op, and (for designs whose
kernels read through TMA only, CuTe) operands and outputs laid out as TMA takes them. Imports torch only."""

from __future__ import annotations

import torch

from specgen.runtime.guards import ALIGN, _needs_copy, aligned_copy


def backward_sizes(kernel: str, grad: object, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype,
                   gated: bool = False, batched: bool = False) -> tuple[int, int, int]:
    """(M, K, N) of a backward call, checking the output's gradient: a tensor of the output's dtype and shape on
    A's device (autograd hands over such a one; a direct call of the backward op may not). With a gated epilogue
    N is the output's columns, half of B's. `batched`: A (batch, M, K), B (batch, K, N) and the gradient (batch, M,
    N)."""
    M, K = a.shape[-2:]
    N = b.shape[-1] // (2 if gated else 1)
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{kernel}: the output's gradient must be a torch.Tensor, got {type(grad).__name__}")
    if grad.dtype is not dtype:
        raise TypeError(f"{kernel}: the output's gradient must have dtype {dtype} (the output's), got {grad.dtype}")
    want = (a.shape[0], M, N) if batched else (M, N)
    if tuple(grad.shape) != want:
        raise ValueError(f"{kernel}: the output's gradient must have shape {want} (the output's), got {tuple(grad.shape)}")
    if grad.device != a.device:
        raise ValueError(f"{kernel}: the output's gradient must be on {a.device} (where 'a' is), got {grad.device}")
    return M, K, N


def needs_grad(*tensors: object) -> bool:
    """Whether grad mode is on and one of the arguments requires grad: the call then takes the differentiable op."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def out_refused(kernel: str) -> TypeError:
    """`out=` with inputs that require grad: autograd cannot record a write into a caller's tensor."""
    return TypeError(f"{kernel}: out= is not supported when an argument requires grad (autograd records the op's own "
                     "output); call it without out=, or under torch.no_grad()")


def tma_ready(t: torch.Tensor, contiguous_dim: int) -> torch.Tensor:
    """A (rows, cols) matrix as a TMA kernel compiled for stride 1 along `contiguous_dim` reads it: in place where
    it is laid out so (16-byte base and leading stride), else one aligned copy (a saved input viewed with an odd
    pitch, autograd's expanded gradient of a sum)."""
    if t.numel() and (t.stride(contiguous_dim) != 1 or _needs_copy(t, contiguous_dim, True)):
        return aligned_copy(t, contiguous_dim)
    return t


def tma_empty(rows: int, cols: int, dtype: torch.dtype, device: torch.device, *batch: int) -> torch.Tensor:
    """An uninitialized row-major (rows, cols) matrix a TMA store can write: its row pitch padded to 16 bytes (`batch`:
    (batch, rows, cols), the batches rows x pitch apart, so that (batch rows, cols) is a view of it)."""
    per = max(1, ALIGN // torch.empty((), dtype=dtype).element_size())
    return torch.empty((*batch, rows, -(-max(cols, 1) // per) * per), dtype=dtype, device=device)[..., :cols]


def writable(dst: torch.Tensor) -> bool:
    """Whether a TMA store of a row-major matrix (or a batch of them) can write `dst` in place (else the kernel writes
    a padded buffer, guards.aligned_empty, and it is copied into `dst`)."""
    return dst.stride(-1) == 1 and not _needs_copy(dst, -1, True, store=True)


def vectors_in_place(t: torch.Tensor, per: int) -> bool:
    """Whether a SIMT kernel can read and write `t`'s rows `per` elements (16 bytes) at a time in place: unit
    stride along the rows, a pitch of whole vectors, a 16-byte base."""
    return t.stride(-1) == 1 and t.stride(0) % per == 0 and t.data_ptr() % 16 == 0


def vector_rows(t: torch.Tensor, per: int) -> torch.Tensor:
    """A row-major (rows, cols) matrix a kernel reads `per` elements (16 bytes) at a time along its rows: in place
    where its base and row pitch are 16-byte aligned and its last row is readable up to cols rounded up to `per`
    (a thread's last vector may pass cols), else one aligned copy (padded rows)."""
    t = tma_ready(t, 1)
    if t.numel():
        rows, cols = t.shape
        end = t.storage_offset() + (rows - 1) * t.stride(0) + -(-cols // per) * per
        if end * t.element_size() > t.untyped_storage().nbytes():
            return aligned_copy(t, 1)
    return t


def refuse_fp8_grad(kernel: str, inputs: tuple) -> None:
    """An fp8 forward's backward gives no gradient to its fp8 operands through autograd (torch would round the
    gradient of an fp8 tensor to fp8) nor to its dequantization scales (inputs without grad, as torch._scaled_mm's):
    a clear error where one of them requires grad."""
    for name, t in zip(("a", "b", "scale_a", "scale_b"), inputs, strict=False):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            if name in ("scale_a", "scale_b"):
                raise RuntimeError(f"{kernel}: {name} requires grad, but an fp8 forward's dequantization scales are inputs "
                                   "without grad (as torch._scaled_mm's): detach it")
            spelled = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}.get(t.dtype, str(t.dtype))
            raise RuntimeError(f"{kernel}: {name} ({spelled}) requires grad, but autograd would round its gradient to "
                               "fp8; the bf16 backward's gradients are those of the dequantized operands (a scale_a, "
                               f"b scale_b): call the module's _backward(grad, ...) from your own autograd.Function "
                               "(the straight-through step of your quantization), or detach it")
