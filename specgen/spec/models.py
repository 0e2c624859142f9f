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
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictBool,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from specgen.spec.dtypes import DType
from specgen.spec.epilogue import EpilogueOp, RuntimeArg
from specgen.spec.names import IDENTIFIER, MAX_NAME, check_kernel_name, derived_names
from specgen.spec.targets import ALL_TARGETS, TARGET_ARCHS, Backend


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def bounded(hi: int, lo: int = 1) -> object:
    """A strict integer in [lo, hi]: no "128", 128.0 or true, as the JSON Schema says; the bound is what
    the field's consumers hold (kernels compute in int32), far above any sane value."""
    return Annotated[int, Field(strict=True, ge=lo, le=hi)]


# Sanity bounds (the envelope rules then check what each target allows): a tile dim past 65536 has no
# target; clusters hold at most 16 CTAs (CLU001 says so with the numbers); pipelines a few stages; group_m multiplies a tile count in the
# kernel's int32 arithmetic; Triton takes at most 32 warps (POW001 says so with the numbers); a TPU core
# has at most 128 MiB of VMEM.
TileDim = bounded(65536)
ClusterDim = bounded(64)
StageCount = bounded(64)
Major = Literal["k", "mn"]
Stages = StageCount | Literal["auto"]
MAX_DESCRIPTION = 4096
MAX_VMEM_LIMIT = 1 << 30


class Operand(Strict):
    dtype: DType
    major: Major = "k"


class Output(Strict):
    dtype: DType


class Tile(Strict):
    """The CTA (or TPU block) tile: out block m x n, reduced over k per pipeline step."""

    m: TileDim
    n: TileDim
    k: TileDim


class Cluster(Strict):
    m: ClusterDim = 1
    n: ClusterDim = 1

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

    persistent: StrictBool = False
    raster: Literal["along_m", "along_n"] = "along_m"
    group_m: bounded(256) = 8


class TritonOptions(Strict):
    num_warps: bounded(64) = 8
    # TMA tensor descriptors for A, B and out (sm90+), in either schedule; they need 16-byte aligned
    # leading strides. Off: pointer loads, which take any N and any leading stride.
    tma: StrictBool = True
    # Store the epilogue in two halves along N, halving the SMEM the TMA store stages.
    epilogue_subtile: StrictBool = False
    # Persistent kernels: let Triton pipeline across the tile loop (next tile's loads during this
    # tile's epilogue).
    flatten: StrictBool = False


class CuteOptions(Strict):
    # Blackwell 2-CTA (cta_group::2) MMA: the cluster's CTA pair shares one MMA.
    two_cta: StrictBool = False
    # Hopper: consumer warpgroups splitting the tile along M (1 or 2).
    mma_warpgroups: bounded(2) | None = None
    tma_store: StrictBool = True


class PallasOptions(Strict):
    # Scoped VMEM limit to request; default: what the plan needs plus 25%, capped at the chip's VMEM.
    vmem_limit_bytes: bounded(MAX_VMEM_LIMIT) | None = None


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
    docstring early or not survive as source text, so a spec can never inject code; and control
    characters (ANSI escapes, carriage returns) that would forge what a terminal shows of the file."""
    if '"""' in text or "\\" in text:
        raise ValueError('a description may not contain \'"""\' or backslashes (it is rendered into a docstring)')
    if "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a description may not contain NUL or unpaired surrogate characters")
    bad = next((c for c in text if (c < " " and c not in "\t\n") or "\x7f" <= c <= "\x9f"), None)
    if bad is not None:
        raise ValueError(f"a description may not contain control characters (found {bad!r})")
    return text


# The configuration sections a target may override (the kernel's semantics, its operands, dtypes, batch
# and epilogue, stay the same on every target), and the backend whose options each one is.
CONFIG_SECTIONS: tuple[str, ...] = ("tile", "cluster", "pipeline", "schedule", "triton", "cute", "pallas")
BACKEND_SECTIONS: dict[str, Backend] = {"triton": Backend.triton, "cute": Backend.cute, "pallas": Backend.pallas}


class TargetConfig(Strict):
    """One target's configuration over the kernel's: each key given replaces the kernel's value of that
    key, keys not given keep it (a `tile` is given whole). Semantics (operands, dtypes, batch, epilogue)
    cannot be overridden: they are the same on every target."""

    tile: Tile | None = None
    cluster: Cluster | None = None
    pipeline: Pipeline | None = None
    schedule: Schedule | None = None
    triton: TritonOptions | None = None
    cute: CuteOptions | None = None
    pallas: PallasOptions | None = None


def _target_key(text: object) -> str:
    return str(parse_target(text))


TargetKey = Annotated[str, BeforeValidator(_target_key), WithJsonSchema({"type": "string", "enum": list(ALL_TARGETS)})]


Description = Annotated[str, Field(max_length=MAX_DESCRIPTION), AfterValidator(_docstring_safe)]
# The pattern is checked by check_kernel_name (with a message that says why); the schema shows it too.
KernelName = Annotated[str, Field(max_length=MAX_NAME, json_schema_extra={"pattern": IDENTIFIER.pattern}),
                       AfterValidator(check_kernel_name)]


class GemmSpec(Strict):
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

    @model_validator(mode="after")
    def _unique(self) -> GemmSpec:
        seen: set[str] = set()
        for t in self.targets:
            if str(t) in seen:
                raise ValueError(f"target '{t}' is listed twice")
            seen.add(str(t))
        for key, cfg in self.per_target.items():
            if key not in seen:
                raise ValueError(f"per_target names '{key}', which is not in targets ({', '.join(sorted(seen))})")
            backend = key.partition(":")[0]
            for section, owner in BACKEND_SECTIONS.items():
                if section in cfg.model_fields_set and owner.value != backend:
                    raise ValueError(f"per_target '{key}' sets {section} options, which only {owner} targets read")
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

    def for_target(self, target: object) -> GemmSpec:
        """The effective spec on one target: its `per_target` keys applied over the kernel's, with no
        `per_target` left (what resolve, the rules and the designs read). The spec itself when the
        target overrides nothing."""
        cfg = self.per_target.get(str(target))
        if cfg is None:
            return self if not self.per_target else self.model_copy(update={"per_target": {}})
        update: dict[str, object] = {"per_target": {}}
        for section in cfg.model_fields_set:
            given = getattr(cfg, section)
            if given is not None:  # values were validated on load; merging keys keeps them valid
                update[section] = getattr(self, section).model_copy(
                    update={k: getattr(given, k) for k in given.model_fields_set})
        return self.model_copy(update=update)

    def config_field(self, target: object, field: tuple[str | int, ...]) -> tuple[str | int, ...]:
        """Where a configuration field of the effective spec on `target` was written: under
        `per_target` when that target's table sets it (a section, or a key of it), else the kernel's."""
        cfg = self.per_target.get(str(target))
        if cfg is None or not field or field[0] not in cfg.model_fields_set:
            return field
        section = getattr(cfg, str(field[0]))
        if section is not None and (len(field) == 1 or field[1] in section.model_fields_set):
            return ("per_target", str(target), *field)
        return field

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        # A spec without per-target tables dumps (and hashes) as it did before they existed.
        data = handler(self)
        if not self.per_target:
            data.pop("per_target", None)
        return data


KernelSpec = Annotated[GemmSpec, Field(discriminator="kind")]


class SpecFile(Strict):
    kernels: list[KernelSpec] = Field(min_length=1)
