"""The grouped Pallas Mosaic GPU design (`pallas:gpu_sm90`): its SMEM layout, its module, the plan and the render
(templates/grouped/pallas/grouped_mgpu.py.jinja).

The kernel is the dense Mosaic GPU kernel's (kinds/gemm/designs/pallas, JAX's warp-specialized Hopper matmul: a
persistent grid of one CTA per SM, a memory warpgroup feeding a TMA pipeline into swizzled SMEM, two consumer
warpgroups each issuing wgmma on half the tile's N into an f32 accumulator) walking grouped tile visits instead of a
dense tile grid: each visit tile.m rows of one group from its first row rounded down to 8 (a TMA box starts on
Mosaic GPU's 8-row GMEM tiles), so no tile is computed for two groups (the TPU design's row tiles are, once per group
sharing them: DeepSeek-V3 up with skewed sizes, 56 visits there, 47 here), a static bound of cdiv(M + 7 (G - 1),
tile.m) + G - 1 of them times the N tiles, each visit's group and first row computed on the device from the group
sizes (specgen/runtime/grouped_jax.py `group_row_starts`) and read by the kernel from GMEM. A group's last visit
past the last whole row tile loads the row tile ending there (the same rows: per-row vectors stay padded to whole
row tiles). A visit past the groups skips its K loop (with `groups.tail = "zero"` the rows past the last group are
walked as one more segment whose visits store zeros instead). The forward's last partial wave splits along K
(the Triton design's split; templates/grouped/pallas/mgpu_m.jinja `split`): R = T mod P tiles as R x S parts when
that fits the grid, run in a loop of their own after the whole tiles' (in one loop their code cost every tile
2-8%), partials in an f32 output, one GMEM semaphore per CTA and consumer warpgroup, no SMEM.

Stores: the epilogue stages each 64-row subtile in SMEM unswizzled and stores only its group's rows by TMA, as a
ladder of power-of-two row boxes (64, 32, ..., 1 rows, each predicated on the bit of the row count: JAX's
`pallas/ops/gpu/ragged_dot_mgpu.py` does the same) where a group boundary cuts the subtile, one 64-row box where
it does not (the ladder's predicated-off boxes cost 4% at Mixtral up, session 31). A TMA box's shape is static and it clips only at the array's
edge, not at a group's end, so one box of the tile would write the next group's rows; a descriptor per group
needs the group ends on the host (a sync) or built on the device, which Pallas does not expose.

Size-selected variants (`renders_variants`): a `Config` row each, the jitted call picking the first whose bounds
hold by the total rows M (and N, K) at trace time, as the dense Mosaic GPU module does; each variant is resolved
and checked on its own. `<name>_torch` launches the compiled kernel directly on torch's current stream at shapes
TMA takes unpadded (runtime/mgpu_torch.py, the dense module's path), the group metadata computed by one Triton
kernel (runtime/grouped_metadata.py), so a CUDA graph captures it; other calls go through DLPack and the jitted program.

A gated epilogue (SwiGLU, GeGLU-tanh; `renders_gated`): B (G, K, 2N) as stored is reshaped, without a copy, to a
view with a gate / up axis ((G, 2, N, K) halves, (G, N, 2, K) interleaved, K-major; (G, K, 2, N) halves, N-major),
and each K step loads a gate and an up tile through it, two inputs of the pipeline; each consumer warpgroup keeps a
gate and an up accumulator and the epilogue forms fn(gate) * up before the rest of the chain. MGP003 refuses an
interleaved N-major B (no TMA view holds its gate columns) and fp8 operands with it; PAL009 the erf GELU.

Ragged K (`groups.ragged = "k"`, the weight gradient; templates/grouped/pallas/grouped_mgpu_k.py.jinja): the same
pipeline over (group, M tile, N tile) work, each tile's K loop the K tiles its group touches (a dynamic grid, from
the offsets on the device), loaded by TMA at whole-tile coordinates (the tiled GMEM view starts a box on a tile
boundary only), the rows of another group in a shared edge tile zeroed in SMEM by the consumers before their wgmma
(MGP001: a masked tile's rows in 64s); out (G, M, N) stored by whole subtile boxes.

Training (a ragged-M spec's `training`; training.py, templates/grouped/pallas/backward_mgpu.jinja): a jax.custom_vjp
on the JAX entry whose backward GEMMs are copies of the two kernels above (mgpu_m.jinja, mgpu_k.jinja: macros with a
name prefix) at each companion's checked config; f16 / bf16, a gated op's too (pre and G over B's 2N columns in the
forward's layout), and an fp8 forward's (session 29: in the output's dtype, w.r.t. the dequantized operands, the 8-bit
A and B converted by a jnp astype before dgrad and wgrad); under jax.shard_map in both check_vma modes (`_rt.vary`
casts).

SMEM (`memory`): the dense Mosaic GPU figure (A/B stages, their full/empty barriers, two warpgroups' output
slots, each buffer padded to whole KiB; a gated epilogue's up B buffer beside the gate's), which the unswizzled
staging slots take unchanged; lowering for CUDA allocates exactly it (tests/backends/pallas/test_grouped_mgpu.py).
Imports jax-free code only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from specgen.abi import Arg, make_arg
from specgen.design import ModuleHeader, plan_header
from specgen.kinds.gemm.designs.pallas.design import (
    DESIGN as DENSE,
)
from specgen.kinds.gemm.designs.pallas.design import (
    JNP_DTYPES,
    MGPU_CONSUMER_WGS,
    MGPU_MEMORY_REGISTERS,
    MGPU_PACKAGE_INIT,
    TMA_MIN_BYTES,
    MgpuConfig,
    PallasGemmDesign,
    mgpu_config,
)
from specgen.kinds.grouped import KIND
from specgen.kinds.grouped.design import GroupedDesign
from specgen.kinds.grouped.designs.pallas.design import describe
from specgen.kinds.grouped.designs.pallas_mgpu.training import (
    plan_mgpu_training,
    training_metadata,
    training_refusal,
)
from specgen.kinds.grouped.entry import INDEX_ARGS, GroupedHostOperands, grouped_environment
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.runtime import RUNTIME_ABI
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.targets import Backend, TargetInfo, target_info

if TYPE_CHECKING:
    from specgen.envelope.budget import MemoryBudget
    from specgen.resolved import Resolved, TmaBox
    from specgen.spec.load import LoadedSpec
    from specgen.spec.models import Target

# The store ladder's smallest box starts on any row of a staging slot: TMA reads shared memory from a 128-byte
# aligned address (PTX ISA, cp.async.bulk.tensor), so a slot's row must span a multiple of 128 bytes (MGP002).
SMEM_ROW_ALIGN = 128


class PallasMgpuGrouped(GroupedDesign):
    """kind "grouped", backend pallas, wgmma: the Mosaic GPU kernel. See the module docstring."""

    name = "Pallas Mosaic GPU grouped"
    keys = ((KIND, Backend.pallas, "wgmma"),)
    compiler_modules = ("jax",)
    libraries = ("jax", "jaxlib")
    extra = "pallas"
    max_auto_stages = DENSE.max_auto_stages
    # Lowering for CUDA on a CPU machine (the kernel body, layout inference, SMEM allocation)
    compile_hook = "specgen.kinds.grouped.designs.pallas_mgpu.compile:compile_module"
    shared_config = (("tile",), ("pipeline", "ab_stages"), ("schedule",), ("groups",), ("epilogue",))
    # Size-selected variants (decode's few rows an expert): a Config row each, the jitted call picking one by the
    # total rows M (and N, K) at trace time, as the dense Mosaic GPU module does; each is resolved and checked on
    # its own (stages, SMEM, TMA boxes, MGP002), so a variant may change any config key the kernel reads.
    renders_variants = True
    # `<name>_torch`, waited for (the direct launch runs on torch's stream, the DLPack path on jax's): the dense
    # Mosaic GPU design's, what bench times
    torch_entry = PallasGemmDesign.torch_entry
    # A gated epilogue (SwiGLU, GeGLU): B (G, K, 2N) viewed with a gate / up axis, a gate and an up tile a K step as
    # two pipeline inputs, two wgmma accumulators a consumer warpgroup (MGP003 refuses an interleaved N-major B, whose
    # gate columns are no TMA view; fp8; PAL009 the erf GELU)
    renders_gated = True
    # A ragged-M spec's `training` backward (training.py: a jax.custom_vjp on the JAX entry; the torch entry's op runs
    # jax.vjp of it: runtime/jax_torch.py): f16 / bf16, the legacy chains and a gated op's (pre and G over B's 2N columns, the forward's layout),
    # and an fp8 forward's (rowwise scales first; session 29). The grouped kind refuses every other chain at load, so
    # TRN001's chain branch has nothing left to refuse here (`renders_chain_training`, as the Pallas TPU design's)
    renders_training = True
    renders_gated_training = True
    renders_chain_training = True

    def training_refusal(self, spec: GroupedSpec, target: TargetInfo | None = None) -> str:
        return training_refusal(spec)

    def accumulator_threads(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return MGPU_CONSUMER_WGS * 128  # two consumer warpgroups split tile.n

    def has_register_model(self, target: TargetInfo) -> bool:
        return True

    def memory(self, spec: GroupedSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        """The dense Mosaic GPU kernel's SMEM: the same A/B stages, barriers and output slots (no residual)."""
        return DENSE.memory(spec, target, ab_stages)  # type: ignore[arg-type]

    def tma_boxes(self, spec: GroupedSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """A's and B's tiles in TMA's tiled view (the dense kernel's), and the largest store box, one subtile of
        out, unswizzled."""
        # a gated B moves as a gate and an up box of tile.n columns each, whatever its layout (the strided view)
        plain = spec.model_copy(update={"epilogue": []}) if gated_op(spec.epilogue) is not None else spec
        a, b, out = DENSE.tma_boxes(plain, target)  # type: ignore[arg-type]
        from specgen.resolved import TmaBox

        return (a, b, TmaBox(out.operand, out.outer, out.inner, out.elem_bytes, out.field))

    def modules(self, spec: GroupedSpec, targets: list[Target]) -> dict[str, list[Target]]:
        """`pallas/gpu_sm90/<name>.py`, the dense Mosaic GPU modules' package (no kernel name collides there)."""
        return {f"{Backend.pallas.value}/{t.arch}/{spec.name}.py": [t] for t in targets}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> GroupedMgpuPlan:
        (target,) = targets
        return plan_mgpu(loaded, target, resolved[str(target)])

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        from specgen.render.specs import spec_import

        out: dict[str, str] = {}
        for rel, (target,) in self.modules(loaded.spec, targets).items():
            p = plan_mgpu(loaded, target, resolved[str(target)])
            template = "pallas/grouped_mgpu_k.py.jinja" if p.ragged_k else "pallas/grouped_mgpu.py.jinja"
            out[rel] = grouped_environment().get_template(template).render(
                mgpu_context(p), spec_import=spec_import(rel, p.name) if shared_spec else None)
            out[f"{rel.rsplit('/', 1)[0]}/__init__.py"] = MGPU_PACKAGE_INIT.format(arch=target.arch)
        return out

    def tune_space(self, spec: GroupedSpec, target: TargetInfo, when: object = None) -> dict[str, tuple[object, ...]]:
        """wgmma rows of 64 or 128, warpgroup halves of 64 or 128 columns, K one or two swizzle rows, depths."""
        return {"tile.m": (64, 128), "tile.n": (128, 256), "tile.k": (64, 128), "pipeline.ab_stages": (2, 3, 4, 6)}


@dataclass(frozen=True, kw_only=True)
class GroupedMgpuPlan(GroupedHostOperands, ModuleHeader):
    """Every number and name templates/grouped/pallas/grouped_mgpu.py.jinja renders."""

    targets: list[str]
    a: Arg
    b: Arg
    index: Arg  # the group index (offs or group_sizes)
    index_kind: str
    out: Arg
    args: list[Arg]  # the epilogue's runtime arguments, in chain order
    a_major: str
    b_major: str
    tail_zero: bool
    ragged_k: bool = False  # groups along K (the weight gradient): templates/grouped/pallas/grouped_mgpu_k.py.jinja
    gated: bool = False  # a gated epilogue: B (G, K, 2N), a gate and an up tile a step, N outputs
    gated_layout: str = ""  # where its gate and up columns sit: "halves" or "interleaved"
    warpgroups: int
    a_min: int  # elements in 16 bytes: a TMA'd array's contiguous extent is a multiple of this
    b_min: int
    out_min: int
    memory_registers: int
    num_sms: int  # the grid's size where no device says (lowering on a CPU machine)
    config: MgpuConfig  # the dense kernel's config row: tile, stages, warpgroup split, subtiles, swizzles, SMEM
    variants: list[MgpuConfig]  # size-selected, in the order the jitted call tries them
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object]
    training: object | None = None  # a `training` backward (training.py: GroupedMgpuTrainingPlan), behind a custom_vjp


