"""The grouped kind's epilogue ops: the dense kind's chain (specgen/spec/epilogue.py: gated, scale, activation,
clamp, cast, the same formula table; a gated op reads B (G, K, 2N)) plus operands indexed by group. A bias of a
grouped GEMM is each expert's own:
(G, N), row g added to the rows of group g (torch's `_grouped_mm` takes the same shape, though it refuses it
today). A per-row scale (`scale`, by = "row") is (total_rows,): a router weight per routed token."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specgen.spec.dtypes import DType
from specgen.spec.epilogue import Activation, Cast, Clamp, Gated, Identifier, RuntimeArg, Scale, _Op

# Runtime argument shapes beyond the dense kind's (scalar, vec_m, vec_n, matrix): one row per group.
GROUP_N = "group_n"


class GroupBias(_Op):
    """out += bias[g], one row of N values per group (G, N), added to the rows of group g."""

    op: Literal["bias"]
    dtype: DType = DType.f32
    name: Identifier = "bias"

    def runtime_args(self) -> list[RuntimeArg]:
        return [RuntimeArg(self.name, GROUP_N, self.dtype, f"bias per group, (G, N) {self.dtype}")]  # type: ignore[arg-type]


# Scales by column (per group: (G, N), fp8 rowwise B scales) are the next slice: refused by the spec.
ROW_SCALES = ("scalar", "row")

GroupedEpilogueOp = Annotated[Gated | GroupBias | Scale | Activation | Clamp | Cast, Field(discriminator="op")]
