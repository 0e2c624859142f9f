"""The grouped Triton design: see design.py. Imports nothing, so names.py can be read alone."""
