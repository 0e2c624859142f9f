"""The on-chip memory budget (SMEM or VMEM) that `check` enforces and the planner fills.

A `MemoryBudget` says how many bytes a kernel of a spec needs on a target at a given pipeline depth,
broken down. Each design (specgen/designs/) owns its layout (`Design.memory`); the layouts below are
those of backends that are checked but not rendered yet, until their designs take them over.
resolve.py picks the layout, resolves `auto` stages from it and hands the same budget to the rules
(SMEM001, VMEM001) and the planners, so they can never disagree.

- CuTe sm90: the CuTe design's own struct, to the byte (designs/gemm_cute_sm90.py `memory`).
- CuTe on targets that design does not serve (sm100, the CUTLASS DSL example kernels): 1024 bytes of
  barriers and helpers; the TMA-store epilogue keeps `epilogue_stages` subtiles of (tile.m x 32)
  output elements beside the A/B stages (the design's `memory` falls back to `cute_memory`).
Pallas (TPU VMEM and Mosaic GPU SMEM) is laid out by its design, specgen/designs/gemm_pallas.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specgen.spec.models import GemmSpec
from specgen.targets import Backend, TargetInfo

# Auto pipeline depths never go past these: deeper buys nothing once loads are hidden.
MAX_AUTO_STAGES = {Backend.triton: 4, Backend.cute: 8, Backend.pallas: 4}
MIN_STAGES = 2  # one tile in flight while the other is consumed
TPU_BUFFERS = 2
EPILOGUE_SUBTILE_N = {"wgmma": 64, "tcgen05": 32}  # CuTe epilogue subtile N by MMA family
DEFAULT_EPILOGUE_STAGES = 2


@dataclass(frozen=True)
class MemoryBudget:
    memory: str  # "SMEM" or "VMEM"
    capacity: int
    reserve: int
    ab_stage_bytes: int
    ab_stages: int
    epilogue_bytes: int
    epilogue_overlaps_ab: bool  # epilogue reuses the pipeline buffers after the K loop
    extra_bytes: int = 0  # never overlapped: accumulator scratch and vectors (TPU), operand copies (Triton)
    extra_label: str = "accumulator+vectors"
    ab_buffers_delta: int = 0  # A/B buffers the pipeline allocates beyond (or short of) its stages
    # buffers live only while the K loop runs, beside the A/B stages (operand copies): freed with them
    loop_bytes: int = 0
    loop_label: str = "operand copies"
    # scratch used only after the K loop (layout conversions), over the drained A/B buffers: the
    # pipeline region is as large as the larger of the two
    drained_bytes: int = 0
    drained_label: str = "conversion scratch"

    @property
    def ab_buffers(self) -> int:
        return max(1, self.ab_stages + self.ab_buffers_delta)

    @property
    def ab_bytes(self) -> int:
        return self.ab_stage_bytes * self.ab_buffers

    @property
    def total(self) -> int:
        pipeline = max(self.ab_bytes + self.loop_bytes, self.drained_bytes)
        body = max(pipeline, self.epilogue_bytes) if self.epilogue_overlaps_ab else pipeline + self.epilogue_bytes
        return body + self.reserve + self.extra_bytes

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def breakdown(self) -> str:
        parts = [f"A/B {self.ab_buffers} x {self.ab_stage_bytes} = {self.ab_bytes}"]
        if self.loop_bytes:
            parts.append(f"{self.loop_label} {self.loop_bytes}")
        if self.drained_bytes:
            parts.append(f"{self.drained_label} {self.drained_bytes} (reuses A/B)")
        if self.epilogue_bytes:
            parts.append(f"epilogue {self.epilogue_bytes}" + (" (reuses A/B)" if self.epilogue_overlaps_ab else ""))
        if self.extra_bytes:
            parts.append(f"{self.extra_label} {self.extra_bytes}")
        if self.reserve:
            parts.append(f"barriers {self.reserve}")
        return " + ".join(parts)


def ab_stage_bytes(spec: GemmSpec) -> int:
    t = spec.tile
    return t.m * t.k * spec.a.dtype.bytes + t.k * t.n * spec.b.dtype.bytes


def epilogue_stages(spec: GemmSpec) -> int:
    s = spec.pipeline.epilogue_stages
    return DEFAULT_EPILOGUE_STAGES if s == "auto" else s


def cute_memory(spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
    gpu = target.gpu
    assert gpu is not None
    t = spec.tile
    sub_n = min(t.n, EPILOGUE_SUBTILE_N[gpu.mma])
    epi = epilogue_stages(spec) * t.m * sub_n * spec.out.dtype.bytes if spec.cute.tma_store else 0
    return MemoryBudget("SMEM", gpu.smem_per_block, gpu.barrier_reserve, ab_stage_bytes(spec), ab_stages,
                        epi, epilogue_overlaps_ab=False)


MemoryLayout = Callable[[GemmSpec, TargetInfo, int], MemoryBudget]

# (kind, backend) -> layout, for backends without a design yet (a design's own `memory` wins).
CHECKED_ONLY_LAYOUTS: dict[tuple[str, Backend], MemoryLayout] = {
    ("gemm", Backend.cute): cute_memory,
}
