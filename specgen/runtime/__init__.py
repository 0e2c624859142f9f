"""Tiny helpers the generated modules import, by framework and backend: `torch/` (custom ops; the
argument guards in guards.py), `triton/` (launch, descriptors); `cute/` and `jax/` join them with their
designs. Imported only by generated code (never by check/render): the submodules may import torch,
triton, cutlass or jax. This package itself imports nothing (render reads RUNTIME_ABI from it).
"""

# Bumped when what generated modules import from here changes incompatibly; each module records the
# version it was rendered against (METADATA["runtime_abi"]) and refuses to import under another.
RUNTIME_ABI = 1
