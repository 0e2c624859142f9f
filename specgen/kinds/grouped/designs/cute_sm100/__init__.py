"""The grouped CuTe sm100 design: see design.py. Imports nothing, so names.py can be read alone."""
