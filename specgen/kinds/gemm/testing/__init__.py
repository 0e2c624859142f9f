"""The GEMM kind's test kit: its float64 reference (`reference.py`), the problem data the numerics run on
(`data.py`), and the shared test bases every backend's tests subclass: `numerics.NumericsTests` (outputs
against the reference on poisoned, edge-shaped problems) and `guards.GuardTests` / `guards.StagingTests`
(the entries refuse bad arguments before anything launches; legal odd layouts are staged). Also the
autograd helpers (`autograd.py`) and the rule tests' spec fragments (`rules.py`).

Test code only: these modules import torch and pytest, and nothing on specgen's check / render / compile
path imports this package (tests/test_layers.py pins it). A backend's tests name their kernels and how to
call them; the bases say what every backend must do with them.
"""
