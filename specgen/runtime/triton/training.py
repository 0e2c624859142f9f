"""What a generated module's backward (a spec's `training` section) calls at run time: its launch of a backward
kernel with the launch config of the device's compute capability, and the checks of what autograd hands it.

The backward kernels take any strides (a transposed weight, autograd's expanded gradient of a sum), so they
launch through Triton's JIT, which specializes on the strides it is given; a backward launches three GEMMs of
M x N x K each, next to which the JIT's per-launch cost (some microseconds) is small.
"""

from __future__ import annotations

import torch

from specgen.runtime.guards import INT32_SPAN, INTERPRET, refuse_interpreter_bf16

_CAPABILITY: dict[int, int] = {}


def config_for(kernel: str, configs: dict[int, dict[str, int]], device: int) -> dict[str, int]:
    """The launch config (warps, stages) for a device by its compute capability (the first under the interpreter)."""
    if device < 0:
        return next(iter(configs.values()))
    cc = _CAPABILITY.get(device)
    if cc is None:
        major, minor = torch.cuda.get_device_capability(device)
        cc = _CAPABILITY[device] = major * 10 + minor
    if cc not in configs:
        have = ", ".join(f"sm_{c}" for c in configs)
        raise RuntimeError(f"{kernel}: the backward was rendered for {have} (the spec's targets); cuda:{device} is "
                           f"sm_{cc}. Add its target to the spec and re-render.")
    return configs[cc]


def _span(t: torch.Tensor) -> int:
    """The largest element offset a kernel addresses in `t` (pointer kernels index in 32 bits)."""
    return sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True) if n)


def launch(kernel: str, jit: object, configs: dict[int, dict[str, int]], tiles: dict[str, int], device: int,
           grid: int, args: tuple, bf16: bool) -> None:
    """Launch one backward kernel over `grid` programs (the JIT specializes and caches it)."""
    if bf16:
        refuse_interpreter_bf16(kernel)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and _span(a) >= INT32_SPAN:
            raise ValueError(f"{kernel}: a backward operand (argument {i}, shape {tuple(a.shape)}, strides {a.stride()}) "
                             f"spans {_span(a)} elements; the backward kernels index within a matrix in 32 bits "
                             f"(< {INT32_SPAN}): split the call")
    jit[(grid,)](*args, **tiles, FAST_MATH=not INTERPRET, **config_for(kernel, configs, device))  # type: ignore[index]


def backward_sizes(kernel: str, grad: object, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> tuple[int, int, int]:
    """(M, K, N) of a backward call, checking the output's gradient: a tensor of the output's dtype and shape on
    A's device (autograd hands over such a one; a direct call of the backward op may not)."""
    M, K = a.shape
    N = b.shape[1]
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{kernel}: the output's gradient must be a torch.Tensor, got {type(grad).__name__}")
    if grad.dtype is not dtype:
        raise TypeError(f"{kernel}: the output's gradient must have dtype {dtype} (the output's), got {grad.dtype}")
    if tuple(grad.shape) != (M, N):
        raise ValueError(f"{kernel}: the output's gradient must have shape {(M, N)} (the output's), got {tuple(grad.shape)}")
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
