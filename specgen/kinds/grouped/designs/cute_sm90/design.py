"""The grouped GEMM in the CuTe DSL for Hopper (sm90, wgmma): ragged M, out[rows of g] = epilogue(A[rows of g] @ B[g]),
and ragged K (the weight gradient), out[g] = epilogue(A[:, K of g] @ B[K of g]) (templates/grouped/cute/
ragged_k_sm90.jinja says how: a work item per (group, M tile, N tile), TMA boxes from each group's first K row, the
last partial K tile zeroed in SMEM past the group's rows before wgmma reads it, out[g]'s subtiles stored by TMA).

The kernel (templates/grouped/cute/grouped_sm90.py.jinja) is the dense sm90 design's warp-specialized pipeline
(kinds/gemm/designs/cute_sm90/design.py; its SMEM stage layouts, tiled wgmma, register -> SMEM epilogue copy and
epilogue op macros are imported from templates/gemm/cute/, not copied) under a grouped schedule:

- Persistent: min(#SMs, bound) CTAs, the bound a tile count from shapes alone, (cdiv(M, tile.m) + G + 1) x
  cdiv(N, tile.n) (each group and the rows past the last one add at most one partial row tile). Every role of a
  CTA (the producer warp, the consumer warpgroups) walks the same work indices bid, bid + grid, ... with a cursor
  over the groups (group, its rows, the tiles before it) read from the group index on the device: no host sync,
  so a CUDA graph replays with new group sizes. Inside a group the M tiles of one N tile come side by side (an
  expert's weight tile read from DRAM once for all its row tiles), as in the grouped Triton design.
- Loads by TMA: one descriptor over all of A's rows (a tile that runs past its group's end reads the next
  group's rows, which its store drops; past M, TMA reads zeros), the tile placed at its group's first row by a
  coordinate offset (`cute.domain_offset`), B one 3-D descriptor over (N, K, G), the group as its coordinate.
- Stores: the accumulator goes through the fused epilogue into SMEM subtiles (stmatrix, the dense design's
  copy), once for every subtile; then only the store differs. A subtile whose rows all lie in its group (or reach
  M: the tail's, and the last group's where it ends at M) goes out by TMA as the dense kernel's do (its store
  pipeline, asynchronous: a tile's stores drain under the next work item's mainloop), through one descriptor over
  out (M, N) placed at the group's row by a coordinate offset, whose bounds clip the rows past M and the columns
  past N. A subtile its group's end cuts (the group's last, at most one per N tile and group) is stored by every
  tile thread in 16-byte vectors predicated on the group's last row and on N: a box would clip only at M and
  write the next group's rows, racing the CTA that owns them (per-group descriptors rewritten on the device
  would need a global workspace and a descriptor fence per group change). That branch commits an empty bulk group
  where the other commits its store, so both keep one count of the SMEM buffers (a buffer written again only once
  the store epi_stages - 1 subtiles back has read it). Ragged K's out (G, M, N) is dense (every out[g] written
  whole), so there every subtile goes out by TMA, through one descriptor over out's (M, N, G) view. SMEM is
  unchanged by the TMA stores: they read the epilogue subtiles the struct already holds (epi_stages of them,
  counted in `memory`), and the store pipeline's bulk groups hold no barrier.
- Rows past the last group: `groups.tail = "zero"` walks them as one more group whose tiles skip the mainloop
  and store zeros; "untouched" never visits them.

SMEM: the dense design's struct (mbarriers, A and B stages, the epilogue subtiles, each 1024-aligned), so
`memory` is the dense design's, to the byte.

Size-selected variants (decode: a 64-row tile on one warpgroup) are rows of the module's `VARIANT_CONFIGS`, each
compiled on its own; the launcher picks one by M, every group's rows (a shape: no sync), N and K.

A gated epilogue (B (G, K, 2N), K-major; out = act(gate) * up, then the rest of the chain): B is viewed as (N, K,
2, G), the third mode picking gate or up columns (halves: stride N columns; interleaved: stride one column, N
strided by two), so one TMA descriptor loads a gate and an up tile of tile.n columns each per stage (TMA zero-fills
past N for both), into two SMEM buffers; the consumers keep two accumulators of the same layout, so the epilogue
combines them element by element before the stmatrix copy. A stage holds A and both B tiles (`memory`), a thread
both accumulators (REG001).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from specgen.abi import Arg
from specgen.design import ModuleHeader, compiles_as, module_identity, plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.design import WARPGROUP_THREADS, epilogue_stages
from specgen.kinds.gemm.designs.cute_sm90.design import (
    CUTLASS_DTYPES,
    GATHERED_PER_ROW_OR_COLUMN,
    LOAD_REGISTERS,
    MMA_REGISTERS,
    CuteSm90Gemm,
    RegisterEstimate,
    arch_flag,
    cute_arg,
    epilogue_tile,
    mma_warpgroups,
    register_estimate,
    serves,
)
from specgen.kinds.gemm.designs.cute_sm90.gated import refuse_unrendered
from specgen.kinds.grouped import KIND
from specgen.kinds.grouped.design import GroupedDesign
from specgen.kinds.grouped.designs.cute_sm90 import training as trn
from specgen.kinds.grouped.entry import INDEX_ARGS, GroupedHostOperands, grouped_environment
from specgen.kinds.grouped.epilogue import GROUP_N
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.render.env import describe_op
from specgen.render.specs import spec_import
from specgen.resolved import Resolved, TmaBox
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import Backend, TargetInfo

STORE_BYTES = 16  # one predicated vector store of the epilogue: 16 bytes of a subtile's row


def group_registers(spec: GroupedSpec) -> RegisterEstimate:
    """REG001's estimate: the dense design's model (its accumulator, base and epilogue terms) with each per-group
    (G, N) operand counted as the per-column vector it is inside a tile (gathered at its subtile: epi_n / 4
    distinct columns a thread)."""
    est = register_estimate(spec)  # type: ignore[arg-type]  # a gated epilogue's up accumulator counted there
    per_group = sum(1 for a in spec.runtime_args() if a.shape == GROUP_N)
    extra = per_group * (epilogue_tile(spec)[1] // 4) * GATHERED_PER_ROW_OR_COLUMN  # type: ignore[arg-type]
    return dataclasses.replace(est, operands=est.operands + extra)


class GroupedConfig(NamedTuple):
    """The numbers of one compiled config (the module's `Config`): the default's, or a size-selected variant's
    with its index and bounds (`when`: the launcher compares them with M, every group's rows, N and K)."""

    tile_m: int
    tile_n: int
    tile_k: int
    ab_stages: int
    epi_m: int
    epi_n: int
    epi_stages: int
    mma_warpgroups: int
    store_vector: int  # elements a thread stores at once (16 bytes): the predicated stores of a subtile a group's end cuts
    smem_bytes: int
    smem_breakdown: str = ""
    acc_registers: int = 0
    index: int | None = None  # which variant (None: the default)
    when: str = ""
    bounds: tuple[tuple[str, int], ...] = ()


def grouped_config(r: Resolved) -> GroupedConfig:
    """The config a resolved (spec, target[, variant]) compiles to: each checked by every rule on its own."""
    spec: GroupedSpec = r.spec
    em, en = epilogue_tile(spec)  # type: ignore[arg-type]
    return GroupedConfig(spec.tile.m, spec.tile.n, spec.tile.k, r.ab_stages, em, en, epilogue_stages(spec),  # type: ignore[arg-type]
                         mma_warpgroups(spec), STORE_BYTES // spec.out.dtype.bytes, r.budget.total,  # type: ignore[arg-type]
                         r.budget.breakdown(), r.acc_registers, r.variant, str(r.when) if r.when is not None else "",
                         tuple(r.when.bounds().items()) if r.when is not None else ())


@dataclass(frozen=True, kw_only=True)
class GroupedCutePlan(GroupedHostOperands, ModuleHeader):
    """Every number and name the grouped sm90 template renders."""

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
    config: GroupedConfig
    variants: list[GroupedConfig]  # size-selected, in the launcher's order
    smem_breakdown: str
    acc_registers: int
    load_registers: int
    mma_registers: int
    epilogue: list[dict[str, object]]
    descriptions: list[str]  # each epilogue op as the docstring and the kernel's comments say it
    spec_json: dict[str, object]
    ragged_k: bool = False
    # ragged K: each group's K tiles start at a multiple of this many K rows (16 bytes of a K-major operand; 1 where
    # A and B are both M- / N-major): a TMA box of a K-major operand starting mid-16 bytes is an illegal instruction
    k_align: int = 1
    gated: bool = False  # a gated epilogue: B (G, K, 2N), gate and up tiles, N outputs
    gated_layout: str = ""  # where its gate and up columns sit: "halves" or "interleaved"
    batch: bool = False  # the dense views' switch (templates/gemm/cute/views.jinja)
    tma: bool = True  # A and B load by TMA: the host guards want 16-byte strides
    aligned_out: bool = True  # the TMA stores (and ragged M's 16-byte vector stores) want 16-byte strides and rows of out
    training: object | None = None  # a `training` backward (training.py: GroupedCuteTrainingPlan)

    @property
    def any_pingpong(self) -> bool:
        return False


@compiles_as(CuteSm90Gemm)  # the module carries what the dense design's compile hook reads
class CuteSm90Grouped(GroupedDesign):
    """The grouped GEMM on Hopper through the CuTe DSL (see the module docstring)."""

    name = "CuTe sm90 grouped"
    keys = ((KIND, Backend.cute, "wgmma"),)
    template = "cute/grouped_sm90.py.jinja"
    shared_config = (("tile",), ("schedule",), ("groups",), ("epilogue",))
    # The struct is the dense kernel's (mbarriers, A/B stages, epilogue subtiles; no ping-pong set, no split-K
    # partials: GRP302 and GRP002 refuse them), so its byte count is too.
    memory_of = CuteSm90Gemm.memory
    # Size-selected variants (decode's few rows an expert): each its own compiled kernel, the launcher picking one
    # by M (every group's rows: a's row count, known on the host, so no sync and a graph replays), N and K.
    # Every config field is the variant's own (the kernel reads them all from its `Config` at trace time); the
    # semantics (groups, epilogue) are the kernel's, which a variant cannot change.
    renders_variants = True
    # a gated epilogue: B (G, K, 2N), K-major, its gate and up tiles loaded through one (N, K, 2, G) view (EPI001
    # elsewhere; EPI003 its limits)
    renders_gated = True
    # a `training` backward (training.py in this package: the companions' GEMMs are this kernel rendered again from
    # their plans, beside a columns pass and autograd); plain and gated chains of 16-bit operands
    renders_training = True
    # a gated op's backward too (pre and G of B's 2N columns in the forward's layout; session 28, issue 38)
    renders_gated_training = True
    # and an fp8 forward's (rowwise scales first; session 32: dgrad and wgrad over 16-bit copies of A and B). The
    # grouped kind refuses every other chain at load, so TRN001's chain branch has nothing left to refuse here;
    # `training_refusal` refuses the other dtypes
    renders_chain_training = True

    def training_refusal(self, spec: GroupedSpec, target: TargetInfo | None = None) -> str:
        return trn.training_refusal(spec)

    def serves(self, info: TargetInfo) -> bool:
        return serves(info)

    def accumulator_threads(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return WARPGROUP_THREADS * mma_warpgroups(spec)  # type: ignore[arg-type]

    def has_register_model(self, target: TargetInfo) -> bool:
        return True

    def memory(self, spec: GroupedSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        """The dense struct's (with a gated epilogue a stage also holds the up tile: the dense `memory` counts it)."""
        return self.memory_of(spec, target, ab_stages)  # type: ignore[arg-type]

    def tma_boxes(self, spec: GroupedSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """The dense design's boxes: A and B (a gated B: a gate and an up box of tile.n columns each) and out's
        epilogue subtile, which both groupings store by TMA (ragged M where the subtile's rows are its group's)."""
        return CuteSm90Gemm.tma_boxes(self, spec, target)  # type: ignore[arg-type]

    def modules(self, spec: GroupedSpec, targets: list[Target]) -> dict[str, list[Target]]:
        served = [t for t in targets if serves(t)]
        return {f"{Backend.cute.value}/{spec.name}.py": served} if served else {}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> GroupedCutePlan:
        (target,) = targets  # one arch a module
        return plan_grouped(loaded, resolved[str(target)])

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        out = {}
        for rel, served in self.modules(loaded.spec, targets).items():
            p = self.plan(loaded, served, resolved)
            schema = _op_schema(p)[:-1]
            out[rel] = grouped_environment().get_template(self.template).render(
                p=p, metadata=metadata(p), spec_import=spec_import(rel, p.name) if shared_spec else "",
                dtypes={d.value: n for d, n in CUTLASS_DTYPES.items()}, op_schema=_op_schema(p), train_schema=schema,
                # the backward op's arguments (the grouped Triton design's): the output's gradient, the forward's, the
                # saved pre (None: not saved), and which gradients autograd needs (the index has none)
                backward_schema=[["grad", "Tensor"], *schema, ["pre", "Tensor?"],
                                 *([f"need_{a.name}", "bool"] for a in (p.a, p.b, *p.args))])
        return out


def plan_grouped(loaded: LoadedSpec, r: Resolved) -> GroupedCutePlan:
    spec: GroupedSpec = r.spec
    # check refuses these (GRP001, GRP301, GRP302, EPI003); a render that skipped check must not emit a wrong kernel
    ragged_k = spec.groups.ragged == "k"
    if spec.a.major != "k" and not ragged_k:
        raise ValueError(f"{spec.name}: the grouped CuTe sm90 kernel's ragged M wants a K-major A (GRP001)")
    refuse_unrendered(spec, False)  # a gated epilogue's limits (EPI003)
    gated = gated_op(spec.epilogue)
    index_name, index_doc = INDEX_ARGS[spec.groups.index]
    config, variants = grouped_config(r), [grouped_config(v) for v in r.variants]
    b_doc = (f"(G, K, 2N) {spec.b.dtype}, K-major: one weight per group, "
             + ("gate columns [0, N), up columns [N, 2N)" if gated.layout == "halves" else "column 2j gate j, 2j + 1 up j")
             if gated is not None else f"(G, K, N) {spec.b.dtype}, {spec.b.major}-major: one weight per group")
    a_doc = f"(M, K) {spec.a.dtype}, K-major: the rows of every group, group by group"
    out_doc = f"(M, N) {spec.out.dtype}, row-major"
    if ragged_k:  # the weight gradient: groups along K (ragged_k_sm90.jinja)
        a_doc = f"(M, K) {spec.a.dtype}, {spec.a.major}-major: columns [start_g, end_g) are group g's K (x.T of a (K, M) x)"
        b_doc = f"(K, N) {spec.b.dtype}, {spec.b.major}-major: rows [start_g, end_g) are group g's K (the output gradient)"
        out_doc = f"(G, M, N) {spec.out.dtype}, row-major: out[g] group g's product, every one written"
    epilogue = []
    for op in spec.epilogue:
        data = op.model_dump(mode="json")
        if data["op"] == "bias":
            data["along"] = "n"  # the dense macro's comment: a group's row of N values
        epilogue.append(data)
    return GroupedCutePlan(
        **plan_header(loaded),
        arch=r.info.arch, arch_flag=arch_flag(r.info), compute_capability=r.info.compute_capability or 0,
        a=cute_arg("a", "a", spec.a.dtype, a_doc),
        b=cute_arg("b", "b", spec.b.dtype, b_doc),
        index=cute_arg(index_name, "index", DType.int32, f"(G,) int32 on the device, {index_doc}"),
        index_kind=spec.groups.index,
        out=cute_arg("out", "out", spec.out.dtype, out_doc),
        args=[cute_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        a_major=spec.a.major, b_major=spec.b.major, acc_dtype=CUTLASS_DTYPES[spec.accumulator],
        tail_zero=spec.groups.tail == "zero", config=config, variants=variants, smem_breakdown=r.budget.breakdown(),
        acc_registers=r.acc_registers, load_registers=LOAD_REGISTERS, mma_registers=MMA_REGISTERS,
        epilogue=epilogue, descriptions=[describe(op) for op in epilogue], spec_json=loaded.spec.model_dump(mode="json"),
        gated=gated is not None, gated_layout=gated.layout if gated is not None else "", ragged_k=ragged_k,
        k_align=max((16 // op.dtype.bytes for op in (spec.a, spec.b) if ragged_k and op.major == "k"), default=1),
        training=trn.plan_training(spec, r, lambda c: plan_grouped(loaded, c),
                                   lambda s, info, stages: DESIGN.memory(s, info, stages)),
    )


def describe(op: dict) -> str:
    """An epilogue op as the module's docstring lists it (a per-group operand says so)."""
    if op["op"] == "bias":
        return f"bias: + {op['name']}[g] (G, N) {op['dtype']}, per group and column"
    if op["op"] == "scale" and op["by"] == "col":
        return f"scale: * {op['name'] or 'col_scale'}[g, n] (G, N) f32, per group and column"
    if op["op"] == "scale" and op["by"] == "rowcol":
        return "scale: * scale_a[m] * scale_b[g, n], per row and per group and column (rowwise fp8 scales)"
    return describe_op(op)


def _op_schema(p: GroupedCutePlan) -> list[list[str]]:
    schema = [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, p.index, *p.args)]
    return [*schema, ["out", "Tensor?"]]


def host_parameters(p: GroupedCutePlan) -> list[list[str]]:
    """The compiled host function's parameters, (name, kind) in call order (METADATA's `parameters`)."""
    return [[a.name, "float" if a.role == "scalar" else f"tensor<{a.cutlass_dtype}>"]
            for a in (p.a, p.b, p.index, *p.args, p.out)] + [["max_ctas", "i32"], ["variant", "constexpr"],
                                                               ["stream", "stream"]]


def metadata(p: GroupedCutePlan) -> dict[str, object]:
    """The module's one metadata dict: the keys the dense CuTe compile hook reads (`plan` by compute capability,
    its SMEM and each variant's)."""
    c = p.config
    return module_identity(p.name, p.spec_file, p.spec_hash, p.specgen_version, [f"cute:{p.arch}"]) | {
        "kind": KIND,
        "groups": {"index": p.index_kind, "tail": "zero" if p.tail_zero else "untouched"} | ({"ragged": "k"} if p.ragged_k else {}),
        "plan": {p.compute_capability: {"ab_stages": c.ab_stages, "smem_bytes": c.smem_bytes,
                                        "smem_breakdown": p.smem_breakdown, "acc_registers": p.acc_registers,
                                        "mma_warpgroups": c.mma_warpgroups, "arch_flag": p.arch_flag,
                                        "variants": [variant_metadata(v) for v in p.variants]}
                                    | ({"training": trn.training_metadata(p.training)} if p.training else {})},
        "parameters": host_parameters(p),
    }


def variant_metadata(c: GroupedConfig) -> dict[str, object]:
    """A variant as METADATA lists it (the dense CuTe design's keys: its bounds, tile, stages, SMEM, warpgroups)."""
    return {"when": dict(c.bounds), "tile": [c.tile_m, c.tile_n, c.tile_k], "cluster": [1, 1],
            "ab_stages": c.ab_stages, "smem_bytes": c.smem_bytes, "mma_warpgroups": c.mma_warpgroups, "pingpong": False}


DESIGN = CuteSm90Grouped()
