"""Targets a spec can name: `backend:arch`. The facts about each live in the target table,
specgen/targets.py; this module keeps the names the spec models import."""

from __future__ import annotations

from specgen.targets import ALL_TARGETS, TARGET_ARCHS, TARGETS, Backend

__all__ = ["ALL_TARGETS", "TARGET_ARCHS", "Backend", "device_key"]


def device_key(backend: Backend, arch: str) -> str:
    """The device envelope a target is checked against (a row of the target table names it)."""
    return TARGETS[f"{backend.value}:{arch}"].device
