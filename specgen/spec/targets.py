"""Targets a spec can name: `backend:arch`, and which device envelope each one is checked against."""

from __future__ import annotations

from enum import Enum


class Backend(str, Enum):
    triton = "triton"
    cute = "cute"
    pallas = "pallas"

    def __str__(self) -> str:
        return self.value


# backend -> the archs it can target; the arch name is also the device envelope's key.
TARGET_ARCHS: dict[Backend, tuple[str, ...]] = {
    Backend.triton: ("sm90", "sm100"),
    Backend.cute: ("sm90", "sm100"),
    Backend.pallas: ("tpu_v5e", "tpu_v5p", "tpu_v6e", "tpu_v7x", "gpu_sm90"),
}

ALL_TARGETS: tuple[str, ...] = tuple(f"{b.value}:{a}" for b, archs in TARGET_ARCHS.items() for a in archs)


def device_key(backend: Backend, arch: str) -> str:
    """The device envelope a target is checked against (`pallas:gpu_sm90` runs on an sm90 GPU)."""
    return "sm90" if arch == "gpu_sm90" else arch
