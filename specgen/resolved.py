"""What resolve produces, and the tile boxes every design starts from: plain types, below both resolve
(which fills them, asking the target's design for its memory layout, registers and boxes) and the
designs (which read them), so that neither imports the other's module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from specgen.envelope.budget import MemoryBudget
from specgen.rules.finding import Finding
from specgen.spec.dtypes import DType
from specgen.spec.models import Bounds, LayeredSpec, Target
from specgen.targets import Backend, GpuDevice, TargetInfo, TpuDevice
from specgen.values import value


class DesignHooks(Protocol):
    """What the shared rules ask of the design that serves a target (`DesignBase` in specgen/design.py
    implements it): named here so that these plain types never import the designs that read them."""

    name: str

    def dot_accumulators(self, a: DType) -> tuple[DType, ...] | None: ...

    def mma_tile(self, spec: LayeredSpec) -> tuple[tuple[int, str], tuple[int, str]]: ...

    def register_findings(self, ctx: Resolved) -> Iterator[Finding]: ...

    def option_findings(self, ctx: Resolved) -> Iterator[Finding]: ...


@value
class TmaBox:
    operand: str  # "A", "B", "out"
    outer: int  # elements
    inner: int  # elements along the contiguous dim
    elem_bytes: int
    field: tuple[str | int, ...]  # the spec field a message points at
    dims: tuple[int, ...] = ()  # the box as the kernel encodes it, where not (outer, inner) (a tiled GMEM view)


@value
class Resolved:
    spec: LayeredSpec
    target: Target
    info: TargetInfo
    gpu: GpuDevice | None
    tpu: TpuDevice | None
    ab_stages: int
    acc_stages: int
    budget: MemoryBudget
    acc_registers: int  # 32-bit registers per thread holding a register-resident accumulator
    acc_threads: int  # threads sharing it
    tmem_columns: int  # accumulator TMEM columns per stage (0 where the accumulator is not in TMEM)
    tma_boxes: tuple[TmaBox, ...]  # every tile moved by TMA (empty: none)
    design: DesignHooks  # the design that serves the target (the registry's answer)
    variant: int | None = None  # which of the target's size-selected variants (None: the default config)
    when: Bounds | None = None  # that variant's bounds (the kind's model)
    variants: tuple[Resolved, ...] = ()  # the default's: each variant of the target, resolved
    # the default's: each companion kernel (a backward's GEMMs: LayeredSpec.companions), resolved
    companions: tuple[Resolved, ...] = ()
    # a companion's label ("dgrad") and the spec field its findings point at ("" and () elsewhere)
    companion: str = ""
    companion_field: tuple[str | int, ...] = ()
    parent: LayeredSpec | None = None  # a companion's: the effective spec whose backward runs it

    @property
    def backend(self) -> Backend:
        return self.info.backend
