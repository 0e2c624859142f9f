"""What every GEMM design's plan names beside the module header: the operands and the epilogue's runtime
arguments as the generated entry points take them (the shared torch and JAX host templates read these)."""

from __future__ import annotations

from dataclasses import dataclass

from specgen.abi import Arg
from specgen.design import ModuleHeader


@dataclass(frozen=True, kw_only=True)
class GemmModule(ModuleHeader):
    a: Arg
    b: Arg
    out: Arg
    args: list[Arg]  # epilogue runtime arguments, in chain order
    a_major: str  # "k" or "mn": the operand's contiguous dimension
    b_major: str
    batch: bool
