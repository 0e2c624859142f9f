"""The kernel spec, as pydantic v2 models. Strict: unknown fields are errors, models are frozen.

A spec file holds `kernels`, a list; each kernel has a `kind` (only `gemm` today: the list is a
discriminated union so that other kinds slot in beside it). GEMM semantics:

    out[b, m, n] = epilogue( sum_k A[b, m, k] * B[b, k, n] )      (b only when `batch = true`)

`major` names the contiguous dimension of an operand: A `k`-major is row-major (M, K); B `k`-major is
(K, N) with K contiguous, i.e. column-major, as a linear layer's weight `w.t()` is. The output is
row-major.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PositiveInt,
    WithJsonSchema,
    model_validator,
)

from specgen.spec.dtypes import DType
from specgen.spec.epilogue import EpilogueOp, Identifier, RuntimeArg
from specgen.spec.targets import ALL_TARGETS, TARGET_ARCHS, Backend


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Major = Literal["k", "mn"]
Stages = PositiveInt | Literal["auto"]


class Operand(Strict):
    dtype: DType
    major: Major = "k"


class Output(Strict):
    dtype: DType


class Tile(Strict):
    """The CTA (or TPU block) tile: out block m x n, reduced over k per pipeline step."""

    m: PositiveInt
    n: PositiveInt
    k: PositiveInt


class Cluster(Strict):
    m: PositiveInt = 1
    n: PositiveInt = 1

    @property
    def size(self) -> int:
        return self.m * self.n


class Pipeline(Strict):
    """Pipeline depths; `auto` is resolved by the planner from the same budget the SMEM rule checks."""

    ab_stages: Stages = "auto"
    acc_stages: Stages = "auto"
    epilogue_stages: Stages = "auto"


class Schedule(Strict):
    """Tile order: `persistent` launches one program per SM looping over tiles; `group_m` swizzles tiles
    in groups of that many rows (or columns, when `raster = "along_n"`) for L2 reuse."""

    persistent: bool = False
    raster: Literal["along_m", "along_n"] = "along_m"
    group_m: PositiveInt = 8


class TritonOptions(Strict):
    num_warps: PositiveInt = 8
    # TMA tensor descriptors for A, B and out (sm90+), in either schedule; they need 16-byte aligned
    # leading strides. Off: pointer loads, which take any N and any leading stride.
    tma: bool = True
    # Store the epilogue in two halves along N, halving the SMEM the TMA store stages.
    epilogue_subtile: bool = False
    # Persistent kernels: let Triton pipeline across the tile loop (next tile's loads during this
    # tile's epilogue).
    flatten: bool = False


class CuteOptions(Strict):
    # Blackwell 2-CTA (cta_group::2) MMA: the cluster's CTA pair shares one MMA.
    two_cta: bool = False
    # Hopper: consumer warpgroups splitting the tile along M (1 or 2).
    mma_warpgroups: PositiveInt | None = None
    tma_store: bool = True


class PallasOptions(Strict):
    # Scoped VMEM limit to request; default: what the plan needs plus 25%, capped at the chip's VMEM.
    vmem_limit_bytes: PositiveInt | None = None


class Target(Strict):
    backend: Backend
    arch: str

    def __str__(self) -> str:
        return f"{self.backend.value}:{self.arch}"


def parse_target(text: object) -> object:
    known = ", ".join(ALL_TARGETS)
    if isinstance(text, Target):
        text = str(text)  # re-checked: a Target built by hand may name any arch
    if not isinstance(text, str):  # a table {backend, arch} would skip the arch check below
        raise ValueError(f"a target is a string 'backend:arch', not {type(text).__name__}; known targets: {known}")
    backend, sep, arch = text.partition(":")
    if not sep or backend not in Backend.__members__:
        raise ValueError(f"target '{text}' is not backend:arch; known targets: {known}")
    if arch not in TARGET_ARCHS[Backend(backend)]:
        raise ValueError(f"target '{text}': {backend} has no arch '{arch}'; known targets: {known}")
    return Target(backend=Backend(backend), arch=arch)


TargetName = Annotated[
    Target,
    BeforeValidator(parse_target),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "enum": list(ALL_TARGETS)}),
]


def _docstring_safe(text: str) -> str:
    """A description is rendered into each generated module's docstring: refuse what would end that
    docstring early or not survive as source text, so a spec can never inject code."""
    if '"""' in text or "\\" in text:
        raise ValueError('a description may not contain \'"""\' or backslashes (it is rendered into a docstring)')
    if "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a description may not contain NUL or unpaired surrogate characters")
    return text


Description = Annotated[str, AfterValidator(_docstring_safe)]


class GemmSpec(Strict):
    name: Identifier
    kind: Literal["gemm"]
    description: Description = ""
    a: Operand
    b: Operand
    out: Output
    accumulator: DType = DType.f32
    batch: bool = False
    epilogue: list[EpilogueOp] = Field(default_factory=list)
    tile: Tile
    cluster: Cluster = Cluster()
    pipeline: Pipeline = Pipeline()
    schedule: Schedule = Schedule()
    targets: list[TargetName] = Field(min_length=1)
    triton: TritonOptions = TritonOptions()
    cute: CuteOptions = CuteOptions()
    pallas: PallasOptions = PallasOptions()

    @model_validator(mode="after")
    def _unique(self) -> GemmSpec:
        seen: set[str] = set()
        for t in self.targets:
            if str(t) in seen:
                raise ValueError(f"target '{t}' is listed twice")
            seen.add(str(t))
        names = {"a", "b", "out"}
        for arg in self.runtime_args():
            if arg.name in names:
                raise ValueError(
                    f"two epilogue arguments (or an operand) are named '{arg.name}'; give one op a `name`"
                )
            names.add(arg.name)
        return self

    def runtime_args(self) -> list[RuntimeArg]:
        return [arg for op in self.epilogue for arg in op.runtime_args()]


KernelSpec = Annotated[GemmSpec, Field(discriminator="kind")]


class SpecFile(Strict):
    kernels: list[KernelSpec] = Field(min_length=1)
