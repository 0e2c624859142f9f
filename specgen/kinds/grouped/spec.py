"""The grouped GEMM kind's spec model: its semantics and its configuration sections, layered per target and per
size variant by the core's LayeredSpec. The configuration sections are the dense GEMM's (kinds/gemm/sections.py:
tile, cluster, pipeline, schedule, and `When` for a variant's bounds on M = total rows, N and K).

    for each group g with rows [start_g, end_g):   out[start_g:end_g] = epilogue(A[start_g:end_g] @ B[g])

A is (total_rows, K), B is (G, K, N) (its `major` names the contiguous dim, as the dense kind's does: `k` is a
(G, N, K) weight viewed transposed, how torch._grouped_mm callers pass `w.transpose(-2, -1)`), out is
(total_rows, N), row-major. The group index lives on the device: `groups.index = "offs"` takes int32
cumulative ends (G,) as torch._grouped_mm does (group 0 starts at 0), `"sizes"` int32 group sizes (G,) as
jax.lax.ragged_dot does; the kernels read it there, never the host. Rows past the last group's end are
`groups.tail`: `"untouched"` (torch._grouped_mm leaves them unwritten) or `"zero"` (ragged_dot's zeros).
A JAX entry is functional, so `"untouched"` there means: the kernel writes no value of its own past the last
group, and the result holds the `out` array the caller passes (aliased to the result) in those rows, or
unspecified values (whatever the fresh output buffer held) where the caller passes none.

`groups.ragged = "k"` is the other grouping, the weight gradient's (torch._grouped_mm's 2-D x 2-D form):

    for each group g with K rows [start_g, end_g):   out[g] = epilogue(A[:, start_g:end_g] @ B[start_g:end_g])

A is (M, total_K) (M-major: an MoE layer's (tokens, H) input passed transposed), B is (total_K, N) (N-major: the
output gradient (tokens, I) as it is), out is (G, M, N); an empty group's out[g] is the epilogue of zeros. Every
output row is written: `groups.tail` is the ragged-M kernels' and must stay "untouched".
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from specgen.kinds.gemm.sections import Cluster, Operand, Output, Pipeline, Schedule, Tile, When
from specgen.kinds.grouped.designs.cute_sm90 import options as cute_options
from specgen.kinds.grouped.designs.cute_sm90.options import CuteOptions
from specgen.kinds.grouped.designs.cute_sm100 import options as cute_sm100_options
from specgen.kinds.grouped.designs.pallas import options as pallas_options
from specgen.kinds.grouped.designs.pallas.options import GroupedPallasOptions
from specgen.kinds.grouped.designs.triton import options as triton_options
from specgen.kinds.grouped.designs.triton.options import GroupedTritonOptions
from specgen.kinds.grouped.epilogue import GroupedEpilogueOp
from specgen.kinds.grouped.training import Training, check_grouped_training, companions
from specgen.memo import per_spec
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import RuntimeArg, check_gated
from specgen.spec.models import (
    ConfigLayer,
    Description,
    KernelName,
    LayeredSpec,
    Strict,
    TargetKey,
    TargetName,
)
from specgen.spec.names import check_argument_names
from specgen.spec.targets import Backend
from specgen.targets import TARGETS

KIND_SECTIONS: tuple[str, ...] = ("tile", "cluster", "pipeline", "schedule")
# (both CuTe designs read the one `cute` section: a section is listed once)
DESIGN_OPTIONS = (triton_options, cute_options, pallas_options, cute_sm100_options)
CONFIG_SECTIONS: tuple[str, ...] = KIND_SECTIONS + tuple(dict.fromkeys(o.SECTION for o in DESIGN_OPTIONS))
BACKEND_SECTIONS: dict[str, Backend] = {o.SECTION: o.BACKEND for o in DESIGN_OPTIONS}
# The targets this kind's designs render for (each design's options module says its backend and MMA families):
# a target of another is refused when the spec loads.
SERVED_TARGETS: tuple[str, ...] = tuple(name for name, row in TARGETS.items()
                                        if any(row.backend == o.BACKEND and row.mma in o.MMA for o in DESIGN_OPTIONS))
OPERANDS = ("a", "b", "out", "offs", "group_sizes")  # the entry's own arguments: an epilogue argument may not take these names


class Groups(Strict):
    """How the group index is passed and what happens to the rows past the last group."""

    index: Literal["offs", "sizes"] = "offs"
    tail: Literal["untouched", "zero"] = "untouched"
    # The ragged dimension: "m" (the forward and input gradient: each group its rows of A and out) or "k" (the
    # weight gradient: each group its K rows of A^T and B, out (G, M, N)).
    ragged: Literal["m", "k"] = "m"


class GroupedLayer(ConfigLayer):
    """The grouped kind's configuration sections as one layer over the kernel's."""

    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = CONFIG_SECTIONS

    tile: Tile | None = None
    cluster: Cluster | None = None
    pipeline: Pipeline | None = None
    schedule: Schedule | None = None
    triton: GroupedTritonOptions | None = None
    cute: CuteOptions | None = None
    pallas: GroupedPallasOptions | None = None


class GroupedVariant(GroupedLayer):
    """A configuration chosen by problem size (M: total rows), as the dense kind's variants are."""

    when: When


