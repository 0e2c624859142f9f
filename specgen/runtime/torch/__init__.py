"""Run-time helpers every torch-facing generated module uses (Triton, CuTe): custom-op registration
(`ops.py`). The argument guards they share are specgen/runtime/guards.py."""
