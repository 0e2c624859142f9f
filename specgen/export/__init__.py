"""`specgen compile --export DIR`: kernels for C++ programs that start without Python.

A design exports through its `export_hook` (the CuTe sm90 design: specgen/designs/gemm_cute_sm90/export.py,
with its C ABI in export_abi.py); `toolkit` here finds the CUDA headers and runtime a build needs (the
toolkit from the package index) for any design's export.
"""
