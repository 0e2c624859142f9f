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


def op_name(kernel: str, spec_hash: str) -> str:
    return f"{kernel}_{spec_hash}"


def register_custom_op(kernel: str, spec_hash: str, impl: Callable, fake: Callable, args: list[list[str]]) -> Callable:
    """Define `specgen::<kernel>_<spec_hash>(args) -> Tensor` once per process (re-imports reuse it);
    return the op."""
    name = op_name(kernel, spec_hash)
    if name not in _OPS:
        schema = ", ".join(f"{kind} {arg}" for arg, kind in args)
        _LIB.define(f"{name}({schema}) -> Tensor")
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", lib=_LIB)(fake)
        _OPS[name] = getattr(torch.ops.specgen, name)
    return _OPS[name]
