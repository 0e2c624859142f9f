"""The GEMM kind's float64 reference, shared by every backend's CPU (interpreter) and GPU tests.

`REFERENCES[kind](epilogue, a, b, args)`: the kind's result in float64, each epilogue op applied as an
unfused torch program would (so `cast` rounds through its dtype). `args` maps each runtime argument's
name (GemmSpec.runtime_args) to its tensor or float. A gated op (first in the chain) takes B's 2N columns to
N: torch's activation of the gate columns times the up columns. Activations and clamp are torch's: the kernels'
formula table (specgen/spec/formulas.py) gives the same NaN, +-inf and -0.0 results (tests/test_formulas.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from specgen.spec.dtypes import DTYPES

# a spec dtype's name -> its torch dtype (the one table: spec/dtypes.py's DTYPES)
TORCH_DTYPES = {dt.value: getattr(torch, info.torch) for dt, info in DTYPES.items()}

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}


def gated(op: dict, acc: torch.Tensor) -> torch.Tensor:
    """A gated op on the 2N accumulator columns: fn(gate) * up, gate and up by the op's layout."""
    n = acc.shape[-1] // 2
    if op["layout"] == "halves":
        gate, up = acc[..., :n], acc[..., n:]
    else:
        gate, up = acc[..., 0::2], acc[..., 1::2]
    return ACTIVATIONS[op["fn"]](gate) * up


def gemm(epilogue: list[dict], a: torch.Tensor, b: torch.Tensor, args: dict[str, object]) -> torch.Tensor:
    """epilogue(A @ B) in float64 (batched when A and B are)."""
    return apply_epilogue(epilogue, a.double() @ b.double(), args)


def apply_epilogue(epilogue: list[dict], acc: torch.Tensor, args: dict[str, object]) -> torch.Tensor:
    """The epilogue's ops on `acc` (float64 values; a cast rounds through its dtype), elementwise: a test that splits
    the chain (a training backward's pre between two ops) applies each part without a matmul by the identity, whose
    backward would spread a NaN along a row."""

    def vec(name: str, along: str) -> torch.Tensor:
        v = args[name].double().reshape(-1)
        return v[:, None] if along == "m" else v

    for op in epilogue:
        kind = op["op"]
        if kind == "gated":
            acc = gated(op, acc)
        elif kind == "bias":
            acc = acc + vec(op["name"], op["along"])
        elif kind == "scale":
            by = op["by"]
            if by == "scalar":
                acc = acc * (op["value"] if op["value"] is not None else args[op["name"] or "alpha"])
            elif by == "row":
                acc = acc * vec(op["name"] or "row_scale", "m")
            elif by == "col":
                acc = acc * vec(op["name"] or "col_scale", "n")
            else:
                acc = acc * vec("scale_a", "m") * vec("scale_b", "n")
        elif kind == "activation":
            acc = ACTIVATIONS[op["fn"]](acc)
        elif kind == "residual":
            acc = acc + op["beta"] * args[op["name"]].double()
        elif kind == "clamp":
            acc = acc.clamp(min=op["min"], max=op["max"])
        elif kind == "cast":
            acc = acc.to(TORCH_DTYPES[op["dtype"]]).double()
        else:
            raise AssertionError(f"unknown epilogue op {kind}")
    return acc


REFERENCES: dict[str, Callable[..., torch.Tensor]] = {"gemm": gemm}
