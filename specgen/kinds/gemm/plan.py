"""What every GEMM design's plan names beside the module header: the operands and the epilogue's runtime
arguments as the generated entry points take them, and the config row each design's default and
size-selected variants share. The shared torch and JAX host templates read the operands as records
(`GemmModule.operands`, `.output`: specgen.abi.HostOperand, from `gemm_operands`), never by name.

Plans spell a config the same on every design: the tile is tile_m / tile_n / tile_k and the A/B pipeline
depth ab_stages (spec: pipeline.ab_stages). What a backend calls them in generated code (Triton's BLOCK_M
and num_stages, Pallas TPU's AB_BUFFERS, the Mosaic GPU Config's stages) is the templates' spelling."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from specgen.abi import Arg, Halved, HostOperand, bind_operands, halved_extents
from specgen.design import ModuleHeader


def gemm_operands(a: Arg, b: Arg, out: Arg, a_major: str, b_major: str,
                  batch: bool, gated: bool = False) -> tuple[tuple[HostOperand, ...], HostOperand]:
    """A (batch, M, K) and B (batch, K, N) in the torch launcher's logical shapes, each contiguous along K
    when k-major (else M, N), and the row-major output (batch, M, N); without batch the leading dim goes.
    A binds batch, M, K; B binds N and is checked on batch and K (`_validate`: `batch_b`, `K_b`; the fast
    path compares B's batch by shape and unpacks K as `K_b`). With a gated epilogue B is (batch, K, 2N): it
    binds N2, and N is half of it (`GemmModule.halved`)."""
    outer = ("batch",) if batch else ()
    bn = "N2" if gated else "N"
    return bind_operands([(a, (*outer, "M", "K"), "K" if a_major == "k" else "M", "a"),
                          (b, (*outer, "K", bn), "K" if b_major == "k" else bn, "b")],
                         (out, (*outer, "M", "N"), "N", "o"), fast_by_shape=outer, halved=GATED_N if gated else None)


GATED_N = {"N": "N2"}  # a gated epilogue's N outputs are half of B's N2 columns (gate and up)


@dataclass(frozen=True, kw_only=True)
class GemmModule(ModuleHeader):
    a: Arg
    b: Arg
    out: Arg
    args: list[Arg]  # epilogue runtime arguments, in chain order
    a_major: str  # "k" or "mn": the operand's contiguous dimension
    b_major: str
    batch: bool
    # a gated epilogue: B has 2N columns (gate and up), the output N. A design that renders one declares the
    # field in its plan (the Triton design's TritonPlan), so that the other designs' plans stay as they were.
    gated: ClassVar[bool] = False

    @cached_property
    def _host(self) -> tuple[tuple[HostOperand, ...], HostOperand]:
        return gemm_operands(self.a, self.b, self.out, self.a_major, self.b_major, self.batch, self.gated)

    @property
    def halved(self) -> tuple[Halved, ...]:
        """The sizes the host halves (a gated B's N2 columns give N), after binding the operands' extents."""
        return halved_extents(self.operands, GATED_N) if self.gated else ()

    @property
    def operands(self) -> tuple[HostOperand, ...]:
        """A and B as the host templates read them (their dims, contiguous dim, bindings)."""
        return self._host[0]

    @property
    def output(self) -> HostOperand:
        return self._host[1]

    @property
    def sizes(self) -> tuple[str, ...]:
        """The problem size as the launcher takes it from the guards: (batch,) M, N, K."""
        return (*(("batch",) if self.batch else ()), "M", "N", "K")


@dataclass(frozen=True, kw_only=True)
class ConfigRow:
    """One config of a module, the default's or a size-selected variant's: what the launcher selects it by
    and the tile it runs. Each design's row adds its own numbers."""

    index: int | None  # the variant's index (None: the default)
    when: str  # the variant's bounds, as the docstring shows them ("" for the default)
    bounds: list[tuple[str, int]]  # (dim, max) the launcher compares: ("M", 16) is M <= 16
    tile_m: int
    tile_n: int
    tile_k: int
    group_m: int


@dataclass(frozen=True, kw_only=True)
class StagedConfigRow(ConfigRow):
    """A config row whose A/B pipeline depth is one number on every target of the module (CuTe, Mosaic
    GPU: one target a module). A Triton module serves several compute capabilities, each with its own
    depth: its variant row is a `ConfigRow` and the depth is on its per-arch rows (`TritonArchConfig`)."""

    ab_stages: int  # A/B stages in flight (spec: pipeline.ab_stages; auto: the deepest that fits)
