"""The grouped GEMM in the CuTe DSL for Blackwell (sm100, tcgen05): ragged M, out[rows of g] = epilogue(A[rows of g] @ B[g]).

The kernel (templates/grouped/cute/grouped_sm100.py.jinja) is the dense sm100 design's warp-specialized pipeline
(kinds/gemm/designs/cute_sm100/design.py: 192 threads, warp 5 loads by TMA into `ab_stages` stages
(`PipelineTmaUmma`), warp 4 issues the tcgen05 MMAs into `acc_stages` TMEM accumulator buffers
(`PipelineUmmaAsync`), warps 0-3 read them back (tcgen05.ld) through the fused epilogue; its SMEM struct, tiled
MMA, MMA K loop, TMEM reads and register -> SMEM copy are the dense template's macros
(templates/gemm/cute/macros_sm100.jinja), its TMEM plan, epilogue subtile and memory model the dense design's, all
imported) under the grouped CuTe sm90 design's schedule
(kinds/grouped/designs/cute_sm90/design.py):

- Persistent: min(#SMs, bound) CTAs, the bound a tile count from shapes alone, (cdiv(M, tile.m) + G + 1) x
  cdiv(N, tile.n). Every role of a CTA (the TMA warp, the MMA warp, the epilogue warps) walks the same work
  indices bid, bid + grid, ... with a cursor over the groups read from the group index on the device: no host
  sync, so a CUDA graph replays with new group sizes. Inside a group the M tiles of one N tile come side by side.
- Loads by TMA: one descriptor over all of A's rows, the tile placed at its group's first row by a coordinate
  offset (`cute.domain_offset`); B one 3-D descriptor over (N, K, G), the group its coordinate.
- Stores: TMEM -> registers -> the fused epilogue -> an SMEM subtile (the dense design's copy), then the 128
  epilogue threads store 16-byte vectors of it, each predicated on the group's last row and on N. Not TMA, for the
  sm90 design's reason: a host-built descriptor cannot follow group ends that live on the device.
- Rows past the last group: `groups.tail = "zero"` walks them as one more group whose tiles skip the MMA warp
  (no accumulator stage is taken) and store zeros; "untouched" never visits them.

One CTA a tile (cta_group::1, no cluster): GRP402 refuses 2-CTA MMAs and clusters. SMEM: the dense design's struct
(mbarriers, TMEM slot, A and B stages, the epilogue subtiles, each 1024-aligned), so `memory` is the dense one, to
the byte; TMEM: the dense plan's columns.

Verification: there is no Blackwell GPU here. The kernel is verified by compiling it for sm_100a (nvidia-cutlass-dsl
on a CPU) and reading its SASS (tests/grouped/test_cute_sm100.py); no numerics and no speed are claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from specgen.abi import Arg
from specgen.design import ModuleHeader, compiles_as, module_identity, plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.design import epilogue_stages
from specgen.kinds.gemm.designs.cute_sm90.design import CUTLASS_DTYPES, arch_flag, cute_arg
from specgen.kinds.gemm.designs.cute_sm90.gated import b_columns_doc, gated_fields, refuse_unrendered
from specgen.kinds.gemm.designs.cute_sm100.design import (
    EPILOGUE_THREADS,
    THREADS,
    CuteSm100Gemm,
    epilogue_tile,
    serves,
    tmem_alloc_columns,
)
from specgen.kinds.grouped import KIND
from specgen.kinds.grouped.design import GroupedDesign
from specgen.kinds.grouped.designs.cute_sm90.design import _op_schema, describe, host_parameters
from specgen.kinds.grouped.entry import INDEX_ARGS, GroupedHostOperands, grouped_environment
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.render.specs import spec_import
from specgen.resolved import Resolved, TmaBox
from specgen.spec.dtypes import DType
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import Backend, TargetInfo

STORE_BYTES = 16  # one predicated vector store of the epilogue: 16 bytes of a subtile's row


class GroupedSm100Config(NamedTuple):
    """The numbers of one compiled config (the module's `Config`): the default's, or a size-selected variant's
    with its index and bounds (`when`: the launcher compares them with M, every group's rows, N and K)."""

    tile_m: int
    tile_n: int
    tile_k: int
    ab_stages: int
    acc_stages: int
    epi_m: int
    epi_n: int
    epi_stages: int
    store_vector: int  # elements a thread stores at once (16 bytes)
    smem_bytes: int
    tmem_columns: int  # allocated (a power of two)
    smem_breakdown: str = ""
    index: int | None = None  # which variant (None: the default)
    when: str = ""
    bounds: tuple[tuple[str, int], ...] = ()


def grouped_config(r: Resolved) -> GroupedSm100Config:
    """The config a resolved (spec, target[, variant]) compiles to: each checked by every rule on its own
    (SMEM001, TMEM001, MMA002, the CUTE10x widths)."""
    spec: GroupedSpec = r.spec
    em, en = epilogue_tile(spec)  # type: ignore[arg-type]
    return GroupedSm100Config(spec.tile.m, spec.tile.n, spec.tile.k, r.ab_stages, r.acc_stages, em, en,
                              epilogue_stages(spec), STORE_BYTES // spec.out.dtype.bytes, r.budget.total,  # type: ignore[arg-type]
                              tmem_alloc_columns(r.tmem_columns, r.acc_stages), r.budget.breakdown(), r.variant,
                              str(r.when) if r.when is not None else "",
                              tuple(r.when.bounds().items()) if r.when is not None else ())


@dataclass(frozen=True, kw_only=True)
class GroupedSm100Plan(GroupedHostOperands, ModuleHeader):
    """Every number and name the grouped sm100 template renders."""

    arch: str
    arch_flag: str
    compute_capability: int
    a: Arg
    b: Arg
    index: Arg
    index_kind: str
    out: Arg
    args: list[Arg]
    a_major: str
    b_major: str
    acc_dtype: str
    tail_zero: bool
    threads: int
    config: GroupedSm100Config
    variants: list[GroupedSm100Config]  # size-selected, in the launcher's order
    smem_breakdown: str
    epilogue: list[dict[str, object]]
    descriptions: list[str]  # each epilogue op as the docstring and the kernel's comments say it
    spec_json: dict[str, object]
    ragged_k: bool = False
    gated: bool = False  # a gated epilogue: B (G, K, 2N), a gate and an up TMEM accumulator a stage, N outputs
    gated_layout: str = ""  # where its gate and up columns sit: "halves" or "interleaved"
    tma: bool = True  # A and B load by TMA: the host guards want 16-byte strides
    aligned_out: bool = True  # the epilogue's 16-byte vector stores want 16-byte rows of out


@compiles_as(CuteSm100Gemm)  # the module carries what the dense design's compile hook reads
class CuteSm100Grouped(GroupedDesign):
    """The grouped GEMM on Blackwell through the CuTe DSL (see the module docstring)."""

    name = "CuTe sm100 grouped"
    keys = ((KIND, Backend.cute, "tcgen05"),)
    template = "cute/grouped_sm100.py.jinja"
    shared_config = (("tile",), ("schedule",), ("groups",), ("epilogue",))
    # The struct is the dense kernel's (mbarriers, TMEM slot, A/B stages, epilogue subtiles; one CTA a tile:
    # GRP402), so its byte count is too.
    # Size-selected variants (decode's few rows an expert): each its own compiled kernel, the launcher picking the
    # first whose bounds hold by M (every group's rows), N and K; every config field is the variant's own (the
    # kernel reads them all from its `Config` at trace time), the semantics (groups, epilogue) the kernel's.
    renders_variants = True
    # a gated epilogue, as the dense sm100 kernel's (B viewed (N, K, 2, G); EPI003 its limits): compile-verified only
    renders_gated = True
    memory_of = CuteSm100Gemm.memory
    tmem_columns_of = CuteSm100Gemm.tmem_columns
    acc_stages_of = CuteSm100Gemm.acc_stages

    def serves(self, info: TargetInfo) -> bool:
        return serves(info)

    def accumulator_threads(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return EPILOGUE_THREADS  # the accumulator lives in TMEM; four epilogue warps read it

    def tmem_columns(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return self.tmem_columns_of(spec, target)  # type: ignore[arg-type]

    def acc_stages(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return self.acc_stages_of(spec, target)  # type: ignore[arg-type]

    def memory(self, spec: GroupedSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        return self.memory_of(spec, target, ab_stages)  # type: ignore[arg-type]

    def tma_boxes(self, spec: GroupedSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """A's and B's boxes (the output is stored through predicated vector stores)."""
        return CuteSm100Gemm.tma_boxes(self, spec, target)[:2]  # type: ignore[arg-type]

    def modules(self, spec: GroupedSpec, targets: list[Target]) -> dict[str, list[Target]]:
        served = [t for t in targets if serves(t)]
        return {f"{Backend.cute.value}/{spec.name}_sm100.py": served} if served else {}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> GroupedSm100Plan:
        (target,) = targets  # one arch a module
        return plan_grouped(loaded, resolved[str(target)])

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        out = {}
        for rel, served in self.modules(loaded.spec, targets).items():
            p = self.plan(loaded, served, resolved)
            out[rel] = grouped_environment().get_template(self.template).render(
                p=p, metadata=metadata(p), spec_import=spec_import(rel, p.name) if shared_spec else "",
                dtypes={d.value: n for d, n in CUTLASS_DTYPES.items()}, op_schema=_op_schema(p))  # type: ignore[arg-type]
        return out


def plan_grouped(loaded: LoadedSpec, r: Resolved) -> GroupedSm100Plan:
    spec: GroupedSpec = r.spec
    # check refuses these (GRP001, GRP401, GRP402); a render that skipped check must not emit a wrong kernel
    if spec.a.major != "k" or spec.groups.ragged != "m":
        raise ValueError(f"{spec.name}: the grouped CuTe sm100 kernel is ragged M with a K-major A (GRP001, GRP401)")
    if spec.cute.two_cta or spec.cluster.m * spec.cluster.n > 1:
        raise ValueError(f"{spec.name}: the grouped CuTe sm100 kernel runs one CTA a tile, no cluster (GRP402)")
    refuse_unrendered(spec, True)  # a gated epilogue's limits (EPI003)
    index_name, index_doc = INDEX_ARGS[spec.groups.index]
    config, variants = grouped_config(r), [grouped_config(v) for v in r.variants]
    n2 = "2N" if gated_fields(spec)["gated"] else "N"
    epilogue = []
    for op in spec.epilogue:
        data = op.model_dump(mode="json")
        if data["op"] == "bias":
            data["along"] = "n"  # the dense macro's comment: a group's row of N values
        epilogue.append(data)
    return GroupedSm100Plan(
        **plan_header(loaded),
        arch=r.info.arch, arch_flag=arch_flag(r.info), compute_capability=r.info.compute_capability or 0,
        a=cute_arg("a", "a", spec.a.dtype, f"(M, K) {spec.a.dtype}, K-major: the rows of every group, group by group"),
        b=cute_arg("b", "b", spec.b.dtype, f"(G, K, {n2}) {spec.b.dtype}, {spec.b.major}-major: one weight per group"
                   + b_columns_doc(spec).replace(":", ",", 1)),
        index=cute_arg(index_name, "index", DType.int32, f"(G,) int32 on the device, {index_doc}"),
        index_kind=spec.groups.index,
        out=cute_arg("out", "out", spec.out.dtype, f"(M, N) {spec.out.dtype}, row-major"),
        args=[cute_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        a_major=spec.a.major, b_major=spec.b.major, acc_dtype=CUTLASS_DTYPES[spec.accumulator],
        tail_zero=spec.groups.tail == "zero", threads=THREADS, config=config, variants=variants,
        smem_breakdown=r.budget.breakdown(),
        epilogue=epilogue, descriptions=[describe(op) for op in epilogue], spec_json=loaded.spec.model_dump(mode="json"),
        **gated_fields(spec),  # type: ignore[arg-type]
    )


def metadata(p: GroupedSm100Plan) -> dict[str, object]:
    """The module's one metadata dict: the grouped sm90 module's keys, with the plan the dense sm100 compile hook
    reads (its SMEM and TMEM columns, and each variant's)."""
    c = p.config
    return module_identity(p.name, p.spec_file, p.spec_hash, p.specgen_version, [f"cute:{p.arch}"]) | {
        "kind": KIND,
        "groups": {"index": p.index_kind, "tail": "zero" if p.tail_zero else "untouched"},
        "plan": {p.compute_capability: {"ab_stages": c.ab_stages, "acc_stages": c.acc_stages,
                                        "smem_bytes": c.smem_bytes, "smem_breakdown": p.smem_breakdown,
                                        "tmem_columns": c.tmem_columns, "two_cta": False,
                                        "arch_flag": p.arch_flag,
                                        "variants": [variant_metadata(v) for v in p.variants]}},
        "parameters": host_parameters(p),  # type: ignore[arg-type]
    }


def variant_metadata(c: GroupedSm100Config) -> dict[str, object]:
    """A variant as METADATA lists it (the dense sm100 design's keys: its bounds, tile, stages, SMEM, TMEM)."""
    return {"when": dict(c.bounds), "tile": [c.tile_m, c.tile_n, c.tile_k], "cluster": [1, 1], "two_cta": False,
            "ab_stages": c.ab_stages, "acc_stages": c.acc_stages, "smem_bytes": c.smem_bytes,
            "tmem_columns": c.tmem_columns}


DESIGN = CuteSm100Grouped()
