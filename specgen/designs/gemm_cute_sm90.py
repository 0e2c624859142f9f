"""The CuTe DSL GEMM for Hopper (sm90, wgmma): its SMEM layout, its plan, and its rendering.

The kernel (templates/cute/gemm_sm90.py.jinja) is warp-specialized and persistent:
- one producer warpgroup whose first warp issues the TMA loads of A and B into `ab_stages` SMEM
  stages guarded by full/empty mbarriers (multicast across the cluster where cluster > 1);
- `mma_warpgroups` consumer warpgroups (1, or 2 splitting the tile along M: "cooperative") that run
  wgmma over each stage, then the epilogue: accumulator registers -> the fused op chain -> SMEM
  subtiles of `epi_m x epi_n` (`epi_stages` of them in flight) -> TMA store;
- a static persistent tile scheduler with group-M rasterization (`schedule.group_m`, `raster`).

The SMEM it allocates is one struct (see `memory`): the pipeline's mbarriers (8 bytes each, full and
empty per stage), then A stages, B stages and the epilogue staging, each aligned to 1024 bytes (the
128-byte swizzle atoms need it). `memory` is that struct's size to the byte; the tests compare it with
what the compiled kernel reserves.

Blackwell (sm100, tcgen05) will be a sibling module (gemm_cute_sm100.py) sharing the epilogue macros
(templates/cute/epilogue.jinja), the host part (templates/cute/host.jinja) and runtime/cute.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen import __version__
from specgen.envelope.budget import MemoryBudget
from specgen.envelope.devices import GPUS
from specgen.spec.dtypes import DType
from specgen.spec.load import LoadedSpec
from specgen.spec.models import GemmSpec, Target
from specgen.spec.targets import Backend

ARCH = "sm90"
ARCH_FLAG = "sm_90a"  # wgmma and setmaxnreg need the arch-specific target
ALIGN = 1024  # every SMEM buffer of the struct starts on a 1024-byte boundary (128B swizzle atom x 8 rows)
MBARRIER_BYTES = 8
BASE_ALIGN_PAD = 1024  # static SMEM the compiler places before the 1024-aligned dynamic struct
DEFAULT_EPILOGUE_STAGES = 2
WARPGROUP_THREADS = 128
WGMMA_M = 64  # rows per warpgroup per wgmma
# setmaxnreg: the producer gives registers back, the consumers take them (CUTLASS's sm90 split).
LOAD_REGISTERS = 40
MMA_REGISTERS = 232

# specgen dtype -> cutlass.Numeric class name
CUTLASS_DTYPES: dict[DType, str] = {
    DType.f32: "Float32", DType.tf32: "TFloat32", DType.f16: "Float16", DType.bf16: "BFloat16",
    DType.fp8_e4m3: "Float8E4M3FN", DType.fp8_e5m2: "Float8E5M2", DType.int8: "Int8", DType.int32: "Int32",
}


def _align(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def mma_warpgroups(spec: GemmSpec) -> int:
    """Consumer warpgroups: the spec's `cute.mma_warpgroups`, else two for tiles wider than 64x128
    (one warpgroup would hold more than 128 accumulator registers per thread)."""
    if spec.cute.mma_warpgroups is not None:
        return spec.cute.mma_warpgroups
    return 2 if spec.tile.m > 64 and spec.tile.n > 128 else 1


def epilogue_tile(spec: GemmSpec) -> tuple[int, int]:
    """The SMEM subtile one TMA store writes: 128 x 32 when two warpgroups share the tile (each owns
    64 of its rows), else 64 x 32 (64 x 64 for 8-bit outputs, whose rows would be 32 bytes)."""
    t = spec.tile
    if mma_warpgroups(spec) == 2:
        return min(128, t.m), min(32, t.n)
    return min(64, t.m), min(64 if spec.out.dtype.bytes == 1 else 32, t.n)


def epilogue_stages(spec: GemmSpec) -> int:
    s = spec.pipeline.epilogue_stages
    return DEFAULT_EPILOGUE_STAGES if s == "auto" else s


@dataclass(frozen=True)
class CuteArg:
    """A tensor (or scalar) the launcher takes, with what the guards check and the kernel reads."""

    name: str
    role: str  # a, b, out, vec_m, vec_n, matrix, scalar
    dtype: DType
    torch_dtype: str
    cutlass_dtype: str
    doc: str


def _arg(name: str, role: str, dtype: DType, doc: str) -> CuteArg:
    return CuteArg(name, role, dtype, dtype.info.torch, CUTLASS_DTYPES[dtype], doc)


@dataclass(frozen=True)
class CuteSm90Plan:
    """Every number the sm90 template renders, named."""

    name: str
    spec_file: str
    spec_hash: str
    specgen_version: str
    description: str
    arch: str
    arch_flag: str
    a: CuteArg
    b: CuteArg
    out: CuteArg
    args: list[CuteArg]  # epilogue runtime arguments, in chain order
    a_major: str
    b_major: str
    acc_dtype: str  # cutlass name
    batch: bool
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    mma_warpgroups: int
    threads: int
    load_registers: int
    mma_registers: int
    ab_stages: int
    epi_m: int
    epi_n: int
    epi_stages: int
    group_m: int
    group_rows: bool  # groups of group_m tile rows (spec raster along_m), else of columns
    persistent: bool
    smem_bytes: int
    smem_breakdown: str
    barrier_bytes: int
    a_stage_bytes: int
    b_stage_bytes: int
    epi_bytes: int
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object]


class CuteSm90GemmDesign:
    """GEMM on Hopper through the CuTe DSL (see the module docstring)."""

    kind = "gemm"
    backend = Backend.cute
    arch = ARCH
    template = "cute/gemm_sm90.py.jinja"
    compile_hook = "specgen.compile_cute:compile_module"

    def serves(self, target: Target) -> bool:
        return target.backend is Backend.cute and target.arch == ARCH

    def memory(self, spec: GemmSpec, target: Target, ab_stages: int) -> MemoryBudget:
        """The SharedStorage struct the template declares, to the byte: 2 x ab_stages mbarriers, then
        A, B and epilogue buffers, each 1024-aligned; plus the 1024 bytes of static SMEM the compiler
        puts in front of it so the dynamic base meets the struct's 1024-byte alignment (measured:
        `.nv.shared.<kernel>` in the cubin). A/B stage sizes are multiples of 1024 for every tile
        wgmma takes (64 rows x 16 bytes of K at least)."""
        t = spec.tile
        gpu = GPUS[ARCH]
        em, en = epilogue_tile(spec)
        epi = _align(epilogue_stages(spec) * em * en * spec.out.dtype.bytes)
        reserve = BASE_ALIGN_PAD + _align(2 * ab_stages * MBARRIER_BYTES)
        stage = t.m * t.k * spec.a.dtype.bytes + t.n * t.k * spec.b.dtype.bytes
        return MemoryBudget("SMEM", gpu.smem_per_block, reserve, stage, ab_stages, epi, epilogue_overlaps_ab=False)

    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        served = [t for t in targets if self.serves(t)]
        return {f"cute/{spec.name}.py": served} if served else {}

    def plan(self, loaded: LoadedSpec, target: Target, ab_stages: int) -> CuteSm90Plan:
        spec = loaded.spec
        budget = self.memory(spec, target, ab_stages)
        t = spec.tile
        wgs = mma_warpgroups(spec)
        em, en = epilogue_tile(spec)
        batch_dims = "(batch, M, K)" if spec.batch else "(M, K)"
        return CuteSm90Plan(
            name=spec.name,
            spec_file=loaded.file,
            spec_hash=loaded.spec_hash,
            specgen_version=__version__,
            description=spec.description,
            arch=ARCH,
            arch_flag=ARCH_FLAG,
            a=_arg("a", "a", spec.a.dtype, f"{batch_dims} {spec.a.dtype}, {spec.a.major}-major"),
            b=_arg("b", "b", spec.b.dtype, f"{'(batch, K, N)' if spec.batch else '(K, N)'} {spec.b.dtype}, "
                   f"{spec.b.major}-major"),
            out=_arg("out", "out", spec.out.dtype, f"{'(batch, M, N)' if spec.batch else '(M, N)'} {spec.out.dtype}, "
                     "row-major"),
            args=[_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
            a_major=spec.a.major,
            b_major=spec.b.major,
            acc_dtype=CUTLASS_DTYPES[spec.accumulator],
            batch=spec.batch,
            tile_m=t.m, tile_n=t.n, tile_k=t.k,
            cluster_m=spec.cluster.m, cluster_n=spec.cluster.n,
            mma_warpgroups=wgs,
            threads=(1 + wgs) * WARPGROUP_THREADS,
            load_registers=LOAD_REGISTERS,
            mma_registers=MMA_REGISTERS,
            ab_stages=ab_stages,
            epi_m=em, epi_n=en, epi_stages=epilogue_stages(spec),
            group_m=spec.schedule.group_m,
            group_rows=spec.schedule.raster == "along_m",
            persistent=spec.schedule.persistent,
            smem_bytes=budget.total,
            smem_breakdown=budget.breakdown(),
            barrier_bytes=budget.reserve - BASE_ALIGN_PAD,
            a_stage_bytes=t.m * t.k * spec.a.dtype.bytes,
            b_stage_bytes=t.n * t.k * spec.b.dtype.bytes,
            epi_bytes=budget.epilogue_bytes,
            epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
            spec_json=spec.model_dump(mode="json"),
        )

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, object] | None = None) -> dict[str, str]:
        """{rel_path: text}. `resolved` maps str(target) to the resolved values (today check's
        RuleContext: `ab_stages`); computed here when not given."""
        from specgen.check import rule_context
        from specgen.render.env import environment

        out: dict[str, str] = {}
        for rel, served in self.modules(loaded.spec, targets).items():
            (target,) = served  # one arch per module
            ctx = (resolved or {}).get(str(target)) or rule_context(loaded.spec, target)
            plan = self.plan(loaded, target, ctx.ab_stages)  # type: ignore[attr-defined]
            out[rel] = environment().get_template(self.template).render(**render_context(plan))
        return out


def render_context(p: CuteSm90Plan) -> dict[str, object]:
    """The plan plus names the templates spell: argument order, the custom op's schema, and the
    cutlass spelling of each dtype (for the epilogue's cast op)."""
    args = [p.a, p.b, *p.args]
    return {
        "p": p,
        "names": [a.name for a in args],
        "op_schema": [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in args],
        "dtypes": {d.value: name for d, name in CUTLASS_DTYPES.items()},
    }


DESIGN = CuteSm90GemmDesign()


def render_cute_module(loaded: LoadedSpec, targets: list[Target]) -> str:
    """today's catalogue hook (RENDERERS): the one module of the spec's sm90 target."""
    (text,) = DESIGN.render(loaded, targets).values()
    return text
