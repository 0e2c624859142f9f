"""The grouped kind's float64 reference: a loop over the groups, each group's rows through the dense kind's
float64 reference (kinds/gemm/testing/reference.py: the epilogue applied op by op as an unfused torch program
would), with the group's operands: its weight B[g], its bias row bias[g], its rows of a per-row scale.

Tensors in logical layouts: A (M, K), B (G, K, N) (G, K, 2N with a gated epilogue, which the dense reference
applies to the group's 2N columns), the index as the spec passes it (offs: cumulative ends; or
sizes), the epilogue's arguments by name (a per-group bias (G, N), a per-row scale (M,), scalars as floats)."""

from __future__ import annotations

import torch

from specgen.kinds.gemm.testing.reference import gemm


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
    group_args = {op["name"] for op in spec["epilogue"] if op["op"] == "bias"}
    row_args = {op["name"] or "row_scale" for op in spec["epilogue"] if op["op"] == "scale" and op["by"] == "row"}
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
