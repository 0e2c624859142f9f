"""The grouped kind's epilogue ops: the dense kind's chain (specgen/spec/epilogue.py: gated, scale, activation,
clamp, cast, the same formula table; a gated op reads B (G, K, 2N)) plus operands indexed by group. A bias of a
grouped GEMM is each expert's own:
(G, N), row g added to the rows of group g (torch's `_grouped_mm` takes the same shape, though it refuses it
today). A per-row scale (`scale`, by = "row") is (total_rows,): a router weight per routed token. A per-column
scale is each expert's own, (G, N) (`by = "col"`), and fp8 rowwise scaling (`by = "rowcol"`) takes
torch._scaled_grouped_mm's pair: `scale_a` (total_rows,), one per row of A, and `scale_b` (G, N), one per
expert and column of B."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

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
    along: ClassVar[str] = "n"  # each group's row of N values: a bias along N, as the dense kind's checks read it

    def runtime_args(self) -> list[RuntimeArg]:
        return [RuntimeArg(self.name, GROUP_N, self.dtype, f"bias per group, (G, N) {self.dtype}")]  # type: ignore[arg-type]


class GroupScale(Scale):
    """The dense kind's `scale` (a scalar, or a per-row vector (total_rows,)) whose column factors are per group:
    `col` takes (G, N), row g scaling the columns of group g; `rowcol` takes torch._scaled_grouped_mm's rowwise
    fp8 scales, `scale_a` (total_rows,) and `scale_b` (G, N)."""

    def runtime_args(self) -> list[RuntimeArg]:
        if self.by == "col":
            return [RuntimeArg(self.name or "col_scale", GROUP_N, DType.f32, "per-column scale per group, (G, N) f32")]
        if self.by == "rowcol":
            return [RuntimeArg("scale_a", "vec_m", DType.f32, "per-row scale of A, (M,) f32"),
                    RuntimeArg("scale_b", GROUP_N, DType.f32, "per-column scale of each group's B, (G, N) f32")]
        return super().runtime_args()


GroupedEpilogueOp = Annotated[Gated | GroupBias | GroupScale | Activation | Clamp | Cast, Field(discriminator="op")]