class GroupedTargetConfig(GroupedLayer):
    """One target's configuration over the kernel's (semantics stay the same on every target)."""

    variants: list[GroupedVariant] | None = None


class GroupedSpec(LayeredSpec):
    """A grouped GEMM (`kind = "grouped"`): out[rows of group g] = epilogue(A[rows of g] @ B[g]), A (total_rows,
    K), B (G, K, N), the group index on the device (`groups`)."""

    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = CONFIG_SECTIONS
    BACKEND_SECTIONS: ClassVar[dict[str, Backend]] = BACKEND_SECTIONS
    WHOLE_SECTIONS: ClassVar[tuple[str, ...]] = ("tile",)
    SEMANTIC_FIELDS: ClassVar[tuple[str, ...]] = ("a", "b", "out", "accumulator", "groups", "epilogue")
    DROPPED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("per_target", "variants", "training")

    name: KernelName
    kind: Literal["grouped"]
    description: Description = ""
    a: Operand
    b: Operand
    out: Output
    accumulator: DType = DType.f32
    groups: Groups = Groups()
    epilogue: list[GroupedEpilogueOp] = Field(default_factory=list)
    # A backward generated from this spec (training.py: the dense kind's section, ragged M); absent: forward-only,
    # the op refuses inputs that require grad.
    training: Training | None = None
    tile: Tile
    cluster: Cluster = Cluster()
    pipeline: Pipeline = Pipeline()
    schedule: Schedule = Schedule(persistent=True)
    targets: list[TargetName] = Field(min_length=1)
    triton: GroupedTritonOptions = GroupedTritonOptions()
    cute: CuteOptions = CuteOptions()
    pallas: GroupedPallasOptions = GroupedPallasOptions()
    per_target: dict[TargetKey, GroupedTargetConfig] = Field(default_factory=dict)
    variants: list[GroupedVariant] = Field(default_factory=list)

    @field_validator("epilogue")
    @classmethod
    def _gated_first(cls, epilogue: list) -> list:
        check_gated(epilogue)  # the error points at the spec's `epilogue`
        return epilogue

    @field_validator("training")
    @classmethod
    def _training(cls, training: Training | None, info: ValidationInfo) -> Training | None:
        return check_grouped_training(training, info.data)  # the error points at the spec's `training`

    def companions(self) -> tuple[tuple[str, LayeredSpec, tuple[str, ...]], ...]:
        """The grouped GEMMs a `training` spec's backward runs, as specs resolve and the rules take (training.py)."""
        return companions(self)  # type: ignore[return-value]

    @model_validator(mode="after")
    def _arguments(self) -> GroupedSpec:
        for t in self.targets:
            if str(t) not in SERVED_TARGETS:
                raise ValueError(f"target '{t}': no grouped design serves it yet (the grouped designs serve "
                                 f"{', '.join(SERVED_TARGETS)})")
        if self.groups.ragged == "k":
            if self.groups.tail != "untouched":
                raise ValueError("groups.tail = 'zero' is for ragged M (rows past the last group): a ragged-K kernel "
                                 "writes every row of out (G, M, N); drop groups.tail")
            for i, op in enumerate(self.epilogue):
                if op.op == "gated":
                    raise ValueError(f"epilogue[{i}]: a gated op is the forward's (gate and up projections in one "
                                     "GEMM); a ragged-K kernel (the weight gradient) takes none")
                if op.op == "scale" and op.by != "scalar":
                    raise ValueError(f"epilogue[{i}]: scale by = '{op.by}' is a ragged-M kernel's (a routed row's weight, "
                                     "fp8 rowwise scales); a ragged-K kernel takes scalar scales (by = 'scalar')")
            for side in ("a", "b"):
                if getattr(self, side).dtype.is_fp8:
                    raise ValueError(f"{side}.dtype = {getattr(self, side).dtype} with groups.ragged = 'k': fp8 is the "
                                     "forward's (ragged M); the weight gradient takes 16- and 32-bit operands")
        check_argument_names((arg.name for arg in self.runtime_args()), OPERANDS,
                             "an epilogue argument is named '{}', which the entry's own argument has; give the op a `name`")
        return self

    def runtime_args(self) -> tuple[RuntimeArg, ...]:
        """The epilogue's tensor and scalar arguments, in its order."""
        return _runtime_args(self)


@per_spec
def _runtime_args(spec: GroupedSpec) -> tuple[RuntimeArg, ...]:
    return tuple(arg for op in spec.epilogue for arg in op.runtime_args())


SPEC_MODEL = GroupedSpec  # the kind's part `spec` names its model so (specgen/kinds/models.py)
