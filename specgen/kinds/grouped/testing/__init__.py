"""The grouped GEMM kind's test kit: its float64 per-group reference (`reference.py`), the problems its numerics
run on (`data.py`: group sizes with empty groups, a NaN-poisoned output inside a poisoned storage), the shared
test bases every backend's tests subclass (`numerics.GroupedNumericsTests`, `guards.GroupedGuardTests`) and the
spec forms its tests render (`specs.py`).

Test code only: these modules import torch and pytest, and nothing on specgen's check / render / compile path
imports this package (tests/test_layers.py pins it)."""
