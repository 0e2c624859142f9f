"""What the autograd tests of every backend share: the refusal messages (specgen/runtime/guards.py and
specgen/runtime/jax.py), and a stand-in for a CUDA tensor, so that the CUDA-only torch entries' fast paths
(CuTe's `_lean`, Mosaic GPU's `_direct`) can be called on a CPU machine."""

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
