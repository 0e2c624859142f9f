"""The GEMM kind's spec model: its semantics (operands, dtypes, major modes, batch, the epilogue chain)
and its configuration sections, layered per target and per size variant by the core's LayeredSpec.

    out[b, m, n] = epilogue( sum_k A[b, m, k] * B[b, k, n] )      (b only when `batch = true`)

`major` names the contiguous dimension of an operand: A `k`-major is row-major (M, K); B `k`-major is
(K, N) with K contiguous, i.e. column-major, as a linear layer's weight `w.t()` is. The output is
row-major.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, model_validator

from specgen.spec.dtypes import DType
from specgen.spec.epilogue import EpilogueOp, RuntimeArg
from specgen.spec.models import (
    Cluster,
    CuteOptions,
    Description,
    KernelName,
    LayeredSpec,
    Operand,
    Output,
    PallasOptions,
    Pipeline,
    Schedule,
    TargetConfig,
    TargetKey,
    TargetName,
    Tile,
    TritonOptions,
    Variant,
)
from specgen.spec.names import derived_names


class GemmSpec(LayeredSpec):
    name: KernelName
    kind: Literal["gemm"]
    description: Description = ""
    a: Operand
    b: Operand
    out: Output
    accumulator: DType = DType.f32
    batch: StrictBool = False
    epilogue: list[EpilogueOp] = Field(default_factory=list)
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

    @model_validator(mode="after")
    def _argument_names(self) -> GemmSpec:
        names = {"a", "b", "out"}
        owner: dict[str, str] = {}  # every name an argument brings into the generated code -> that argument
        for arg in self.runtime_args():
            if arg.name in names:
                raise ValueError(
                    f"two epilogue arguments (or an operand) are named '{arg.name}'; give one op a `name`"
                )
            names.add(arg.name)
            for n in [arg.name, *derived_names(arg.name)]:
                if n in owner and owner[n] != arg.name:
                    raise ValueError(f"epilogue arguments '{owner[n]}' and '{arg.name}' both bring the name '{n}' "
                                     "into the generated kernel; rename one (give its op a `name`)")
                owner[n] = arg.name
        return self

    def runtime_args(self) -> list[RuntimeArg]:
        return [arg for op in self.epilogue for arg in op.runtime_args()]
