"""Device envelopes as data. Every number cites its source in ../shared/HARDWARE.md terms.

GPU: cutlass `include/cutlass/arch/arch.h` (SMEM), CuTe DSL `cute/arch/tmem.py` (TMEM), PTX ISA
(wgmma / tcgen05), measured on an H200 (clusters). TPU: jax `_src/tpu_info.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.spec.dtypes import DType


@dataclass(frozen=True)
class GpuDevice:
    name: str
    compute_capability: int
    smem_per_block: int  # opt-in maximum per block (bytes)
    smem_per_sm: int
    barrier_reserve: int  # bytes the CuTe examples keep back for mbarriers and helpers
    mma: str  # "wgmma" or "tcgen05"
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
    barrier_reserve=1024, mma="wgmma", tmem_columns=0, tmem_lanes=0,
    cluster_portable=8, cluster_max=16, registers_per_thread=255, num_sms_example=132,
)
SM100 = GpuDevice(
    name="sm100 (B200)", compute_capability=100, smem_per_block=232448, smem_per_sm=233472,
    barrier_reserve=1024, mma="tcgen05", tmem_columns=512, tmem_lanes=128,
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
