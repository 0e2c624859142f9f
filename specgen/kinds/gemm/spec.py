"""The GEMM kind's spec model: its semantics (operands, dtypes, major modes, batch, the epilogue chain)
and its configuration sections (sections.py), layered per target and per size variant by the core's LayeredSpec.

    out[b, m, n] = epilogue( sum_k A[b, m, k] * B[b, k, n] )      (b only when `batch = true`)

`major` names the contiguous dimension of an operand: A `k`-major is row-major (M, K); B `k`-major is
(K, N) with K contiguous, i.e. column-major, as a linear layer's weight `w.t()` is. The output is
row-major.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, StrictBool, ValidationInfo, field_validator, model_validator

from specgen.kinds.gemm.designs.cute_sm90 import options as cute_options
from specgen.kinds.gemm.designs.cute_sm90.options import CuteOptions
from specgen.kinds.gemm.designs.pallas import options as pallas_options
from specgen.kinds.gemm.designs.pallas.options import PallasOptions
from specgen.kinds.gemm.designs.triton import options as triton_options
from specgen.kinds.gemm.designs.triton.options import TritonOptions
from specgen.kinds.gemm.sections import Cluster, Operand, Output, Pipeline, Schedule, Tile, When
from specgen.kinds.gemm.training import Training, check_training, companions
from specgen.memo import per_spec
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import EpilogueOp, RuntimeArg, check_gated
from specgen.spec.models import ConfigLayer, Description, KernelName, LayeredSpec, TargetKey, TargetName
from specgen.spec.names import check_argument_names
from specgen.spec.targets import Backend

# The configuration sections a target or a size variant may override: the kind's own (sections.py), then its
# designs' option sections. Each design's options module (designs/<design>/options.py, importing no design)
# names its SECTION, the BACKEND whose targets read it, and its model; adding a design with options of its
# own is adding its module here and its section's field to GemmSpec and GemmLayer (a model missing the field
# of a section it lists fails to build; tests/test_spec.py checks each field is its options module's model).
KIND_SECTIONS: tuple[str, ...] = ("tile", "cluster", "pipeline", "schedule")
DESIGN_OPTIONS = (triton_options, cute_options, pallas_options)
CONFIG_SECTIONS: tuple[str, ...] = KIND_SECTIONS + tuple(o.SECTION for o in DESIGN_OPTIONS)
BACKEND_SECTIONS: dict[str, Backend] = {o.SECTION: o.BACKEND for o in DESIGN_OPTIONS}


class GemmLayer(ConfigLayer):
    """The GEMM's configuration sections as one layer over the kernel's (a per_target table, a variant)."""

    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = CONFIG_SECTIONS

    tile: Tile | None = None
    cluster: Cluster | None = None
    pipeline: Pipeline | None = None
    schedule: Schedule | None = None
    triton: TritonOptions | None = None
    cute: CuteOptions | None = None
    pallas: PallasOptions | None = None


class Variant(GemmLayer):
    """A configuration chosen by problem size: `when` bounds it, the other keys override the target's
    config as a per_target table does (each key given replaces, keys not given keep)."""

    when: When


class TargetConfig(GemmLayer):
    """One target's configuration over the kernel's: each key given replaces the kernel's value of that
    key, keys not given keep it (a `tile` is given whole). Semantics (operands, dtypes, batch, epilogue)
    cannot be overridden: they are the same on every target. `variants`, when given, replaces the
    kernel's list on this target."""

    variants: list[Variant] | None = None


class GemmSpec(LayeredSpec):
    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = CONFIG_SECTIONS
    BACKEND_SECTIONS: ClassVar[dict[str, Backend]] = BACKEND_SECTIONS
    WHOLE_SECTIONS: ClassVar[tuple[str, ...]] = ("tile",)  # m, n and k have no defaults
    SEMANTIC_FIELDS: ClassVar[tuple[str, ...]] = ("a", "b", "out", "accumulator", "batch", "epilogue")  # tune's cache key
    DROPPED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("per_target", "variants", "training")

    name: KernelName
    kind: Literal["gemm"]
    description: Description = ""
    a: Operand
    b: Operand
    out: Output
    accumulator: DType = DType.f32
    batch: StrictBool = False
    epilogue: list[EpilogueOp] = Field(default_factory=list)
    # A backward generated from this spec (training.py); absent: forward-only, the op refuses grad.
    training: Training | None = None
    tile: Tile
    cluster: Cluster = Cluster()
    pipeline: Pipeline = Pipeline()
    schedule: Schedule = Schedule()
    targets: list[TargetName] = Field(min_length=1)
    triton: TritonOptions = TritonOptions()
    cute: CuteOptions = CuteOptions()
    pallas: PallasOptions = PallasOptions()
    # Per-target configuration: `[kernels.per_target."cute:sm100"]` tables (not `on`: YAML 1.1 reads
    # that key as true).
    per_target: dict[TargetKey, TargetConfig] = Field(default_factory=dict)
    # Size-selected variants (`[[kernels.variants]]`), tried in order before the config above.
    variants: list[Variant] = Field(default_factory=list)

    @field_validator("epilogue")
    @classmethod
    def _gated_first(cls, epilogue: list) -> list:
        check_gated(epilogue)  # the error points at the spec's `epilogue`
        return epilogue

    @field_validator("training")
    @classmethod
    def _training(cls, training: Training | None, info: ValidationInfo) -> Training | None:
        return check_training(training, info.data)  # the error points at the spec's `training`

    # Not a spec key: the matrices a training companion's kernel stores beside its output (forward_pre's pre, a gated
    # one's gate and up halves; a gated recompute's G up half beside its gate half), each a fragment of the output's
    # shape its epilogue holds (training.py's `companions` sets it; 0 for a spec's own kernel)
    _stores: int = PrivateAttr(default=0)

    @property
    def stores(self) -> int:
        return self._stores

    def companions(self) -> tuple[tuple[str, LayeredSpec, tuple[str, ...]], ...]:
        """The GEMMs a `training` spec's backward runs, as specs resolve and the rules take (training.py)."""
        return companions(self)  # type: ignore[return-value]

    @model_validator(mode="after")
    def _argument_names(self) -> GemmSpec:
        check_argument_names((arg.name for arg in self.runtime_args()), ("a", "b", "out"),
                             "two epilogue arguments (or an operand) are named '{}'; give one op a `name`")
        return self

    def runtime_args(self) -> tuple[RuntimeArg, ...]:
        """The epilogue's tensor and scalar arguments, in its order (once per spec object: check's designs ask
        them of every effective spec several times)."""
        return _runtime_args(self)


@per_spec
def _runtime_args(spec: GemmSpec) -> tuple[RuntimeArg, ...]:
    return tuple(arg for op in spec.epilogue for arg in op.runtime_args())


SPEC_MODEL = GemmSpec  # the kind's part `spec` names its model so (specgen/kinds/models.py)
