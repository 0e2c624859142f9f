"""The Pallas GEMM design: its on-chip memory layout, how targets group into modules, the plan, render.

TPU (Mosaic): one `pl.pallas_call` over a grid of (batch,) M blocks x N blocks x K steps. Each
BlockSpec is double-buffered by Pallas's pipeline emitter, the f32 (int32 for int8) accumulator is a
VMEM scratch, and the epilogue chain runs at the last K step. One module serves every TPU target of a
spec: the blocks and the VMEM they need are the same on every generation (only the capacity differs,
which `check` compares), so the module carries one `vmem_limit_bytes`.

Mosaic GPU (`pallas:gpu_sm90`): one module per spec (`pallas/gpu_sm90/<name>.py`,
templates/gemm/pallas/gemm_mgpu.py.jinja) holding one `plgpu.kernel` built per config (`MgpuConfig`: the
target's default and each size-selected variant, each resolved and checked on its own; a `Config` row
in the module, picked by the jitted entry with integer compares on the static shapes when it traces,
so a variant may change any config key: CFG003 refuses variants on the TPU module only), the structure of
JAX's warp-specialized Hopper matmul: a persistent grid of one CTA per SM looping over output tiles, a memory
warpgroup feeding a `max_concurrent_steps`-deep TMA pipeline into swizzled SMEM, two consumer warpgroups each
issuing wgmma on half the tile's N into an f32 accumulator (two, gate and up, with a gated epilogue), then the
epilogue chain on 64x64 subtiles staged in SMEM and stored by TMA. Its SMEM model (`memory`) is calibrated to
the byte on Mosaic GPU's own figure.
`pallas.swap_ab` (decode: M <= 64) computes out^T = B^T A^T: each consumer warpgroup's tile.n/2 columns of
B on wgmma's 64-row side, A's tile.m rows (8..256) on its column side, and the epilogue reads each
vector along the other axis and stores out's subtiles (and reads a residual's) through a transposed view
of the SMEM slot (PAL010).
Options read from the spec: `cluster` 2x1 / 1x2 launches CTA pairs that load their shared operand's tile by
TMA multicast (B along M, A along N; PAL007; the SMEM figure is unchanged), `schedule.raster` the band direction.

Registered under ("gemm", pallas, mxu / wgmma); the plan reads what check resolved. Imports jax-free code only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from specgen import __version__
from specgen.abi import Arg, make_arg
from specgen.design import plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm import KIND
from specgen.kinds.gemm.design import WARPGROUP_THREADS, GemmDesign, decode_slot, tma_boxes
from specgen.kinds.gemm.designs.pallas import training_mgpu as mgt
from specgen.kinds.gemm.designs.pallas.tpu_gated import b_halves, tpu_gated_fields
from specgen.kinds.gemm.designs.pallas.tpu_vmem import TPU_ARGS_DOUBLE_BUFFERED, TPU_LANES, TPU_TILE_ROW_BYTES
from specgen.kinds.gemm.designs.pallas.training import TpuTrainingPlan, plan_tpu_training, training_metadata
from specgen.kinds.gemm.plan import GemmModule, StagedConfigRow
from specgen.kinds.gemm.sections import When
from specgen.kinds.gemm.spec import GemmSpec
from specgen.memo import per_spec
from specgen.runtime import RUNTIME_ABI
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.formulas import FORMULAS
from specgen.spec.models import Target
from specgen.targets import Backend, TargetInfo, target_info
from specgen.values import value

if TYPE_CHECKING:
    from collections.abc import Callable

    from specgen.resolved import Resolved, TmaBox
    from specgen.spec.load import LoadedSpec

def _row(t: object) -> TargetInfo:
    return t if isinstance(t, TargetInfo) else target_info(t)


def is_tpu_target(t: object) -> bool:
    """A Mosaic TPU target: the pallas backend on a VMEM row (this design's TPU kernel)."""
    info = _row(t)
    return info.backend is Backend.pallas and info.memory == "vmem"


def is_mgpu_target(t: object) -> bool:
    """A Mosaic GPU target: the pallas backend on an SMEM row (this design's wgmma kernel, raw TMA boxes);
    the PAL004-PAL009 rules concern it."""
    info = _row(t)
    return info.backend is Backend.pallas and info.memory == "smem"


MGPU_CONSUMER_WGS = 2  # consumer warpgroups splitting the CTA tile along N
MGPU_EPI_TILE = 64  # the epilogue's SMEM staging tile edge (rows and columns)
MGPU_BARRIER_BYTES = 8  # one mbarrier; each pipeline step has a full and an empty one
# Pallas Mosaic GPU starts every SMEM buffer on a 1024-byte boundary (jax `_src/pallas/mosaic_gpu/core.py`
# SMEM_ALIGNMENT): a buffer whose bytes are no multiple of it takes the rest of its last KiB too.
MGPU_SMEM_ALIGNMENT = 1024
# wgmma groups a consumer keeps running past a K step (the step's SMEM is released that many steps
# later): overlapping consecutive wgmmas, as CUTLASS's mainloops do. Measured on the H200: bench_pallas.py.
MGPU_WGMMA_IN_FLIGHT = 1
MGPU_MEMORY_REGISTERS = 40  # setmaxnreg for the TMA warpgroup (JAX's Hopper matmul; HOPPER.md)
# SMEM swizzles Mosaic GPU's SwizzleTransform and wgmma take, bytes, largest first (jax 0.10.2
# `mosaic/gpu/wgmma.py`: "No swizzle is not supported"; 16 is refused as "Swizzle 16 is not supported").
MGPU_SWIZZLES = (128, 64, 32)
TMA_MIN_BYTES = 16  # a TMA-copied array's contiguous extent spans a multiple of 16 bytes

# jnp attribute per specgen dtype (tf32 has no TPU mode: DT003 refuses it before a plan is made).
JNP_DTYPES: dict[DType, str] = {
    DType.f32: "float32", DType.f16: "float16", DType.bf16: "bfloat16", DType.fp8_e4m3: "float8_e4m3fn",
    DType.fp8_e5m2: "float8_e5m2", DType.int8: "int8", DType.int32: "int32", DType.tf32: "float32",
}
VMEM_HEADROOM = 1.25  # default scoped limit: the plan's bytes plus 25% (PallasOptions), capped at VMEM


def swaps(spec: object) -> bool:
    """`pallas.swap_ab` where the spec's pallas section has it (a grouped spec's has none: its Mosaic GPU kernel
    never swaps), so that the grouped Mosaic GPU design reads these helpers and rules as the dense one does."""
    return bool(getattr(spec.pallas, "swap_ab", False))  # type: ignore[attr-defined]


def swizzle_bytes(*extents: int) -> int:
    """The largest SMEM swizzle (128/64/32 bytes) dividing every given byte extent; 0 where none does
    (PAL008 refuses the spec)."""
    return next((sw for sw in MGPU_SWIZZLES if all(e % sw == 0 for e in extents)), 0)


@value
class MgpuSwizzles:
    """The SMEM swizzles of the Mosaic GPU kernel's tiles, bytes (0: none fits, PAL008)."""

    ab: int  # A's and B's: one wgmma takes one swizzle for both operands
    out: int  # the epilogue's staging subtile (and a residual's, staged in the same slot)


@per_spec
def mgpu_swizzles(spec: GemmSpec) -> MgpuSwizzles:
    """One swizzle for A and B (Mosaic GPU's wgmma lowering: "Non-matching swizzles of operands a and b"),
    dividing each SMEM tile's contiguous extent in bytes (K for a K-major operand; M for MN-major A;
    for MN-major B the warpgroup's tile.n/2 slice, whose start must fall on a whole swizzle tile) and
    K's (wgmma issues K in groups of swizzle/bytes elements: "K must be a multiple of ..."). The
    output's from the epilogue subtile's width."""
    t, lay = spec.tile, mgpu_layout(spec)
    a_b, b_b = spec.a.dtype.bytes, spec.b.dtype.bytes
    a_minor = t.k * a_b if spec.a.major == "k" else t.m * a_b
    b_minor = t.k * b_b if spec.b.major == "k" else lay.wg_n * b_b
    return MgpuSwizzles(swizzle_bytes(a_minor, b_minor, t.k * a_b, t.k * b_b),
                        swizzle_bytes(lay.epi_n * spec.out.dtype.bytes))


@value
class MgpuLayout:
    """How the Mosaic GPU kernel splits a CTA tile: per consumer warpgroup a tile.m x wg_n slice, stored
    through epi_m x epi_n SMEM subtiles, `out_slots` of them per warpgroup."""

    wg_n: int
    epi_m: int
    epi_n: int
    out_slots: int
    residual_barriers: int  # mbarriers the residual's TMA loads wait on (0 without a residual)


@per_spec
def mgpu_layout(spec: GemmSpec) -> MgpuLayout:
    t = spec.tile
    wg_n = max(1, t.n // MGPU_CONSUMER_WGS)
    epi_m, epi_n = min(MGPU_EPI_TILE, t.m), min(MGPU_EPI_TILE, wg_n)
    slots = max(1, min(2, (t.m * wg_n) // (epi_m * epi_n)))
    residual = any(a.shape == "matrix" for a in spec.runtime_args())
    return MgpuLayout(wg_n, epi_m, epi_n, slots, MGPU_CONSUMER_WGS * slots if residual else 0)


def mgpu_smem(spec: GemmSpec, capacity: int, ab_stages: int, lay: MgpuLayout) -> MemoryBudget:
    """The Mosaic GPU kernel's SMEM (`memory`'s at `mgpu_layout`; a bench's rows at a layout of their own), the
    structure of JAX's warp-specialized Hopper matmul (`pallas/ops/gpu/hopper_matmul_mgpu.py`): the CTA tile split along
    N between two consumer warpgroups; per step an A and a B tile plus a full/empty mbarrier pair; per consumer
    warpgroup up to two epi_m x epi_n (64 x 64) buffers staging the TMA store. Calibrated on real lowerings (jax 0.11.2,
    H200: bench/results/2026-11-22-h200-mgpu-smem.jsonl): equal to the byte. A residual is TMA-loaded into the output's
    staging slot, one mbarrier per slot (the example's `c_gmem` path): `residual_barriers` x 8 B more."""
    t, out_bytes = spec.tile, spec.out.dtype.bytes
    # The A buffer (all stages), the B buffer and the output's slots are each padded to whole KiB
    # (MGPU_SMEM_ALIGNMENT; measured 512 B over the unpadded sum for a 3-stage 128x48x16 bf16 tile).
    # gated: a gate and an up B buffer (two pipeline inputs, one barrier pair a step: jax pallas/mosaic_gpu/pipeline.py)
    b_buffers = 2 if gated_op(spec.epilogue) is not None else 1
    a_tile, b_tile = t.m * t.k * spec.a.dtype.bytes, t.k * t.n * spec.b.dtype.bytes
    out_tiles = MGPU_CONSUMER_WGS * lay.out_slots * lay.epi_m * lay.epi_n * out_bytes
    pad = (-(a_tile * ab_stages) % MGPU_SMEM_ALIGNMENT + b_buffers * (-(b_tile * ab_stages) % MGPU_SMEM_ALIGNMENT)
           + -out_tiles % MGPU_SMEM_ALIGNMENT)
    barriers = lay.residual_barriers * MGPU_BARRIER_BYTES
    label = "KiB alignment" if not barriers else "residual barriers" if not pad else f"residual barriers {barriers} + KiB alignment {pad} ="
    return MemoryBudget("SMEM", capacity, 0, a_tile + b_buffers * b_tile + 2 * MGPU_BARRIER_BYTES, ab_stages, out_tiles,
                        epilogue_overlaps_ab=False, extra_bytes=barriers + pad, extra_label=label)


@dataclass(frozen=True)
class PallasModule(GemmModule):
    """What both Pallas modules add to the GEMM module header (its operands documented in their stored
    layouts, `_module_fields`): the targets the module serves."""

    targets: list[str]


@dataclass(frozen=True)
class PallasTpuPlan(PallasModule):
    """Every number templates/gemm/pallas/gemm_tpu.py.jinja renders, named."""

    acc_jnp_dtype: str
    tile_m: int  # the blocks (the module's BLOCK_M, BLOCK_N, BLOCK_K)
    tile_n: int
    tile_k: int
    ab_stages: int  # pipeline buffers per A / B BlockSpec (AB_BUFFERS; 2: Pallas's default double buffering)
    vmem_bytes: int  # what the plan's blocks need (the VMEM001 figure)
    vmem_breakdown: str
    vmem_limit_bytes: int  # the scoped limit the kernel requests
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object] = field(default_factory=dict)
    # the backward (spec: training; training.py in this package), None for a forward-only kernel
    training: TpuTrainingPlan | None = field(default=None, kw_only=True)
    gated: bool = field(default=False, kw_only=True)  # halves, B K-major (tpu_gated.py): a gate and an up block a step


@dataclass(frozen=True, kw_only=True)
class MgpuConfig(StagedConfigRow):
    """One config of the Mosaic GPU kernel: the default's or a size-selected variant's (a row of the
    module's `Config` table, passed to the kernel as a static argument). Each is resolved and checked on
    its own (stages, SMEM, TMA boxes), so a variant may change any config key: the kernel reads every
    number of it at trace time. Its tile is the CTA's; its ab_stages the TMA pipeline's depth (the
    Config's `stages`)."""

    wgmma_in_flight: int  # wgmma groups a consumer leaves running while it issues the next K step
    wg_n: int  # each consumer warpgroup's share of tile_n
    epi_m: int
    epi_n: int
    out_slots: int
    residual_barriers: int
    a_swizzle: int  # bytes
    b_swizzle: int
    out_swizzle: int
    raster_dim: int  # planar_snake's minor dim: 0 bands of group_m tile rows (raster along_m), 1 of columns
    persistent: bool
    cluster_m: int  # CTAs per cluster along M / N (1x1, 2x1 or 1x2): the pair multicasts its shared operand
    cluster_n: int
    smem_bytes: int  # the SMEM001 figure; equal to what Mosaic GPU allocates
    smem_breakdown: str
    swap_ab: bool  # pallas.swap_ab: the accumulator is out^T's (wg_n x tile_m), epi_n x epi_m subtiles of it


def mgpu_config(r: Resolved) -> MgpuConfig:
    """The config a resolved (spec, target[, variant]) renders: its effective spec, stages and budget."""
    spec = r.spec
    t, lay, sw = spec.tile, mgpu_layout(spec), mgpu_swizzles(spec)
    return MgpuConfig(
        index=r.variant, when="" if r.when is None else str(r.when),
        bounds=[] if r.when is None else list(r.when.bounds().items()),
        tile_m=t.m, tile_n=t.n, tile_k=t.k, ab_stages=r.ab_stages,
        wgmma_in_flight=min(MGPU_WGMMA_IN_FLIGHT, r.ab_stages - 1),
        wg_n=lay.wg_n, epi_m=lay.epi_m, epi_n=lay.epi_n, out_slots=lay.out_slots,
        residual_barriers=lay.residual_barriers, a_swizzle=sw.ab, b_swizzle=sw.ab, out_swizzle=sw.out,
        group_m=spec.schedule.group_m, raster_dim=0 if spec.schedule.raster == "along_m" else 1,
        persistent=spec.schedule.persistent, cluster_m=spec.cluster.m, cluster_n=spec.cluster.n,
        smem_bytes=r.budget.total, smem_breakdown=r.budget.breakdown(), swap_ab=swaps(spec),
    )


@dataclass(frozen=True)
class PallasMgpuPlan(PallasModule):
    """Every number templates/gemm/pallas/gemm_mgpu.py.jinja renders, named: the module-wide ones here, each
    config's in `config` (the default) and `variants` (size-selected, in the launcher's order)."""

    warpgroups: int  # consumer warpgroups, side by side in N
    a_min: int  # elements in 16 bytes: a TMA'd array's contiguous extent is a multiple of this
    b_min: int
    out_min: int
    memory_registers: int
    num_sms: int  # the grid's size where no device says (lowering on a CPU machine)
    config: MgpuConfig
    variants: list[MgpuConfig]
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object] = field(default_factory=dict)
    gated: bool = field(default=False, kw_only=True)  # B (K, 2N): a gate and an up tile a step, N outputs
    gated_layout: str = field(default="", kw_only=True)  # "halves" or "interleaved"
    training: mgt.MgpuTrainingPlan | None = field(default=None, kw_only=True)  # the backward (training_mgpu.py)

    @property
    def configs(self) -> list[MgpuConfig]:
        """The default first, then the variants (the module's CONFIGS order)."""
        return [self.config, *self.variants]


# The package of the Mosaic GPU modules, written beside them (the same text as render's backend packages).
MGPU_PACKAGE_INIT = f"# Generated by specgen {__version__}; do not edit.\n" + '"""Rendered pallas {arch} kernels."""\n'


def _arg(name: str, role: str, dtype: DType, doc: str) -> Arg:
    return make_arg(name, role, dtype, doc, lambda d: {"jnp": JNP_DTYPES[d]})


def _module_fields(loaded: LoadedSpec, spec: GemmSpec, targets: list[Target]) -> dict[str, object]:
    """The PallasModule fields of either plan: the operands documented in their stored layouts."""
    bsz = "batch, " if spec.batch else ""
    a_dims = f"({bsz}M, K)" if spec.a.major == "k" else f"({bsz}K, M)"
    b_dims = f"({bsz}N, K)" if spec.b.major == "k" else f"({bsz}K, N)"
    return dict(
        **plan_header(loaded),
        targets=[str(t) for t in targets],
        a=_arg("a", "a", spec.a.dtype, f"{a_dims} {spec.a.dtype}, stored {spec.a.major}-major"),
        b=_arg("b", "b", spec.b.dtype, f"{b_dims} {spec.b.dtype}, stored {spec.b.major}-major"),
        out=_arg("out", "out", spec.out.dtype, f"({bsz}M, N) {spec.out.dtype}"),
        a_major=spec.a.major,
        b_major=spec.b.major,
        batch=spec.batch,
    )


class PallasGemmDesign(GemmDesign):
    """kind "gemm", backend pallas: Mosaic TPU (MXU) and Mosaic GPU (wgmma). See the module docstring."""

    name = "Pallas"
    keys = (("gemm", Backend.pallas, "mxu"), ("gemm", Backend.pallas, "wgmma"))
    compiler_modules, libraries, extra, max_auto_stages = ("jax",), ("jax", "jaxlib"), "pallas", 4

    # The Mosaic GPU module renders size-selected variants (a Config row each, picked by the jitted call at
    # trace time); the TPU module renders one config (check's CFG003 refuses variants there).
    variants_label = "Pallas Mosaic GPU"

    def renders_variants_on(self, target: TargetInfo) -> bool:
        return is_mgpu_target(target)

    # A `training` backward, a jax.custom_vjp on the module's JAX entry, a gated op's too: TPU (training.py in this
    # package; halves: PAL013; fp8 since session 32) and Mosaic GPU (training_mgpu.py: 16-bit, no swap_ab or cluster)
    training_label = gated_training_label = "Pallas (TPU, Mosaic GPU)"
    renders_gated_training = True

    def renders_training_on(self, target: TargetInfo) -> bool:
        return is_tpu_target(target) or is_mgpu_target(target)

    renders_fp8_training_on = renders_training_on  # an fp8 forward's: both (training*.py)

    renders_unbatched_chain_training = True  # the other chains, unbatched: both (training*.py)
    renders_batched_training = True  # a batched forward's: both (batch_backward.jinja)
    renders_batched_fp8_training = True  # an fp8 one's too (session 34): both (batch_backward.jinja)

    def training_refusal(self, spec: GemmSpec, target: TargetInfo | None = None) -> str:
        return mgt.training_refusal(spec) if target is not None and is_mgpu_target(target) else ""

    renders_gated = True  # a gated epilogue on both: Mosaic GPU (PAL012 its limits), TPU (tpu_gated.py, PAL013)

    def auto_stages(self, spec: GemmSpec, target: TargetInfo) -> int | None:
        """Pallas TPU pipelines double-buffer each BlockSpec by default."""
        return TPU_ARGS_DOUBLE_BUFFERED if is_tpu_target(target) else None

    def accumulator_threads(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Mosaic GPU: two consumer warpgroups split N."""
        return MGPU_CONSUMER_WGS * WARPGROUP_THREADS

    def has_register_model(self, target: TargetInfo) -> bool:
        return is_mgpu_target(target)  # the TPU accumulator is a VMEM scratch

    def config_notes(self, spec: GemmSpec) -> str:
        return " swap_ab" if spec.pallas.swap_ab else ""

    def mma_tile(self, spec: GemmSpec) -> tuple[tuple[int, str], tuple[int, str]]:
        """With `pallas.swap_ab` wgmma's rows are tile.n (each warpgroup's half) and its columns tile.m."""
        return ((spec.tile.n, "n"), (spec.tile.m, "m")) if spec.pallas.swap_ab else super().mma_tile(spec)

    # Mosaic lowering for TPU, which runs on a CPU machine (libtpu's own compile, and its VMEM figure, need a TPU)
    compile_hook = "specgen.kinds.gemm.designs.pallas.compile:compile_module"

    def torch_entry(self, module: object, kernel: str) -> Callable[..., object]:
        """`<name>_torch` (torch tensors in and out through DLPack), waited for: the kernel runs on jax's
        stream, so a caller timing torch's stream synchronizes the device."""
        fn = getattr(module, f"{kernel}_torch")

        def call(*args: object) -> object:
            import torch

            out = fn(*args)
            torch.cuda.synchronize()
            return out

        return call

    # --- memory ---------------------------------------------------------------------------------------
    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        t, out_bytes = spec.tile, spec.out.dtype.bytes
        tpu = target.tpu
        if tpu is not None:
            buf = TPU_ARGS_DOUBLE_BUFFERED
            # Vector blocks are padded to whole (sublane, 128-lane) tiles: a (bm, 1) row vector takes
            # bm x 128 lanes, a (1, bn) column vector one tile of 32 bytes of rows (8 x f32, 16 x bf16).
            vectors = sum(
                (t.m * TPU_LANES * a.dtype.bytes if a.shape == "vec_m" else TPU_TILE_ROW_BYTES * t.n) * buf
                for a in spec.runtime_args() if a.shape in ("vec_m", "vec_n")
            )
            residual = sum(t.m * t.n * a.dtype.bytes * buf for a in spec.runtime_args() if a.shape == "matrix")
            acc_bytes = 4  # f32 or int32 accumulator scratch
            return MemoryBudget(
                "VMEM", tpu.vmem_bytes, 0, t.m * t.k * spec.a.dtype.bytes + b_halves(spec) * t.k * t.n * spec.b.dtype.bytes,
                ab_stages, epilogue_bytes=buf * t.m * t.n * out_bytes + residual, epilogue_overlaps_ab=False,
                extra_bytes=b_halves(spec) * t.m * t.n * acc_bytes + vectors,  # gated: the up block and accumulator
            )
        gpu = target.gpu  # pallas:gpu_sm90 (Mosaic GPU)
        assert gpu is not None
        return mgpu_smem(spec, gpu.smem_per_block, ab_stages, mgpu_layout(spec))

    def tma_boxes(self, spec: GemmSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """The Mosaic GPU kernel's TMA boxes: the A and B tiles, and the epilogue's subtile for the output
        (and a residual, staged in the output's slot). TPU targets move no TMA boxes.

        Mosaic GPU copies a tile through a tiled view of GMEM, (8 rows x swizzle bytes) tiles, so the box
        it encodes is (outer / 8, inner / swizzle elements, 8, swizzle elements) (jax 0.10.2
        `mosaic/gpu/launch_context.py`: "Async copies only support copying <=256 elements along each
        dimension" of that shape): a 320-row tile is 40 row tiles and lowers (tests/grids/mgpu.py)."""
        from specgen.resolved import TmaBox

        if not target.tma_boxes:
            return ()
        # a gated B (Mosaic GPU) moves as a gate and an up box of tile.n columns, whatever its layout
        a, b, _ = tma_boxes(spec.model_copy(update={"epilogue": []}) if gated_op(spec.epilogue) else spec)
        lay, sw = mgpu_layout(spec), mgpu_swizzles(spec)
        out = TmaBox("out", lay.epi_m, lay.epi_n, spec.out.dtype.bytes, ("out",))

        def tiled(box: TmaBox, swizzle: int) -> TmaBox:
            if not swizzle:  # no swizzle fits (PAL008): the plain box
                return box
            elems = swizzle // box.elem_bytes
            dims = (-(-box.outer // 8), -(-box.inner // elems), min(8, box.outer), min(elems, box.inner))
            return TmaBox(box.operand, box.outer, box.inner, box.elem_bytes, box.field, dims)

        return (tiled(a, sw.ab), tiled(b, sw.ab), tiled(out, sw.out))

    # --- modules --------------------------------------------------------------------------------------
    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        """All TPU targets share `pallas/<name>.py`; the Mosaic GPU target renders
        `pallas/gpu_sm90/<name>.py` (a package of its own, so no kernel name can collide with it)."""
        out: dict[str, list[Target]] = {}
        tpu = [t for t in targets if is_tpu_target(t)]
        if tpu:
            out[f"pallas/{spec.name}.py"] = tpu
        for t in targets:
            if is_mgpu_target(t):
                out[f"pallas/{t.arch}/{spec.name}.py"] = [t]
        return out

    # --- plan and render ------------------------------------------------------------------------------
    # One module serves every TPU target, so their effective configs (per_target applied) agree on what
    # shapes it: the blocks, the A/B buffering and the VMEM limit (check's CFG001 says where they do not).
    shared_config: tuple[tuple[str, ...], ...] = (("tile",), ("pipeline", "ab_stages"), ("pallas",))

    def plan(self, loaded: LoadedSpec, targets: list[Target],
             resolved: dict[str, Resolved]) -> PallasTpuPlan | PallasMgpuPlan:
        """The TPU module's plan (every TPU target of the spec), or the Mosaic GPU module's (its one target)."""
        if is_mgpu_target(targets[0]):
            (target,) = targets
            return self._plan_mgpu(loaded, target, resolved[str(target)])
        return self._plan_tpu(loaded, targets, resolved)

    def _plan_tpu(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> PallasTpuPlan:
        # The effective config: CFG001 keeps shared_config equal across the targets, so the first's serves
        spec = resolved[str(targets[0])].spec
        contexts = [resolved[str(t)] for t in targets]
        budgets = [c.budget for c in contexts]
        (buffers,) = {c.ab_stages for c in contexts}  # `auto` is 2 on every TPU; a number is the spec's
        need = max(b.total for b in budgets)  # the same on every generation; max() in case that changes
        cap = min(b.capacity for b in budgets)
        limit = spec.pallas.vmem_limit_bytes or min(cap, math.ceil(need * VMEM_HEADROOM))
        acc = "int32" if spec.accumulator == DType.int32 else "float32"
        return PallasTpuPlan(
            **tpu_gated_fields(spec, _module_fields(loaded, spec, targets), _arg),
            acc_jnp_dtype=acc,
            tile_m=spec.tile.m,
            tile_n=spec.tile.n,
            tile_k=spec.tile.k,
            ab_stages=buffers,
            vmem_bytes=need,
            vmem_breakdown=budgets[0].breakdown(),
            vmem_limit_bytes=limit,
            epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
            args=[_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
            spec_json=loaded.spec.model_dump(mode="json"),
            training=plan_tpu_training(spec, targets, resolved, JNP_DTYPES, VMEM_HEADROOM),
        )

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        """{relative path: module text}, planned from what check resolved for each target."""
        from specgen.render.env import environment
        from specgen.render.specs import spec_import

        out: dict[str, str] = {}
        env = environment(KIND)
        for rel, group in self.modules(loaded.spec, targets).items():
            if is_mgpu_target(group[0]):
                (target,) = group
                out[rel] = env.get_template("pallas/gemm_mgpu.py.jinja").render(
                    mgpu_context(self._plan_mgpu(loaded, target, resolved[str(target)])),
                    spec_import=spec_import(rel, loaded.name) if shared_spec else None)
                out[f"{rel.rsplit('/', 1)[0]}/__init__.py"] = MGPU_PACKAGE_INIT.format(arch=target.arch)
            else:
                out[rel] = env.get_template("pallas/gemm_tpu.py.jinja").render(
                    tpu_context(self._plan_tpu(loaded, group, resolved)),
                    spec_import=spec_import(rel, loaded.name) if shared_spec else None)
        return out

    def _plan_mgpu(self, loaded: LoadedSpec, target: Target, ctx: Resolved) -> PallasMgpuPlan:
        """The Mosaic GPU module's numbers, from what check resolved for the target and each of its
        size-selected variants (effective spec, stages and SMEM budget): nothing is resolved again."""
        spec = ctx.spec
        a_b, b_b, o_b = spec.a.dtype.bytes, spec.b.dtype.bytes, spec.out.dtype.bytes
        gpu = target_info(target).gpu
        assert gpu is not None
        gated, fields = gated_op(spec.epilogue), _module_fields(loaded, spec, [target])
        if gated is not None:  # B's 2N columns, N2 (PAL012 refuses what the kernel does not load)
            dims = ("batch, " if spec.batch else "") + ("N2, K" if spec.b.major == "k" else "K, N2")
            fields["b"] = _arg("b", "b", spec.b.dtype, f"({dims}) {spec.b.dtype}, stored {spec.b.major}-major, N2 = 2N: "
                               + ("gate [0, N), up [N, 2N)" if gated.layout == "halves" else "gate 2j, up 2j + 1"))
        return PallasMgpuPlan(
            **fields, gated=gated is not None, gated_layout=gated.layout if gated is not None else "",
            warpgroups=MGPU_CONSUMER_WGS,
            a_min=TMA_MIN_BYTES // a_b,
            b_min=TMA_MIN_BYTES // b_b,
            out_min=TMA_MIN_BYTES // o_b,
            memory_registers=MGPU_MEMORY_REGISTERS,
            num_sms=gpu.num_sms_example,
            config=mgpu_config(ctx),
            variants=[mgpu_config(v) for v in ctx.variants],
            epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
            args=[_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
            spec_json=loaded.spec.model_dump(mode="json"),
            training=mgt.plan_mgpu_training(spec, ctx, mgpu_config, JNP_DTYPES),
        )

    def tune_space(self, spec: GemmSpec, target: TargetInfo, when: When | None = None) -> dict[str, tuple[object, ...]]:
        """The knobs `specgen tune` sweeps: Mosaic GPU tiles (wgmma rows of 64, K one swizzle row or two),
        pipeline steps (deep ones for decode-sized variants, whose small tiles leave SMEM for them) and the
        2x1 cluster (B multicast); TPU blocks in MXU multiples (timed only on a TPU). A variant's slot is
        tuned like the default (its module renders every config); one serving M <= 64 (`when.m_max`, decode) also
        sweeps `pallas.swap_ab` with tile.m 8, 16 and 32 (check prunes them unswapped, MMA001)."""
        if target.memory == "vmem":
            return {"tile.m": (256, 512), "tile.n": (256, 512, 1024), "tile.k": (256, 512)}
        k = (128, 256) if spec.a.dtype.bytes == 1 else (64, 128)
        if decode_slot(when):
            return {"tile.m": (8, 16, 32, 64), "tile.n": (128, 256), "tile.k": k, "pipeline.ab_stages": (4, 6, 8),
                    "pallas.swap_ab": (False, True)}
        return {"tile.m": (64, 128), "tile.n": (64, 128, 256), "tile.k": k, "pipeline.ab_stages": (2, 3, 4, 6, 8),
                "cluster.m": (1, 2)}


# The TPU module's METADATA keys for the plan's fields it names otherwise (its BLOCK_M, ..., AB_BUFFERS).
TPU_METADATA_KEYS = {"tile_m": "block_m", "tile_n": "block_n", "tile_k": "block_k", "ab_stages": "ab_buffers"}


def _identity_first(fields: dict[str, object]) -> dict[str, object]:
    """A TPU plan's METADATA entries: the module's identity (where its spec came from, what it serves), then
    its numbers; the operands, the epilogue and the spec itself are said elsewhere in the module."""
    first = ("spec_file", "spec_hash", "specgen_version", "description", "targets")
    return {**{k: fields[k] for k in first},
            **{TPU_METADATA_KEYS.get(k, k): v for k, v in fields.items()
               if k not in (*first, "name", "spec_json", "a", "b", "out", "args", "epilogue", "training", "gated")}}


def tpu_context(p: PallasTpuPlan) -> dict[str, object]:
    """The template's variables: the plan, its METADATA dict, and the numbers the cost estimate uses."""
    meta = {"runtime_abi": RUNTIME_ABI, "kernel": p.name, **_identity_first(asdict(p)),
            **({"training": training_metadata(p.training)} if p.training is not None else {}),
            **({"gated": "halves"} if p.gated else {})}
    return {
        "p": p,
        "plan_meta": meta,
        "jnp_dtypes": {d.value: JNP_DTYPES[d] for d in DType},
        "transcendentals": sum(1 for op in p.epilogue if op["op"] in ("activation", "gated") and FORMULAS[op["fn"]].transcendental),
        "a_bytes": DType(p.a.dtype).bytes,
        "b_bytes": DType(p.b.dtype).bytes,
        "out_bytes": DType(p.out.dtype).bytes,
    }


# Config fields the module's Config table carries (the rest of MgpuConfig is the docstring's and METADATA's),
# each as (the Config's field, MgpuConfig's): the table names the pipeline depth `stages`.
MGPU_CONFIG_FIELDS = tuple((f, "ab_stages" if f == "stages" else f) for f in (
    "tile_m", "tile_n", "tile_k", "stages", "wgmma_in_flight", "wg_n", "epi_m", "epi_n", "out_slots",
    "residual_barriers", "a_swizzle", "b_swizzle", "out_swizzle", "group_m", "raster_dim", "persistent",
    "cluster_m", "cluster_n", "smem_bytes", "swap_ab"))


def _config_meta(c: MgpuConfig) -> dict[str, object]:
    when = {"when": {f"{dim.lower()}_max": n for dim, n in c.bounds}} if c.bounds else {}
    return when | {k: getattr(c, attr) for k, attr in (*MGPU_CONFIG_FIELDS, ("smem_breakdown", "smem_breakdown"))}


def mgpu_metadata(p: PallasMgpuPlan) -> dict[str, object]:
    """The module's METADATA: its identity, the default config's SMEM figure (what `specgen compile`
    reports first), and every config's numbers."""
    return {"runtime_abi": RUNTIME_ABI, "kernel": p.name, "spec_file": p.spec_file, "spec_hash": p.spec_hash,
            "specgen_version": p.specgen_version, "description": p.description, "targets": p.targets,
            "a_major": p.a_major, "b_major": p.b_major, "batch": p.batch, "warpgroups": p.warpgroups,
            "memory_registers": p.memory_registers, "num_sms": p.num_sms,
            "smem_bytes": p.config.smem_bytes, "smem_breakdown": p.config.smem_breakdown,
            "config": _config_meta(p.config), "variants": [_config_meta(v) for v in p.variants],
            **({"training": mgt.mgpu_training_metadata(p.training)} if p.training is not None else {})}


def mgpu_context(p: PallasMgpuPlan) -> dict[str, object]:
    """The Mosaic GPU template's variables: the plan, its METADATA dict, the Config table's fields, and
    which code paths some config takes (the template renders a path only where one does)."""
    return {"p": p, "plan_meta": mgpu_metadata(p), "jnp_dtypes": {d.value: JNP_DTYPES[d] for d in DType},
            "config_fields": MGPU_CONFIG_FIELDS,
            "any_cluster": any(c.cluster_m * c.cluster_n > 1 for c in p.configs),
            "any_residual": any(c.residual_barriers for c in p.configs),
            "any_swap": any(c.swap_ab for c in p.configs)}


DESIGN = PallasGemmDesign()
