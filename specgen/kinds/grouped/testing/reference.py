"""The grouped kind's float64 reference: a loop over the groups, each group's rows through the dense kind's
float64 reference (kinds/gemm/testing/reference.py: the epilogue applied op by op as an unfused torch program
would), with the group's operands: its weight B[g], its row g of every (G, N) operand (a bias, a column scale,
fp8's scale_b), its rows of every (M,) one (a router weight, fp8's scale_a). fp8 operands enter as the values
they hold, so the reference is torch._scaled_grouped_mm's meaning: (A[rows] @ B[g]) * scale_a[rows, None] *
scale_b[g] in float64.

Tensors in logical layouts: A (M, K), B (G, K, N) (G, K, 2N with a gated epilogue, which the dense reference
applies to the group's 2N columns), the index as the spec passes it (offs: cumulative ends; or sizes), the
epilogue's arguments by name ((G, N) and (M,) tensors, scalars as floats)."""

from __future__ import annotations

import torch

from specgen.kinds.gemm.testing.reference import gemm
from specgen.kinds.grouped.epilogue import GROUP_N
from specgen.kinds.grouped.spec import GroupedSpec


def group_bounds(spec: dict, index: torch.Tensor, rows: int) -> list[tuple[int, int]]:
    """(start, end) of each group's rows, from the index as the spec passes it (offs: cumulative ends; sizes)."""
    values = [int(v) for v in index.cpu()]
    ends = values if spec["groups"]["index"] == "offs" else [sum(values[: i + 1]) for i in range(len(values))]
    bounds, start = [], 0
    for end in ends:
        assert start <= end <= rows, f"a test's group index must be valid: {values} over {rows} rows"
        bounds.append((start, end))
        start = end
    return bounds


def dense_epilogue(spec: dict) -> list[dict]:
    """The grouped chain as the dense reference reads it: a per-group bias is a bias along N (of its group)."""
    return [{**op, "along": "n"} if op["op"] == "bias" else op for op in spec["epilogue"]]


def grouped(spec: dict, a: torch.Tensor, b: torch.Tensor, index: torch.Tensor,
            args: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
    """(out in float64, which rows the kernel writes): each group's rows computed on their own; rows past the
    last group are zeros where the spec says `tail = "zero"` (written) and not written otherwise."""
    rows, n = a.shape[0], b.shape[2] // (2 if spec["epilogue"] and spec["epilogue"][0]["op"] == "gated" else 1)
    out = torch.zeros(rows, n, dtype=torch.float64)
    written = torch.zeros(rows, dtype=torch.bool)
    chain = dense_epilogue(spec)
    shapes = {arg.name: arg.shape for arg in GroupedSpec.model_validate(spec).runtime_args()}
    group_args = {name for name, shape in shapes.items() if shape == GROUP_N}  # a bias, a column scale: (G, N)
    row_args = {name for name, shape in shapes.items() if shape == "vec_m"}  # a router weight, fp8's scale_a: (M,)
    end = 0
    for g, (start, end) in enumerate(group_bounds(spec, index, rows)):
        if start == end:
            continue
        mine = {name: (v[g] if name in group_args else v[start:end] if name in row_args else v) for name, v in args.items()}
        out[start:end] = gemm(chain, a[start:end].cpu(), b[g].cpu(), mine)
        written[start:end] = True
    if spec["groups"]["tail"] == "zero":
        written[end:] = True
    return out, written


def assert_rows_match(out: torch.Tensor, ref: torch.Tensor, what: str, rtol: float = 2e-2, atol: float = 2e-2) -> None:
    """`out` against a float64 reference whose NaN rows are those no group holds (they keep the poison `out` was
    filled with): the same rows NaN, the others within `atol + rtol * |ref|` (bf16 outputs: 2e-2 each)."""
    tail = ref.isnan()
    assert torch.equal(out.isnan(), tail), f"{what}: rows written outside the groups, or rows left unwritten"
    err = (out.double() - ref).abs()[~tail]
    tol = atol + rtol * ref.abs()[~tail]
    assert bool((err <= tol).all()), f"{what}: max error {err.max().item():.4g}"


# Group sizes the GPU tests run every grouped kernel on (each file adds its own: even splits at its tile, a decode
# variant's few rows, G = 1): empty groups anywhere, a group holding every row, sizes no multiple of a tile, a tile
# shared by many groups, 256 groups of 0-2 rows.
RAGGED_SIZES: dict[str, list[int]] = {
    "first_middle_last_empty": [0, 37, 0, 0, 130, 1, 0],
    "all_empty": [0, 0, 0],
    "one_holds_all": [0, 0, 301, 0],
    "odd": [1, 127, 129, 3, 255, 2],
    "shared_tiles": [5, 7, 3, 2, 9, 4, 1, 6],  # a 128-row tile spans many groups
    "many_tiny": [i % 3 for i in range(256)],  # 256 groups of 0-2 rows
}
DECODE_SIZES = [2, 0, 1, 3, 2, 0, 2, 2, 1, 2, 0, 3, 2, 2, 1, 2]  # M = 42 <= 64: a decode variant's rows


def dequantized(a: object, b: object, scale_a: object, scale_b: object, b_major: str) -> tuple:
    """An fp8 forward's dequantized operands in float64 numpy, A scale_a (M, K) and B[g] scale_b[g] in B's stored
    layout ((G, N, K) K-major, (G, K, N) N-major): what a training backward's dA and dB are the gradients of (the
    grouped Pallas TPU and Mosaic GPU tests' references). Arrays of any library numpy reads (fp8 through f32)."""
    import numpy as np

    def f64(x: object) -> np.ndarray:
        return np.asarray(np.asarray(x, np.float32), np.float64)

    sa, sb = f64(scale_a).reshape(-1, 1), f64(scale_b)
    return f64(a) * sa, f64(b) * (sb[:, :, None] if b_major == "k" else sb[:, None, :])
