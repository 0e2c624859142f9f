"""Tensors on the GPU for any kind's inputs and checks: a spec dtype's torch dtype, random normal tensors,
and the one result-error measure the benches and the tuner read. torch is imported inside the functions."""

from __future__ import annotations

from typing import Any

from specgen.spec.dtypes import DTYPES

# a spec dtype's name -> the torch attribute (the one table: spec/dtypes.py's DTYPES)
TORCH_DTYPES = {dt.value: info.torch for dt, info in DTYPES.items()}


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_DTYPES[name])


def random_normal(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    """A standard normal tensor on the GPU, drawn in f32 from a seeded generator and cast to the spec dtype."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=g)
    return x.to(torch_dtype(dtype))


def max_error(ours: Any, peer: Any) -> float:
    """max |ours - peer| / max |peer|: 0.01 is the benches' bar (one output rounding)."""
    import torch

    if not isinstance(peer, torch.Tensor):
        peer = torch.from_dlpack(peer)
    o, p = ours.float(), peer.float()
    return float((o - p).abs().max().item() / max(p.abs().max().item(), 1e-30))
