"""`specgen compile --export DIR`: kernels for C++ programs that start without Python.

A design exports through its `export_hook` (the CuTe designs, sm90 and sm100, share one:
specgen/kinds/gemm/designs/cute_export/export.py, with its C ABI in abi.py); `toolkit` here finds the CUDA headers
and runtime a build needs (the toolkit from the package index) for any design's export.
"""
