"""What every GEMM design's plan names beside the module header: the operands and the epilogue's runtime
arguments as the generated entry points take them (the shared torch and JAX host templates read these),
and the config row each design's default and size-selected variants share.

Plans spell a config the same on every design: the tile is tile_m / tile_n / tile_k and the A/B pipeline
depth ab_stages (spec: pipeline.ab_stages). What a backend calls them in generated code (Triton's BLOCK_M
and num_stages, Pallas TPU's AB_BUFFERS, the Mosaic GPU Config's stages) is the templates' spelling."""

from __future__ import annotations

from dataclasses import dataclass

from specgen.abi import Arg
from specgen.design import ModuleHeader


@dataclass(frozen=True, kw_only=True)
class GemmModule(ModuleHeader):
    a: Arg
    b: Arg
    out: Arg
    args: list[Arg]  # epilogue runtime arguments, in chain order
    a_major: str  # "k" or "mn": the operand's contiguous dimension
    b_major: str
    batch: bool


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
