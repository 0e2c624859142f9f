"""CuTe targets that no rendering design serves yet (Blackwell, tcgen05): checked, not rendered.

Its memory layout is the CUTLASS DSL example kernels' (`dense_gemm_persistent.py`): 1024 bytes of
barriers and helpers; the TMA-store epilogue keeps `epilogue_stages` subtiles of (tile.m x 32) output
elements beside the A/B stages. The accumulator lives in TMEM (`tmem_columns`, `acc_stages`); its rules
are in rules.py. A rendering design keyed ("gemm", cute, "tcgen05") takes these targets over.
"""

from __future__ import annotations

from specgen.designs.base import WARPGROUP_THREADS, DesignBase
from specgen.envelope.budget import MemoryBudget, ab_stage_bytes, epilogue_stages
from specgen.spec.models import GemmSpec
from specgen.targets import Backend, TargetInfo

EPILOGUE_SUBTILE_N = 32  # the TMA-store epilogue's subtile columns (tcgen05 example kernels)


def tmem_columns(spec: GemmSpec) -> int:
    """Accumulator TMEM columns per CTA per stage: N (1-CTA, or 2-CTA M=256), N/2 for 2-CTA M=128.
    fp16 accumulators are not packed. Source: cutlass `mma_traits_sm100_frag.hpp`."""
    n = spec.tile.n
    return n // 2 if spec.cute.two_cta and spec.tile.m * 2 == 128 else n


class CuteCheckedGemm(DesignBase):
    name = "CuTe (checked only)"
    keys = (("gemm", Backend.cute, "tcgen05"),)
    renders = False
    max_auto_stages = 8

    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        gpu = target.gpu
        assert gpu is not None
        t = spec.tile
        sub_n = min(t.n, EPILOGUE_SUBTILE_N)
        epi = epilogue_stages(spec) * t.m * sub_n * spec.out.dtype.bytes if spec.cute.tma_store else 0
        return MemoryBudget("SMEM", gpu.smem_per_block, gpu.barrier_reserve, ab_stage_bytes(spec), ab_stages,
                            epi, epilogue_overlaps_ab=False)

    def accumulator_threads(self, spec: GemmSpec, target: TargetInfo) -> int:
        if spec.cute.schedule == "pingpong":
            return WARPGROUP_THREADS
        if spec.cute.mma_warpgroups:
            return spec.cute.mma_warpgroups * WARPGROUP_THREADS
        return super().accumulator_threads(spec, target)

    def tmem_columns(self, spec: GemmSpec, target: TargetInfo) -> int:
        return tmem_columns(spec)

    def acc_stages(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Two TMEM accumulator stages when they fit, so the epilogue overlaps the next tile's MMA."""
        assert target.gpu is not None
        return 2 if tmem_columns(spec) * 2 <= target.gpu.tmem_columns else 1



DESIGN = CuteCheckedGemm()
