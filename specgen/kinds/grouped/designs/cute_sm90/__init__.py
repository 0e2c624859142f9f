"""The grouped CuTe sm90 design: see design.py. Imports nothing, so names.py can be read alone."""
