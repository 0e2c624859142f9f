"""The target table: one `TargetInfo` per `backend:arch`, and the device envelopes its rows point at (SMEM,
TMEM, clusters, registers; TPU VMEM and MXU): the only place target facts live.

Rules, resolve, designs, compile and messages read these fields; nothing tests arch names as strings.
Adding a target is adding a row here (and, for it to render, a design in specgen/kinds/<kind>/designs/).

Device numbers cite their sources in ../shared/HARDWARE.md terms. GPU: cutlass `include/cutlass/arch/arch.h`
(SMEM), CuTe DSL `cute/arch/tmem.py` (TMEM), PTX ISA (wgmma / tcgen05), measured on an H200 (clusters).
TPU: jax `_src/tpu_info.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Literal

from specgen.memo import IdentityMemo
from specgen.spec.dtypes import DType


class Backend(str, Enum):
    triton = "triton"
    cute = "cute"
    pallas = "pallas"

    def __str__(self) -> str:
        return self.value


class Mma(str, Enum):
    """A tensor-core family: what a design's key and an MMA rule name."""

    wgmma = "wgmma"  # Hopper warpgroup MMA
    tcgen05 = "tcgen05"  # Blackwell, accumulator in tensor memory
    mxu = "mxu"  # TPU matrix unit

    def __str__(self) -> str:
        return self.value


# --- device envelopes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuDevice:
    name: str
    compute_capability: int
    smem_per_block: int  # opt-in maximum per block (bytes)
    smem_per_sm: int
    barrier_reserve: int  # bytes the CuTe examples keep back for mbarriers and helpers
    mma: Mma  # the tensor-core family it offers
    tmem_columns: int  # 0 where there is no tensor memory
    tmem_lanes: int
    cluster_portable: int
    cluster_max: int
    registers_per_thread: int
    num_sms_example: int  # only for messages; launchers query the real count


@dataclass(frozen=True)
class TpuDevice:
    name: str
    vmem_bytes: int  # per TensorCore
    default_scoped_vmem: int  # the compiler's default scoped limit; specgen always sets its own
    mxu: int  # MXU edge (128 or 256)
    sublane_rows_32bit: int  # native sublane tiling for 32/16-bit data
    bf16_sublanes: int  # sublane tiling of bf16 blocks (16 on v7x, which packs bf16 natively)
    fp8: tuple[DType, ...]  # fp8 formats the MXU takes


SM90 = GpuDevice(
    name="sm90 (H100/H200)", compute_capability=90, smem_per_block=232448, smem_per_sm=233472,
    barrier_reserve=1024, mma=Mma.wgmma, tmem_columns=0, tmem_lanes=0,
    cluster_portable=8, cluster_max=16, registers_per_thread=255, num_sms_example=132,
)
SM100 = GpuDevice(
    name="sm100 (B200)", compute_capability=100, smem_per_block=232448, smem_per_sm=233472,
    barrier_reserve=1024, mma=Mma.tcgen05, tmem_columns=512, tmem_lanes=128,
    cluster_portable=8, cluster_max=16, registers_per_thread=255, num_sms_example=148,
)

MiB = 1024 * 1024
_TPU_FP8_OLD = (DType.fp8_e5m2,)  # v5e/v5p/v6e: e5m2 (and e4m3b11fnuz, not a specgen dtype); not e4m3fn
TPU_V5E = TpuDevice("tpu_v5e", 128 * MiB, 16 * MiB, 128, 8, 8, _TPU_FP8_OLD)
TPU_V5P = TpuDevice("tpu_v5p", 64 * MiB, 16 * MiB, 128, 8, 8, _TPU_FP8_OLD)
TPU_V6E = TpuDevice("tpu_v6e", 128 * MiB, 32 * MiB, 256, 8, 8, _TPU_FP8_OLD)
TPU_V7X = TpuDevice("tpu_v7x", 64 * MiB, 32 * MiB, 256, 8, 16, (DType.fp8_e4m3, DType.fp8_e5m2))

