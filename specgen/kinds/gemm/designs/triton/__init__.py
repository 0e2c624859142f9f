"""The gemm_triton design: see design.py. Imports nothing, so names.py can be read alone."""
