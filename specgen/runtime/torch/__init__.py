"""Run-time helpers every torch-facing module uses (Triton today, CuTe next): custom-op registration.
The argument guards (specgen/runtime/guards.py) belong here too and move when their owner's edits land."""
