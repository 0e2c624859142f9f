"""Register generated functions as torch.library custom ops with fake (meta) implementations, so
torch.compile graphs call them without graph breaks."""

from __future__ import annotations

from collections.abc import Callable

import torch

NAMESPACE = "specgen"
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")  # kept alive for the process
_OPS: dict[str, Callable] = {}


def register_custom_op(name: str, impl: Callable, fake: Callable, args: list[list[str]]) -> Callable:
    """Define `specgen::<name>(args) -> Tensor` once per process (re-imports reuse it); return the op."""
    if name not in _OPS:
        schema = ", ".join(f"{kind} {arg}" for arg, kind in args)
        _LIB.define(f"{name}({schema}) -> Tensor")
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", lib=_LIB)(fake)
        _OPS[name] = getattr(torch.ops.specgen, name)
    return _OPS[name]
