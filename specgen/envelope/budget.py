"""The one on-chip memory budget that `check` enforces and the planner fills.

`smem_budget(spec, target, ab_stages)` says how many bytes a kernel of this spec needs on a target at
a given pipeline depth, broken down; `max_ab_stages` is the deepest pipeline that fits. The SMEM rule
(SMEM001) and the planner's `auto` stages both call these, so they can never disagree.

Per backend:
- Triton: each stage holds one A tile and one B tile. The persistent TMA kernel also keeps the output
  tile staged for its TMA store (half of it with `epilogue_subtile`) alive beside the pipeline; the
  plain kernel's epilogue layout conversion reuses the pipeline buffers once the K loop ends. Triton
  itself keeps no barrier reserve worth counting (a few 8-byte mbarriers per stage).
- CuTe sm90: the design's own struct, to the byte (designs/gemm_cute_sm90.py `memory`).
- CuTe sm100 (the CUTLASS DSL example kernels): 1024 bytes of barriers and helpers; the TMA-store
  epilogue keeps `epilogue_stages` subtiles of (tile.m x 32) output elements beside the A/B stages.
- Pallas Mosaic GPU: steps of A and B tiles plus the whole output tile for the TMA store.
- Pallas TPU: VMEM, not SMEM. Inputs and outputs are double-buffered by the pipeline emitter (`auto`
  stages are 2 there), and the f32 accumulator is a scratch buffer: 2 (A + B) + 2 out + acc + vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.envelope.devices import GPUS, TPUS
from specgen.spec.models import GemmSpec, Target
from specgen.spec.targets import Backend, device_key

# Auto pipeline depths never go past these: deeper buys nothing once loads are hidden.
MAX_AUTO_STAGES = {Backend.triton: 4, Backend.cute: 8, Backend.pallas: 4}
MIN_STAGES = 2  # one tile in flight while the other is consumed
TPU_BUFFERS = 2
EPILOGUE_SUBTILE_N = {"sm90": 64, "sm100": 32}
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
    extra_bytes: int = 0  # accumulator scratch and vectors (TPU)

    @property
    def ab_bytes(self) -> int:
        return self.ab_stage_bytes * self.ab_stages

    @property
    def total(self) -> int:
        body = max(self.ab_bytes, self.epilogue_bytes) if self.epilogue_overlaps_ab else self.ab_bytes + self.epilogue_bytes
        return body + self.reserve + self.extra_bytes

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def breakdown(self) -> str:
        parts = [f"A/B {self.ab_stages} x {self.ab_stage_bytes} = {self.ab_bytes}"]
        if self.epilogue_bytes:
            parts.append(f"epilogue {self.epilogue_bytes}" + (" (reuses A/B)" if self.epilogue_overlaps_ab else ""))
        if self.extra_bytes:
            parts.append(f"accumulator+vectors {self.extra_bytes}")
        if self.reserve:
            parts.append(f"barriers {self.reserve}")
        return " + ".join(parts)


def _ab_stage_bytes(spec: GemmSpec) -> int:
    t = spec.tile
    return t.m * t.k * spec.a.dtype.bytes + t.k * t.n * spec.b.dtype.bytes


def epilogue_stages(spec: GemmSpec) -> int:
    s = spec.pipeline.epilogue_stages
    return DEFAULT_EPILOGUE_STAGES if s == "auto" else s


def smem_budget(spec: GemmSpec, target: Target, ab_stages: int) -> MemoryBudget:
    t, out_bytes = spec.tile, spec.out.dtype.bytes
    if target.backend is Backend.pallas and target.arch.startswith("tpu"):
        tpu = TPUS[target.arch]
        vectors = sum(
            (t.m if a.shape == "vec_m" else t.n) * a.dtype.bytes * 2
            for a in spec.runtime_args() if a.shape in ("vec_m", "vec_n")
        )
        residual = sum(t.m * t.n * a.dtype.bytes * 2 for a in spec.runtime_args() if a.shape == "matrix")
        return MemoryBudget(
            "VMEM", tpu.vmem_bytes, 0, _ab_stage_bytes(spec), ab_stages,
            epilogue_bytes=2 * t.m * t.n * out_bytes + residual, epilogue_overlaps_ab=False,
            extra_bytes=t.m * t.n * 4 + vectors,
        )
    gpu = GPUS[device_key(target.backend, target.arch)]
    if target.backend is Backend.triton:
        if spec.triton.tma:
            epi = t.m * t.n * out_bytes // (2 if spec.triton.epilogue_subtile else 1)
        else:
            epi = t.m * t.n * 4  # layout conversion scratch of the f32 accumulator, reusing A/B
        # Only a persistent TMA kernel keeps its store buffer alive beside the next tile's pipeline.
        overlaps = not (spec.triton.tma and spec.schedule.persistent)
        return MemoryBudget("SMEM", gpu.smem_per_block, 0, _ab_stage_bytes(spec), ab_stages,
                            epi, epilogue_overlaps_ab=overlaps)
    if target.backend is Backend.cute and target.arch == "sm90":
        from specgen.designs.gemm_cute_sm90 import DESIGN  # the layout its template really allocates

        return DESIGN.memory(spec, target, ab_stages)
    if target.backend is Backend.cute:
        sub_n = min(t.n, EPILOGUE_SUBTILE_N[target.arch])
        epi = epilogue_stages(spec) * t.m * sub_n * out_bytes if spec.cute.tma_store else 0
        return MemoryBudget("SMEM", gpu.smem_per_block, gpu.barrier_reserve, _ab_stage_bytes(spec), ab_stages,
                            epi, epilogue_overlaps_ab=False)
    # pallas:gpu_sm90 (Mosaic GPU)
    return MemoryBudget("SMEM", gpu.smem_per_block, gpu.barrier_reserve, _ab_stage_bytes(spec), ab_stages,
                        t.m * t.n * out_bytes, epilogue_overlaps_ab=False)


def max_ab_stages(spec: GemmSpec, target: Target, limit: int = 64) -> int:
    """The deepest pipeline that fits (0 when not even one stage does), capped at `limit`.

    Closed form, as `check` runs it for every (spec, target) pair: the total grows by one A/B stage per
    stage, beside the epilogue or, where the epilogue reuses the A/B buffers, over it once one stage fits."""
    one = smem_budget(spec, target, 1)
    if not one.fits:
        return 0
    room = one.capacity - one.reserve - one.extra_bytes - (0 if one.epilogue_overlaps_ab else one.epilogue_bytes)
    return min(limit, room // one.ab_stage_bytes)


def resolve_ab_stages(spec: GemmSpec, target: Target) -> int:
    """`auto` -> the deepest pipeline that fits, capped per backend and floored at MIN_STAGES (where
    not even two stages fit, SMEM001 reports it: a one-stage pipeline overlaps nothing); TPU blocks are
    double-buffered."""
    if spec.pipeline.ab_stages != "auto":
        return spec.pipeline.ab_stages
    if target.arch.startswith("tpu"):
        return TPU_BUFFERS  # Pallas TPU pipelines double-buffer each BlockSpec by default
    return max(MIN_STAGES, min(MAX_AUTO_STAGES[target.backend], max_ab_stages(spec, target)))
