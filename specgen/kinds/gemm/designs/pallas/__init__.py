"""The gemm_pallas design: see design.py. Imports nothing, so names.py can be read alone."""
