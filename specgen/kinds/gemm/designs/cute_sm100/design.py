"""The CuTe DSL GEMM for Blackwell (sm100, tcgen05): its SMEM and TMEM layout, its plan, its rendering.

The kernel (templates/gemm/cute/gemm_sm100.py.jinja) follows the structure of the CUTLASS DSL reference
persistent GEMM (examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm_persistent.py):
192 threads in six warps, warp-specialized and persistent:
- warp 5 loads: ONE rolled K loop whose blocking acquire on the A/B ring (`PipelineTmaUmma`, full and
  empty mbarriers per stage) is the whole pipelining, one TMA-load site per operand, multicast along
  the cluster where it has several CTAs on the other dim;
- warp 4 issues the tcgen05 MMAs (one thread): A and B from SMEM, the accumulator in tensor memory
  (TMEM), `acc_stages` accumulator buffers handed to the epilogue through `PipelineUmmaAsync`, so the
  epilogue of one tile runs under the next tile's MMAs. With `cute.two_cta` the CTA pair of the
  cluster (cluster.m even) shares one cta_group::2 MMA of 2 x tile.m rows: the even CTA issues it,
  each CTA loads its own tile.m rows of A and half the tile's columns of B;
- warps 0-3 are the epilogue: TMEM -> registers (tcgen05.ld) -> the fused op chain (the shared
  templates/gemm/cute/epilogue.jinja table) -> SMEM subtiles of `epi_m x epi_n` (`epi_stages` in flight)
  -> TMA store. Vector operands (bias, rowwise scales) are gathered per subtile, only the subtile's
  share of them held in registers; warp 0 also allocates and frees the TMEM (`TmemAllocator`);
- a static persistent tile scheduler, shared with the sm90 design (templates/gemm/cute/schedule.jinja):
  the work indices run over exactly the clusters that cover the output, in bands of group_m.

Size-selected variants render into one module as rows of its `Config` table (as the sm90 design's).

The SMEM it allocates is one struct (see `memory`): the mbarriers (A/B full and empty per stage,
accumulator full and empty per stage, the 2-CTA TMEM dealloc barrier) and the TMEM address slot,
then A stages, B stages and the epilogue staging, each aligned to 1024 bytes. The TMEM it allocates
is `tmem_alloc_columns`: columns per accumulator stage x stages, rounded up to a power of two >= 32.
`specgen compile` reads both from the compiled kernel and the tests compare them with the plan.

A gated epilogue (SwiGLU, GeGLU; cute_sm90/gated.py) keeps a gate and an up TMEM accumulator a stage side by
side (`tmem_columns`: 2 tile.n), read by the same tcgen05.ld at each subtile; its up tiles take their own SMEM
buffer (`memory`). Compiled and read in SASS only, as the rest of this design.

A `training` section (16-bit operands: the plain chains, a gated op's and the other chains (the sm90 chain pass),
batched too; an fp8 forward's, unbatched; training.py here) renders the CuTe sm90 design's
backward on this kernel: each backward GEMM a row of `TRAIN_CONFIGS` (the role's operand majors, the companion's tile,
cluster, 2-CTA MMA and stages), forward_pre storing pre by TMA beside out, recompute reading dOut as a residual is read;
the host side, the columns pass and the JAX custom_vjp are the sm90 module's. Compiled and read in SASS only.

Verification: there is no Blackwell GPU here. The kernel is verified by compiling it for sm_100a
(nvidia-cutlass-dsl, on a CPU) and reading its SASS (one UTMALDG site per operand, UTCHMMA /
UTCQMMA, UTMASTG, no local-memory spills); no numerics and no speed are claimed.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.design import module_identity
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.design import GemmDesign, epilogue_stages, tma_boxes
from specgen.kinds.gemm.designs.cute_sm90 import training as sm90_trn

# the CuTe designs spell dtypes and arguments alike and compile for the arch-specific target (sm_100a, not
# sm_100f: a known CUTLASS DSL issue with tcgen05)
# and lay out SMEM alike (1024-aligned buffers after the compiler's 1024-byte static pad)
from specgen.kinds.gemm.designs.cute_sm90.design import (
    GRID_Z_MAX,
    CuteModulePlan,
    cute_module_fields,
    host_context,
    host_parameters,
    render_per_arch,
)
from specgen.kinds.gemm.designs.cute_sm90.smem import BASE_ALIGN_PAD, MBARRIER_BYTES, align_up
from specgen.kinds.gemm.designs.cute_sm100 import training as trn
from specgen.kinds.gemm.plan import StagedConfigRow
from specgen.kinds.gemm.spec import GemmSpec
from specgen.memo import per_spec
from specgen.resolved import Resolved, TmaBox
from specgen.spec.epilogue import gated_op
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import Backend, TargetInfo, target_info

TMEM_SLOT_BYTES = 4  # the TMEM base address the allocator writes to SMEM
THREADS = 192  # epilogue warps 0-3, MMA warp 4, TMA warp 5 (the CUTLASS reference's split)
EPILOGUE_THREADS = 128
TMEM_DATAPATHS = 32  # TMEM lanes one warp's tcgen05.ld reaches (a subpartition)
EPILOGUE_ELEMENTS = 4096  # elements of one epilogue subtile (CUTLASS `compute_epilogue_tile_size`)


def two_cta(spec: GemmSpec) -> bool:
    return spec.cute.two_cta


def mma_m(spec: GemmSpec) -> int:
    """Rows of one tcgen05 MMA: tile.m per CTA, twice that across a 2-CTA pair."""
    return spec.tile.m * (2 if two_cta(spec) else 1)


def tmem_columns(spec: GemmSpec) -> int:
    """Accumulator TMEM columns per CTA per stage: tile.n, except a 2-CTA pair of 64-row CTAs packs two
    column halves into each CTA's 128 lanes (tile.n / 2). fp16 accumulators are not packed. Sources:
    cutlass `mma_traits_sm100_frag.hpp`; CD `utils/blackwell_helpers.py` `compute_acc_tmem_cols_per_stage`.
    A gated epilogue keeps a gate and an up accumulator a stage, side by side: 2 tile.n columns (a 128x128 tile's
    two stages fill the 512; a 128x256 tile takes one)."""
    n = spec.tile.n * (2 if gated_op(spec.epilogue) is not None else 1)
    return n // 2 if two_cta(spec) and spec.tile.m == 64 else n


def tmem_alloc_columns(columns: int, stages: int) -> int:
    """What the kernel allocates: a power of two in [32, 512] (CD `cute/arch/tmem.py`)."""
    return max(32, 1 << (columns * stages - 1).bit_length())


def tmem_warps(spec: GemmSpec) -> tuple[int, int]:
    """How the four epilogue warps split the TMEM accumulator of one CTA: (2, 2) for a 2-CTA pair of 64-row
    CTAs, else (4, 1) (CD `utils/blackwell_helpers.py` `compute_epilogue_tile_size`)."""
    return (2, 2) if two_cta(spec) and spec.tile.m == 64 else (4, 1)


# Values an epilogue thread holds per element of its subtile fragment at the fused ops: the accumulator,
# the output, and one fragment per vector or matrix operand (the shared epilogue table gathers each into a
# fragment shaped like the accumulator). Where they pass EPILOGUE_HELD_VALUES per thread the subtile's
# columns are halved. Measured (nvidia-cutlass-dsl 4.8.1, sm_100a SASS): every op of the table at once
# (six vectors and a residual: 9 fragments) on a 128x32 subtile (32 values each) spilled 67 LDL; halved
# to 128x16 it does not; the catalogue's (at most 4 fragments of 32) are spill-free.
# An erf GELU's working set counts as GELU_ERF_FRAGMENTS more. Measured the same way: with it, three
# compile-grid kernels on 32-column subtiles spilled (7 to 19 LDL, at 64 registers) and compiled spill-free
# on 16-column ones (tests/grids/cute_sm100.py, seeds 17 and 18).
EPILOGUE_HELD_VALUES = 160
GELU_ERF_FRAGMENTS = 4


def held_fragments(spec: GemmSpec) -> int:
    """Fragments an epilogue thread holds at once: accumulator, output, each tensor operand (a grouped
    kernel's per-group (G, N) operands too: kinds/grouped/designs/cute_sm100), each matrix a training companion
    stores beside its output (`GemmSpec.stores`: forward_pre's pre, ...), and an erf GELU's working set."""
    operands = sum(1 for a in spec.runtime_args() if a.shape in ("vec_m", "vec_n", "matrix", "group_n"))
    operands += getattr(spec, "stores", 0)  # (a grouped spec has none)
    gelu = any(op.op in ("activation", "gated") and op.fn == "gelu" for op in spec.epilogue)  # GeGLU's erf too
    up = gated_op(spec.epilogue) is not None  # a gated epilogue's up accumulator subtile
    return 2 + up + operands + GELU_ERF_FRAGMENTS * gelu


@per_spec
def epilogue_tile(spec: GemmSpec) -> tuple[int, int]:
    """The SMEM subtile one TMA store writes. The CUTLASS DSL's choice for an epilogue without a source
    tile (CD `utils/blackwell_helpers.py` `compute_epilogue_tile_size`): min(tile.m, 32 x warp rows)
    rows (one TMEM subpartition of 32 lanes per warp), 4096 elements' worth of columns halved until they
    divide tile.n, at least 16 bytes per warp column; then halved while the epilogue's held fragments
    (`held_fragments`) pass EPILOGUE_HELD_VALUES per thread. The template builds this tile from
    Config's epi_m and epi_n as that helper lays it out."""
    t = spec.tile
    warp_m, warp_n = tmem_warps(spec)
    em = min(t.m, TMEM_DATAPATHS * warp_m)
    n_perf = EPILOGUE_ELEMENTS // em
    while t.n % n_perf:
        n_perf //= 2
    n_min = max(16 // spec.out.dtype.bytes * warp_n, 8 * warp_n)  # row-major output: 128 bits of N per warp
    en = min(t.n, max(n_perf, n_min))
    if t.n % en:
        en = t.n
    threads = EPILOGUE_THREADS
    while held_fragments(spec) * em * en // threads > EPILOGUE_HELD_VALUES and en // 2 >= n_min and t.n % (en // 2) == 0:
        en //= 2
    return em, en


def a_stage_bytes(spec: GemmSpec) -> int:
    t = spec.tile
    return t.m * t.k * spec.a.dtype.bytes


def b_stage_bytes(spec: GemmSpec) -> int:
    """A 2-CTA pair splits B's tile.n columns between its CTAs (each loads half; the MMA reads both). One buffer's:
    a gated epilogue's up tiles take a second (sU, `memory`)."""
    t = spec.tile
    return (t.n // 2 if two_cta(spec) else t.n) * t.k * spec.b.dtype.bytes


def barrier_bytes(ab_stages: int, acc_stages: int) -> int:
    """The struct's head: A/B full+empty and accumulator full+empty mbarriers, the TMEM dealloc mbarrier
    and the TMEM address slot."""
    return (2 * ab_stages + 2 * acc_stages + 1) * MBARRIER_BYTES + TMEM_SLOT_BYTES


def acc_stages_for(spec: GemmSpec, target: TargetInfo) -> int:
    assert target.gpu is not None
    if spec.pipeline.acc_stages != "auto":
        return spec.pipeline.acc_stages
    return 2 if tmem_columns(spec) * 2 <= target.gpu.tmem_columns else 1


def serves(target: Target | TargetInfo) -> bool:
    """This design renders the CuTe targets that issue tcgen05 (Blackwell)."""
    info = target if isinstance(target, TargetInfo) else target_info(target)
    return info.backend is Backend.cute and info.mma == "tcgen05"


@dataclass(frozen=True, kw_only=True)
class CuteSm100Config(StagedConfigRow):
    """One compiled configuration: the default's or a size-selected variant's (the module's `Config`). Its
    tile is per CTA."""

    cluster_m: int
    cluster_n: int
    two_cta: bool
    acc_stages: int
    epi_m: int
    epi_n: int
    epi_stages: int
    group_rows: bool
    persistent: bool
    smem_bytes: int
    smem_breakdown: str
    tmem_columns: int  # allocated (a power of two)

    @property
    def mma_m(self) -> int:
        return self.tile_m * (2 if self.two_cta else 1)

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster: the persistent grid holds one cluster per this many SMs."""
        return self.cluster_m * self.cluster_n

    @property
    def launch_clusters(self) -> int:
        """The most clusters a launch holds along grid z (65535 CTAs): one per tile up to it when not persistent."""
        return GRID_Z_MAX


def sm100_config(r: Resolved) -> CuteSm100Config:
    spec = r.spec
    t = spec.tile
    em, en = epilogue_tile(spec)
    bounds = list(r.when.bounds().items()) if r.when is not None else []
    return CuteSm100Config(
        index=r.variant, when=str(r.when) if r.when is not None else "", bounds=bounds,
        tile_m=t.m, tile_n=t.n, tile_k=t.k, cluster_m=spec.cluster.m, cluster_n=spec.cluster.n,
        two_cta=two_cta(spec), ab_stages=r.ab_stages, acc_stages=r.acc_stages,
        epi_m=em, epi_n=en, epi_stages=epilogue_stages(spec),
        group_m=spec.schedule.group_m, group_rows=spec.schedule.raster == "along_m",
        persistent=spec.schedule.persistent, smem_bytes=r.budget.total, smem_breakdown=r.budget.breakdown(),
        tmem_columns=tmem_alloc_columns(r.tmem_columns, r.acc_stages),
    )


@dataclass(frozen=True)
class CuteSm100Plan(CuteModulePlan):
    """Every number the sm100 template renders, named."""

    threads: int
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object]
    config: CuteSm100Config  # the default config
    variants: list[CuteSm100Config]  # size-selected, in the launcher's order
    # the backward (spec: training; training.py in this package), None for a forward-only kernel
    training: sm90_trn.CuteTrainingPlan | None = None

    @property
    def tma(self) -> bool:
        """A, B and out move by TMA (the shared torch host template's 16-byte stride guards)."""
        return True

    @property
    def any_two_cta(self) -> bool:
        return any(c.two_cta for c in (self.config, *self.variants, *(self.training.configs if self.training else ())))


class CuteSm100Gemm(GemmDesign):
    """GEMM on Blackwell through the CuTe DSL (see the module docstring)."""

    name = "CuTe sm100"
    keys = (("gemm", Backend.cute, "tcgen05"),)
    template = "cute/gemm_sm100.py.jinja"
    compile_hook = "specgen.kinds.gemm.designs.cute_sm100.compile:compile_module"
    compiler_modules = ("torch", "cutlass")
    extra = "cute"
    # a gated epilogue (kinds/gemm/designs/cute_sm90/gated.py: B viewed (N, K, 2, L), a gate and an up TMEM
    # accumulator a stage; EPI003 its limits): compiled for sm_100a and read in SASS, never run
    renders_gated = True
    # the C++ export the CuTe designs share (specgen/kinds/gemm/designs/cute_export/: compiled for sm_100a)
    export_hook = "specgen.kinds.gemm.designs.cute_export.export:export"
    # `auto` takes as many A/B stages as SMEM holds (fp8 256x128x128 over a pair: 8): no bf16-tuned cap
    max_auto_stages = 16
    renders_variants = True
    # a `training` backward (training.py in this package: the sm90 design's plan and host, this kernel by role): 16-bit
    # operands; compiled for sm_100a and read in SASS, never run. TRN001 refuses the rest
    renders_training = backward_kernels = True  # check settles a companion by its role's kernel (as sm90's)
    # a gated epilogue's (halves: pre's gate and up halves stored by TMA; interleaved: element-wise, as sm90's)
    renders_gated_training = True
    # an fp8 forward's (rowwise scales, then [bias], [activation] or both: the sm90 plan's, dgrad and wgrad over the
    # operands' 16-bit copies)
    renders_fp8_training = True
    # the other chains (scale, residual, clamp, cast, bias along m; 16-bit): the sm90 plan's and chain pass
    renders_unbatched_chain_training = True
    # a batched forward's (batch = true, 16-bit; not an fp8 one's): the sm90 host's batched glue, the kernel over its L mode
    renders_batched_training = True

    def serves(self, info: TargetInfo) -> bool:
        return serves(info)

    def training_refusal(self, spec: GemmSpec, target: TargetInfo | None = None) -> str:
        return trn.training_refusal(spec)

    def config_notes(self, spec: GemmSpec) -> str:
        """`check --variants`: the MMA a 2-CTA pair shares (tile.m is per CTA)."""
        return f" 2-CTA ({mma_m(spec)}x{spec.tile.n} MMA)" if two_cta(spec) else ""

    def accumulator_threads(self, spec: GemmSpec, target: TargetInfo) -> int:
        """The accumulator lives in TMEM; the four epilogue warps read it subtile by subtile."""
        return EPILOGUE_THREADS

    def tmem_columns(self, spec: GemmSpec, target: TargetInfo) -> int:
        return tmem_columns(spec)

    def acc_stages(self, spec: GemmSpec, target: TargetInfo) -> int:
        """Two TMEM accumulator stages when they fit, so the epilogue overlaps the next tile's MMA."""
        return acc_stages_for(spec, target)

    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        """The SharedStorage struct the template declares, to the byte: the mbarriers and the TMEM slot
        (`barrier_bytes`), then A, B and epilogue buffers, each 1024-aligned; plus the 1024 bytes of
        static SMEM the compiler puts in front of it (the dynamic base's 1024-byte alignment)."""
        gpu = target.gpu
        assert gpu is not None
        em, en = epilogue_tile(spec)
        epi = align_up(epilogue_stages(spec) * em * en * spec.out.dtype.bytes)  # always stored by TMA (CUTE103)
        reserve = BASE_ALIGN_PAD + align_up(barrier_bytes(ab_stages, acc_stages_for(spec, target)))
        a, b = a_stage_bytes(spec) * ab_stages, b_stage_bytes(spec) * ab_stages
        bufs = 2 if gated_op(spec.epilogue) is not None else 1  # a gated B: the gate's stages, then the up's (sU)
        pad = align_up(a) - a + bufs * (align_up(b) - b)  # each region starts 1024-aligned (e.g. 104-row B stages)
        return MemoryBudget("SMEM", gpu.smem_per_block, reserve, a_stage_bytes(spec) + bufs * b_stage_bytes(spec),
                            ab_stages, epi, epilogue_overlaps_ab=False, extra_bytes=pad, extra_label="alignment")

    def tma_boxes(self, spec: GemmSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """A's tile, B's share of the tile (half its columns per CTA of a 2-CTA pair), the epilogue subtile."""
        a, b, out = tma_boxes(spec)
        t = spec.tile
        em, en = epilogue_tile(spec)
        bn = t.n // 2 if two_cta(spec) else t.n
        b = TmaBox("B", *((bn, t.k) if spec.b.major == "k" else (t.k, bn)), b.elem_bytes, b.field)
        return (a, b, TmaBox("out", em, en, out.elem_bytes, out.field))

    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        served = [t for t in targets if serves(t)]
        return {f"cute/{spec.name}_sm100.py": served} if served else {}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> CuteSm100Plan:
        (target,) = targets  # one arch per module
        r = resolved[str(target)]
        spec = r.spec
        return CuteSm100Plan(
            **cute_module_fields(loaded, r),
            threads=THREADS,
            epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
            spec_json=loaded.spec.model_dump(mode="json"),
            config=sm100_config(r),
            variants=[sm100_config(v) for v in r.variants],
            training=trn.plan_training(spec, r, sm100_config),
        )

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        return render_per_arch(self, loaded, targets, resolved, render_context, shared_spec)


def metadata(p: CuteSm100Plan) -> dict[str, object]:
    """The module's one metadata dict (rendered as METADATA), the shape the sm90 modules' has."""
    c = p.config
    return module_identity(p.name, p.spec_file, p.spec_hash, p.specgen_version, [f"cute:{p.arch}"]) | {
        "plan": {p.compute_capability: {"ab_stages": c.ab_stages, "acc_stages": c.acc_stages,
                                        "smem_bytes": c.smem_bytes, "smem_breakdown": c.smem_breakdown,
                                        "tmem_columns": c.tmem_columns, "two_cta": c.two_cta,
                                        "arch_flag": p.arch_flag,
                                        "variants": [_variant_meta(v) for v in p.variants],
                                        **({"training": sm90_trn.training_metadata(p.training, ("tmem_columns", "two_cta"))} if p.training else {})}},
        "parameters": host_parameters(p),
    }


def _variant_meta(c: CuteSm100Config) -> dict[str, object]:
    return {"when": dict(c.bounds), "tile": [c.tile_m, c.tile_n, c.tile_k], "cluster": [c.cluster_m, c.cluster_n],
            "two_cta": c.two_cta, "ab_stages": c.ab_stages, "acc_stages": c.acc_stages, "smem_bytes": c.smem_bytes,
            "tmem_columns": c.tmem_columns}


def render_context(p: CuteSm100Plan) -> dict[str, object]:
    training = {"backward_schema": sm90_trn.backward_schema([p.a, p.b, *p.args])} if p.training is not None else {}
    return {"p": p, "metadata": metadata(p), **host_context(p), **training}


DESIGN = CuteSm100Gemm()
