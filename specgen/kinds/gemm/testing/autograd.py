"""What the autograd and guard tests of every backend share: the refusal messages (specgen/runtime/guards.py
and specgen/runtime/jax.py), and stand-ins for CUDA tensors on a CPU machine: `FakeCuda` (a wrapper, for
the CUDA-only torch entries' fast paths: CuTe's `_lean`, Mosaic GPU's `_direct`) and `cuda_like` (a real
tensor that says it sits on CUDA device 0, for the torch host guards, which check `isinstance`); and the CuTe
JAX backward's calls in a traced jaxpr (`cute_train_calls`)."""

from __future__ import annotations

import re

import torch


def grad_message(name: str, arg: str) -> str:
    """The torch entries' refusal of an argument that requires grad in grad mode (a regex)."""
    return re.escape(f"{name}: argument '{arg}' requires grad, and specgen's generated ops have no backward yet")


def derivative_message(name: str, *args: str) -> str:
    """The JAX entries' refusal of a derivative through the op with respect to `args` (a regex)."""
    quoted = ", ".join(f"'{a}'" for a in args)
    which = f"argument {quoted} is" if len(args) == 1 else f"arguments {quoted} are"
    return re.escape(f"{name}: {which} being differentiated (jax.grad, jax.vjp, jax.jvp or jax.linearize), and "
                     "specgen's generated ops have no derivative rule yet")


class FakeCuda:
    """A CPU tensor that answers as if it sat on CUDA device 0 (`get_device`, `is_cuda`): what a guard reads
    of a tensor (shape, dtype, strides, address, requires_grad) comes from the CPU tensor."""

    is_cuda = True

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def get_device(self) -> int:
        return 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.t, name)


class CudaLike(torch.Tensor):
    """A CPU tensor whose `device`, `is_cuda` and `get_device()` say CUDA device 0: a `torch.Tensor` (the
    guards' isinstance checks hold) whose shape, dtype, strides and address are the CPU tensor's. Torch
    functions on it return plain tensors (`__torch_function__` disabled): `cuda_like` them again."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:  # type: ignore[override]
        return 0


def cuda_like(x: object) -> object:
    """`x` as a `CudaLike` where it is a CPU tensor; anything else (a meta tensor, a number, a list) as it is."""
    if type(x) is torch.Tensor and x.device.type == "cpu":
        return x.as_subclass(CudaLike)
    return x


def cute_train_calls(jaxpr: object) -> list[str]:
    """The kernels (their config names: a role, a columns kernel) a CuTe module's JAX backward calls in a traced
    jaxpr (`jax.make_jaxpr(jax.grad(...))(...).jaxpr`), in order, nested jaxprs (jit, custom_vjp) included."""
    from specgen.runtime.cute_jax_train import cute_train_p

    found: list[str] = []

    def walk(j: object) -> None:
        for e in j.eqns:  # type: ignore[attr-defined]
            if e.primitive is cute_train_p:
                found.append(e.params["kernel"].variant)
            for p in e.params.values():
                inner = getattr(p, "jaxpr", None)
                if inner is not None:
                    walk(getattr(inner, "jaxpr", inner))

    walk(jaxpr)
    return found
