"""Register generated functions as torch.library custom ops with fake (meta) implementations, so
torch.compile graphs call them without graph breaks.

An op's name carries the spec hash (`specgen::<kernel>_<spec hash>`): two rendered packages that both
define a kernel of one name from different specs register two ops, never one op that runs whichever
package registered first. The same spec rendered twice shares its op (the same kernel either way)."""

from __future__ import annotations

from collections.abc import Callable

import torch

NAMESPACE = "specgen"
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")  # kept alive for the process
_OPS: dict[str, Callable] = {}
_AUTOGRAD: set[str] = set()


def op_name(kernel: str, spec_hash: str) -> str:
    return f"{kernel}_{spec_hash}"


def register_custom_op(kernel: str, spec_hash: str, impl: Callable, fake: Callable, args: list[list[str]],
                       returns: str = "Tensor") -> Callable:
    """Define `specgen::<kernel>_<spec_hash>(args) -> returns` once per process (re-imports reuse it);
    return the op."""
    name = op_name(kernel, spec_hash)
    if name not in _OPS:
        schema = ", ".join(f"{kind} {arg}" for arg, kind in args)
        _LIB.define(f"{name}({schema}) -> {returns}")
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", lib=_LIB)(fake)
        _OPS[name] = getattr(torch.ops.specgen, name)
    return _OPS[name]


def register_backward(kernel: str, spec_hash: str, backward: Callable, setup_context: Callable) -> None:
    """Give `specgen::<kernel>_<spec_hash>` its autograd formula (torch.library.register_autograd), once per
    process: a module rendered from the same spec registers the same kernels (a re-import keeps the first)."""
    name = op_name(kernel, spec_hash)
    if name not in _AUTOGRAD:
        torch.library.register_autograd(f"{NAMESPACE}::{name}", backward, setup_context=setup_context, lib=_LIB)
        _AUTOGRAD.add(name)
