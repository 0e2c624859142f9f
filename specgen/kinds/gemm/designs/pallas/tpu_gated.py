"""The dense Pallas TPU kernel's gated epilogue (SwiGLU, GeGLU; templates/gemm/pallas/gemm_tpu.py.jinja), the grouped
TPU kernel's form (specgen/kinds/grouped/designs/pallas): `halves` only (PAL013). B ([batch,] 2N, K) K-major as
stored is viewed, without a copy, as ([batch,] 2, N, K) and passed twice, a gate block (half 0) and an up block
(half 1) of tile.n x tile.k a K step; B ([batch,] K, 2N) N-major is passed twice as stored, the gate block j and the
up block j + N / tile.n (N a multiple of the block: the entry checks it when it traces, with a training spec's
backward blocks along N too). Two MXU dots over the same A block into a gate and an up f32 scratch, and fn(gate) *
up at the last K step before the rest of the chain. The VMEM model counts the up block and the second accumulator
(`b_halves`). Imports jax-free code only."""

from __future__ import annotations

from collections.abc import Callable

from specgen.abi import Arg
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.epilogue import gated_op


def b_halves(spec: GemmSpec) -> int:
    """B blocks a K step and f32 accumulators: 2 with a gated epilogue (gate and up), else 1."""
    return 2 if gated_op(spec.epilogue) is not None else 1


def tpu_gated_fields(spec: GemmSpec, fields: dict[str, object], arg: Callable[..., Arg]) -> dict[str, object]:
    """The TPU plan's module fields with a gated epilogue: `gated`, and B documented with its 2N rows (N2)."""
    op = gated_op(spec.epilogue)
    if op is None:
        return fields
    if op.layout != "halves":  # check refuses it (PAL013)
        raise ValueError(f"{spec.name}: the TPU kernel reads a gated B as halves (PAL013)")
    lead = "batch, " if spec.batch else ""
    if spec.b.major == "k":
        doc = f"({lead}N2, K) {spec.b.dtype}, stored k-major, N2 = 2N: gate rows [0, N), up rows [N, 2N) (torch.cat([w_gate, w_up]))"
    else:
        doc = (f"({lead}K, N2) {spec.b.dtype}, stored mn-major, N2 = 2N: gate columns [0, N), up columns [N, 2N); N a "
               "multiple of the blocks along N (N_BLOCKS)")
    return {**fields, "gated": True, "b": arg("b", "b", spec.b.dtype, doc)}
