"""Tensors on the GPU for any kind's inputs and checks: a spec dtype's torch dtype, random normal tensors,
and the one result-error measure the benches and the tuner read. torch is imported inside the functions."""

from __future__ import annotations

from typing import Any

TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "tf32": "float32", "int8": "int8",
                "int32": "int32", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


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
