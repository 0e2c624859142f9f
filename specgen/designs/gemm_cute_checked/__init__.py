"""The gemm_cute_checked design: see design.py. Imports nothing, so names.py can be read alone."""
