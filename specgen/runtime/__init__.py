"""Tiny helpers the generated modules import, by framework and backend: `torch/` (custom ops),
`guards.py` (the torch launchers' argument guards), `triton/` (launch, descriptors), `cute.py` (the CuTe
launcher and disk cache), `jax.py` (trace-time checks, placement, DLPack) and `mgpu.py` (Mosaic GPU's
padding and vector loads). Imported only by generated code (never by check/render): the submodules may
import torch, triton, cutlass or jax. This package itself imports nothing (render reads RUNTIME_ABI).
"""

# Bumped when what generated modules import from here changes incompatibly; each module records the
# version it was rendered against (METADATA["runtime_abi"]) and refuses to import under another.
RUNTIME_ABI = 1