def _arg(name: str, role: str, dtype: DType, doc: str) -> Arg:
    return make_arg(name, role, dtype, doc, lambda d: {"jnp": JNP_DTYPES[d]})


def plan_mgpu(loaded: LoadedSpec, target: Target, ctx: Resolved) -> GroupedMgpuPlan:
    """The module's plan from what check resolved for its one target (effective spec, stages, SMEM budget); for a
    companion (a backward GEMM, `ctx.companion` set) the plan of its kernel, named as the companion."""
    spec: GroupedSpec = ctx.spec
    gpu = target_info(target).gpu
    assert gpu is not None
    index_name, index_doc = INDEX_ARGS[spec.groups.index]
    gated = gated_op(spec.epilogue)
    if gated is not None and gated.layout == "interleaved" and spec.b.major != "k":  # check refuses it (MGP003)
        raise ValueError(f"{spec.name}: the grouped Mosaic GPU kernel reads an interleaved gated B K-major (MGP003)")
    b_dims = ("(G, 2N, K)" if spec.b.major == "k" else "(G, K, 2N)") if gated is not None else (
        "(G, N, K)" if spec.b.major == "k" else "(G, K, N)")
    b_doc = (f"{b_dims} {spec.b.dtype}, stored {spec.b.major}-major: one weight per group, "
             + ("gate columns [0, N), up columns [N, 2N)" if gated.layout == "halves" else "column 2j gate j, 2j + 1 up j")
             if gated is not None else f"{b_dims} {spec.b.dtype}, stored {spec.b.major}-major: one weight per group")
    a_doc, out_doc = f"(M, K) {spec.a.dtype}, stored k-major: every group's rows, group by group", f"(M, N) {spec.out.dtype}"
    ragged_k = spec.groups.ragged == "k"
    if ragged_k:  # groups along K: A^T's and B's K rows group by group, one (M, N) product per group
        a_doc = (f"{'(M, K)' if spec.a.major == 'k' else '(K, M)'} {spec.a.dtype}, stored {spec.a.major}-major: every "
                 "group's K rows, group by group (A^T of the layer's (K, M) input)")
        b_doc = (f"{'(N, K)' if spec.b.major == 'k' else '(K, N)'} {spec.b.dtype}, stored {spec.b.major}-major: every "
                 "group's K rows, group by group")
        out_doc = f"(G, M, N) {spec.out.dtype}: one (M, N) product per group"
    return GroupedMgpuPlan(
        **(plan_header(loaded) | ({"name": spec.name} if ctx.companion else {})),
        targets=[str(target)],
        a=_arg("a", "a", spec.a.dtype, a_doc),
        b=_arg("b", "b", spec.b.dtype, b_doc),
        index=_arg(index_name, "index", DType.int32, f"(G,) int32, {index_doc}"),
        index_kind=spec.groups.index,
        out=_arg("out", "out", spec.out.dtype, out_doc),
        args=[_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        a_major=spec.a.major,
        b_major=spec.b.major,
        tail_zero=spec.groups.tail == "zero",
        ragged_k=ragged_k,
        gated=gated is not None,
        gated_layout=gated.layout if gated is not None else "",
        warpgroups=MGPU_CONSUMER_WGS,
        a_min=TMA_MIN_BYTES // spec.a.dtype.bytes,
        b_min=TMA_MIN_BYTES // spec.b.dtype.bytes,
        out_min=TMA_MIN_BYTES // spec.out.dtype.bytes,
        memory_registers=MGPU_MEMORY_REGISTERS,
        num_sms=gpu.num_sms_example,
        config=mgpu_config(ctx),
        variants=[mgpu_config(v) for v in ctx.variants],
        epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
        spec_json=loaded.spec.model_dump(mode="json"),
        training=None if ctx.companion else plan_mgpu_training(loaded, target, ctx, plan_mgpu),
    )


# The Config fields the module's table carries, as (the Config's field, MgpuConfig's): the dense kernel's less
# what this kernel does not render (clusters, swapped operands, residual barriers, the output swizzle).
CONFIG_FIELDS = tuple((f, "ab_stages" if f == "stages" else f) for f in (
    "tile_m", "tile_n", "tile_k", "stages", "wgmma_in_flight", "wg_n", "epi_m", "epi_n", "out_slots", "a_swizzle",
    "b_swizzle", "group_m", "raster_dim", "smem_bytes"))


def config_meta(c: MgpuConfig) -> dict[str, object]:
    """One config's METADATA entry: a variant's bounds (`when`, as the spec spells them), then its Config fields."""
    fields = asdict(c)
    when = {"when": {f"{dim.lower()}_max": n for dim, n in c.bounds}} if c.bounds else {}
    return when | {k: fields[attr] for k, attr in CONFIG_FIELDS} | {"smem_breakdown": c.smem_breakdown}


def metadata(p: GroupedMgpuPlan) -> dict[str, object]:
    """The module's METADATA: its identity, then its plan figures (`smem_bytes` first: `specgen compile`'s)."""
    return {"runtime_abi": RUNTIME_ABI, "kernel": p.name, "spec_file": p.spec_file, "spec_hash": p.spec_hash,
            "specgen_version": p.specgen_version, "description": p.description, "targets": p.targets, "kind": KIND,
            "groups": {"index": p.index_kind, "tail": "zero" if p.tail_zero else "untouched"} | ({"ragged": "k"} if p.ragged_k else {}),
            "a_major": p.a_major, "b_major": p.b_major, **({"gated": p.gated_layout} if p.gated else {}),
            "warpgroups": p.warpgroups,
            "memory_registers": p.memory_registers, "num_sms": p.num_sms,
            "smem_bytes": p.config.smem_bytes, "smem_breakdown": p.config.smem_breakdown,
            "config": {k: v for k, v in config_meta(p.config).items() if k != "smem_breakdown"},
            "variants": [config_meta(v) for v in p.variants]} | (
                {"training": training_metadata(p.training)} if p.training is not None else {})


def mgpu_context(p: GroupedMgpuPlan) -> dict[str, object]:
    """The template's variables: the plan, its METADATA, the Config table's fields, the epilogue's lines."""
    from specgen.spec.formulas import DERIVATIVES, FORMULAS

    return {"p": p, "plan_meta": metadata(p), "config_fields": CONFIG_FIELDS,
            "describe": [describe(op) for op in p.epilogue],
            "jnp_dtypes": {d.value: JNP_DTYPES[d] for d in DType}, "formulas": FORMULAS, "derivatives": DERIVATIVES}


DESIGN = PallasMgpuGrouped()