GPUS: dict[str, GpuDevice] = {"sm90": SM90, "sm100": SM100}
TPUS: dict[str, TpuDevice] = {d.name: d for d in (TPU_V5E, TPU_V5P, TPU_V6E, TPU_V7X)}


# --- the targets -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetInfo:
    backend: Backend
    arch: str
    device: str  # key of the device envelope above: GPUS for SMEM targets, TPUS for VMEM ones
    mma: Mma  # the tensor-core family the hardware offers
    # The spec's tile maps onto raw MMA instructions (CuTe, Mosaic GPU), so their shape rules apply; Triton's
    # tl.dot picks its own instruction shapes from the block.
    issues_mma: bool
    tma_boxes: bool  # tiles move as raw TMA boxes (<= 256 per dim): CuTe, Mosaic GPU
    clusters: bool  # the backend launches thread-block clusters
    memory: Literal["smem", "vmem"]
    compute_capability: int | None  # GPUs only

    # figured once per row (check reads them for every config): a cached property is no field, so equality,
    # hashing and the row's repr stay the fields'
    @cached_property
    def name(self) -> str:
        return f"{self.backend.value}:{self.arch}"

    @cached_property
    def gpu(self) -> GpuDevice | None:
        return GPUS[self.device] if self.memory == "smem" else None

    @cached_property
    def tpu(self) -> TpuDevice | None:
        return TPUS[self.device] if self.memory == "vmem" else None

    def __str__(self) -> str:
        return self.name


def _gpu(backend: Backend, arch: str, device: str, issues_mma: bool, tma_boxes: bool, clusters: bool) -> TargetInfo:
    dev = GPUS[device]
    return TargetInfo(backend, arch, device, dev.mma, issues_mma, tma_boxes, clusters, "smem", dev.compute_capability)


def _tpu(arch: str) -> TargetInfo:
    return TargetInfo(Backend.pallas, arch, arch, Mma.mxu, True, False, False, "vmem", None)


_ROWS = (
    _gpu(Backend.triton, "sm90", "sm90", issues_mma=False, tma_boxes=False, clusters=False),
    _gpu(Backend.triton, "sm100", "sm100", issues_mma=False, tma_boxes=False, clusters=False),
    _gpu(Backend.cute, "sm90", "sm90", issues_mma=True, tma_boxes=True, clusters=True),
    _gpu(Backend.cute, "sm100", "sm100", issues_mma=True, tma_boxes=True, clusters=True),
    _tpu("tpu_v5e"), _tpu("tpu_v5p"), _tpu("tpu_v6e"), _tpu("tpu_v7x"),
    # Pallas Mosaic GPU runs on an sm90 device: wgmma with raw TMA boxes, one CTA per program.
    _gpu(Backend.pallas, "gpu_sm90", "sm90", issues_mma=True, tma_boxes=True, clusters=True),
)
_BACKEND_ORDER = list(Backend)
TARGETS: dict[str, TargetInfo] = {t.name: t for t in sorted(_ROWS, key=lambda t: _BACKEND_ORDER.index(t.backend))}

# backend -> the archs it can target, in table order (what spec validation and messages list).
TARGET_ARCHS: dict[Backend, tuple[str, ...]] = {
    b: tuple(t.arch for t in TARGETS.values() if t.backend is b) for b in Backend
}
ALL_TARGETS: tuple[str, ...] = tuple(TARGETS)


def target_info(target: object) -> TargetInfo:
    """The row of a `Target` (or a `backend:arch` string)."""
    if isinstance(target, str):
        return TARGETS[target]
    row = _ROW_OF.get(target)  # a target object asked before (spec loading shares them)
    return row if row is not None else _ROW_OF.put(target, TARGETS[str(target)])


_ROW_OF: IdentityMemo[TargetInfo] = IdentityMemo()  # target_info's, by the target object
