"""`specgen compile --export DIR`: CuTe kernels for C++ programs that start without Python.

`abi` turns a design's plan into the C entry points (pure data and Jinja: no cutlass); `cute` compiles
each config through the CuTe DSL and writes its object and header with the DSL's own `export_to_c`;
`toolkit` finds the CUDA headers and runtime a build needs (the toolkit from the package index).
"""
