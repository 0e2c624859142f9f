"""The target table: one `TargetInfo` per `backend:arch`, the only place target facts live.

Rules, resolve, designs, compile and messages read these fields; nothing tests arch names as strings.
Adding a target is adding a row here (and, for it to render, a design in specgen/designs/).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from specgen.envelope.devices import GPUS, TPUS, GpuDevice, TpuDevice


class Backend(str, Enum):
    triton = "triton"
    cute = "cute"
    pallas = "pallas"

    def __str__(self) -> str:
        return self.value


Mma = Literal["wgmma", "tcgen05", "mxu"]


@dataclass(frozen=True)
class TargetInfo:
    backend: Backend
    arch: str
    device: str  # key of the device envelope (envelope/devices.py): GPUS for SMEM targets, TPUS for VMEM ones
    mma: Mma  # the tensor-core family the hardware offers
    # The spec's tile maps onto raw MMA instructions (CuTe, Mosaic GPU), so their shape rules apply; Triton's
    # tl.dot picks its own instruction shapes from the block.
    issues_mma: bool
    tma_boxes: bool  # tiles move as raw TMA boxes (<= 256 per dim): CuTe, Mosaic GPU
    clusters: bool  # the backend launches thread-block clusters
    memory: Literal["smem", "vmem"]
    compute_capability: int | None  # GPUs only

    @property
    def name(self) -> str:
        return f"{self.backend.value}:{self.arch}"

    @property
    def gpu(self) -> GpuDevice | None:
        return GPUS[self.device] if self.memory == "smem" else None

    @property
    def tpu(self) -> TpuDevice | None:
        return TPUS[self.device] if self.memory == "vmem" else None

    def __str__(self) -> str:
        return self.name


def _gpu(backend: Backend, arch: str, device: str, issues_mma: bool, tma_boxes: bool, clusters: bool) -> TargetInfo:
    dev = GPUS[device]
    return TargetInfo(backend, arch, device, dev.mma, issues_mma, tma_boxes, clusters, "smem",  # type: ignore[arg-type]
                      dev.compute_capability)


def _tpu(arch: str) -> TargetInfo:
    return TargetInfo(Backend.pallas, arch, arch, "mxu", True, False, False, "vmem", None)


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
    return TARGETS[str(target)]
