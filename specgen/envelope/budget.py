"""The on-chip memory budget (SMEM or VMEM) that `check` enforces and the planner fills.

A `MemoryBudget` says how many bytes a kernel of a spec needs on a target at a given pipeline depth,
broken down. Each design (specgen/kinds/<kind>/designs/) owns its layout (`memory`), checked-only designs included.
resolve.py asks the target's design for it, resolves `auto` stages from it and hands the same budget
to the rules (SMEM001, VMEM001) and the planners, so they can never disagree.
"""

from __future__ import annotations

from specgen.values import value

MIN_STAGES = 2  # one tile in flight while the other is consumed


@value
class MemoryBudget:
    memory: str  # "SMEM" or "VMEM"
    capacity: int
    reserve: int
    ab_stage_bytes: int
    ab_stages: int
    epilogue_bytes: int
    epilogue_overlaps_ab: bool  # epilogue reuses the pipeline buffers after the K loop
    extra_bytes: int = 0  # never overlapped: accumulator scratch and vectors, operand copies
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
