"""The grouped Pallas TPU design: its VMEM layout, its module (one for every TPU target of a spec, as the dense
Pallas TPU design's), the plan and the render (templates/grouped/pallas/grouped_tpu.py.jinja).

The kernel is megablox's (jax `pallas/ops/tpu/megablox/gmm.py`): one `pl.pallas_call` over a grid of (N tiles,
tile visits, K steps), the visits a static bound, cdiv(total rows, tile.m) + G - 1 (every row tile once, plus
one more for each group boundary inside a tile), walked in group order; which group and which row tile each visit
serves is group metadata computed on the device from the group sizes and scalar-prefetched
(`PrefetchScalarGridSpec`), so new sizes of the same shapes reuse the compiled kernel and nothing is read on the
host. A tile shared by several groups is visited once per group, in a row: each visit stores its own group's
rows only. The f32 accumulator is a VMEM scratch; the dense kind's epilogue ops (and the group's bias row) run at
the last K step.

A gated epilogue (SwiGLU, GeGLU; `renders_gated`): `halves` only (GRP204). B (G, 2N, K) K-major as stored is
viewed, without a copy, as (G, 2, N, K) and passed twice, a gate block (half 0) and an up block (half 1) of
tile.n x tile.k each a K step: two plain 2-D blocks in VMEM, two MXU dots over the same A block into a gate and an
up f32 scratch, fn(gate) * up at the last K step before the rest of the chain. B (G, K, 2N) N-major is passed twice
as stored, its gate block j and its up block j + N / tile.n, (tile.k, tile.n) each: the up half starts on a block
boundary only where N is a multiple of tile.n, a shape the check cannot see, so the launcher refuses other N when it
traces (naming N and the block). Interleaved puts the gate / up axis on the sublane dim or strides the lanes, which
the TPU's block tiling refuses or pads (rules.py GRP204 says how).

VMEM (`memory`): double-buffered A and B blocks, the output block (and, for `groups.tail = "untouched"`, the
caller's `out` block read as the base of a tile's first visit), the accumulator, the per-row and per-group
vectors padded to whole (sublane, 128-lane) tiles as the dense design counts them; a gated epilogue's up block and
up accumulator beside the gate's. The group metadata lives in SMEM (scalar prefetch). Imports jax-free code only: `specgen check` / `render` stay light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specgen.abi import Arg, make_arg
from specgen.design import ModuleHeader, plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.designs.pallas.design import (
    JNP_DTYPES,
    TPU_ARGS_DOUBLE_BUFFERED,
    TPU_LANES,
    TPU_TILE_ROW_BYTES,
    VMEM_HEADROOM,
)
from specgen.kinds.grouped import KIND
from specgen.kinds.grouped.design import GroupedDesign
from specgen.kinds.grouped.designs.pallas.training import plan_tpu_training, training_metadata
from specgen.kinds.grouped.entry import INDEX_ARGS, GroupedHostOperands, grouped_environment
from specgen.kinds.grouped.epilogue import GROUP_N
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.render.env import describe_op
from specgen.runtime import RUNTIME_ABI
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.formulas import FORMULAS
from specgen.targets import Backend, TargetInfo

if TYPE_CHECKING:
    from specgen.resolved import Resolved
    from specgen.spec.load import LoadedSpec
    from specgen.spec.models import Target

ACC_BYTES = 4  # the accumulator scratch is f32 (GRP201 refuses another accumulator dtype)


def tpu_memory(spec: GroupedSpec, tpu_vmem: int, ab_stages: int) -> MemoryBudget:
    """The kernel's VMEM: A/B blocks by `ab_stages` buffers; the output block double-buffered, and for an
    untouched tail the caller's `out` block beside it (the base of a tile's first visit, double-buffered as an
    input; ragged M only: a ragged-K kernel writes every block of out (G, M, N)); the f32 accumulator; per-row vectors ((block_m, 1): block_m x 128 lanes) and per-group rows ((1,
    block_n): one (sublane, 128) tile of 32 B rows), double-buffered. A gated epilogue reads two B blocks a step
    (gate and up, tile.n x tile.k each) and keeps two f32 accumulators."""
    t, buf = spec.tile, TPU_ARGS_DOUBLE_BUFFERED
    halves = 2 if gated_op(spec.epilogue) is not None else 1
    out_block = t.m * t.n * spec.out.dtype.bytes
    base = spec.groups.tail == "untouched" and spec.groups.ragged == "m"  # the caller's out read beside the output
    outputs = buf * out_block * (2 if base else 1)
    vectors = sum((t.m * TPU_LANES * a.dtype.bytes if a.shape == "vec_m" else TPU_TILE_ROW_BYTES * t.n) * buf
                  for a in spec.runtime_args() if a.shape in ("vec_m", GROUP_N))
    return MemoryBudget("VMEM", tpu_vmem, 0, t.m * t.k * spec.a.dtype.bytes + halves * t.k * t.n * spec.b.dtype.bytes,
                        ab_stages, epilogue_bytes=outputs, epilogue_overlaps_ab=False,
                        extra_bytes=halves * t.m * t.n * ACC_BYTES + vectors)


class PallasTpuGrouped(GroupedDesign):
    """kind "grouped", backend pallas, MXU: the Mosaic TPU kernel. See the module docstring."""

    name = "Pallas TPU grouped"
    keys = ((KIND, Backend.pallas, "mxu"),)
    compiler_modules = ("jax",)
    libraries = ("jax", "jaxlib")
    extra = "pallas"
    max_auto_stages = TPU_ARGS_DOUBLE_BUFFERED
    # A gated epilogue: halves (GRP204), a gate and an up block a step: of B's (G, 2, N, K) view (K-major), or of B
    # (G, K, 2N) itself, blocks j and j + N / tile.n (N-major; N a multiple of tile.n, checked when the call traces).
    renders_gated = True
    # A ragged-M spec's `training` backward (training.py: a jax.custom_vjp), a gated op's too (halves: pre and G
    # (rows, 2N), dgrad and wgrad over 2N) and an fp8 forward's (in the output's dtype, w.r.t. the dequantized
    # operands: GRP205 checks the 8-bit blocks its GEMMs read): every chain the grouped kind's `training` takes
    renders_training = True
    renders_gated_training = True
    renders_chain_training = True
    # Mosaic lowering for TPU, which runs on a CPU machine (libtpu's own compile, and its VMEM figure, need a TPU)
    compile_hook = "specgen.kinds.grouped.designs.pallas.compile:compile_module"
    # One module serves every TPU target: their effective configs agree on what shapes it (CFG001).
    shared_config = (("tile",), ("pipeline", "ab_stages"), ("pallas",), ("groups",), ("epilogue",))

    def auto_stages(self, spec: GroupedSpec, target: TargetInfo) -> int | None:
        """Pallas TPU pipelines double-buffer each BlockSpec by default."""
        return TPU_ARGS_DOUBLE_BUFFERED

    def has_register_model(self, target: TargetInfo) -> bool:
        return False  # the accumulator is a VMEM scratch

    def memory(self, spec: GroupedSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        tpu = target.tpu
        assert tpu is not None  # the design's key is the MXU family: TPU rows only
        return tpu_memory(spec, tpu.vmem_bytes, ab_stages)

    def modules(self, spec: GroupedSpec, targets: list[Target]) -> dict[str, list[Target]]:
        return {f"{Backend.pallas.value}/{spec.name}.py": list(targets)}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> GroupedTpuPlan:
        return plan_tpu(loaded, targets, resolved)

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        from specgen.render.specs import spec_import

        p = plan_tpu(loaded, targets, resolved)
        (rel,) = self.modules(loaded.spec, targets)
        template = "pallas/grouped_tpu_k.py.jinja" if p.ragged_k else "pallas/grouped_tpu.py.jinja"
        text = grouped_environment().get_template(template).render(
            tpu_context(p), spec_import=spec_import(rel, p.name) if shared_spec else None)
        return {rel: text}

    def tune_space(self, spec: GroupedSpec, target: TargetInfo, when: object = None) -> dict[str, tuple[object, ...]]:
        """TPU blocks in MXU multiples (timed only on a TPU): the dense TPU design's."""
        return {"tile.m": (128, 256, 512), "tile.n": (256, 512), "tile.k": (256, 512)}


@dataclass(frozen=True, kw_only=True)
class GroupedTpuPlan(GroupedHostOperands, ModuleHeader):
    """Every number and name templates/grouped/pallas/grouped_tpu.py.jinja renders."""

    targets: list[str]
    a: Arg
    b: Arg
    index: Arg  # the group index (offs or group_sizes)
    index_kind: str  # "offs" (cumulative ends) or "sizes"
    out: Arg
    args: list[Arg]  # the epilogue's runtime arguments, in chain order
    a_major: str
    b_major: str
    tail_zero: bool  # groups.tail = "zero": a tile's first visit starts from zeros
    ragged_k: bool = False  # groups along K (the weight gradient): templates/grouped/pallas/grouped_tpu_k.py.jinja
    gated: bool = False  # a gated epilogue (halves: GRP204): B (G, 2N, K) or (G, K, 2N), a gate and an up block a step
    tile_m: int  # the blocks (the module's BLOCK_M, BLOCK_N, BLOCK_K)
    tile_n: int
    tile_k: int
    ab_stages: int  # pipeline buffers per A / B BlockSpec (AB_BUFFERS)
    vmem_bytes: int  # what the plan's blocks need (the VMEM001 figure)
    vmem_breakdown: str
    vmem_limit_bytes: int  # the scoped limit the kernel requests
    epilogue: list[dict[str, object]]
    spec_json: dict[str, object]
    training: object | None = None  # a `training` backward (training.py: GroupedTpuTrainingPlan), behind a custom_vjp
    convert: bool = False  # a companion of an fp8 forward's backward: an operand may be 8-bit, converted in the kernel



def _arg(name: str, role: str, dtype: DType, doc: str) -> Arg:
    return make_arg(name, role, dtype, doc, lambda d: {"jnp": JNP_DTYPES[d]})


def plan_tpu(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
             companion: bool = False) -> GroupedTpuPlan:
    """The module's plan from what check resolved for each TPU target (CFG001 keeps their shared config equal,
    so the first's spec serves; the VMEM figure is the same on every generation, the limit under the least
    VMEM)."""
    contexts = [resolved[str(t)] for t in targets]
    spec: GroupedSpec = contexts[0].spec
    need = max(c.budget.total for c in contexts)
    cap = min(c.budget.capacity for c in contexts)
    index_name, index_doc = INDEX_ARGS[spec.groups.index]
    a_dims = "(M, K)" if spec.a.major == "k" else "(K, M)"
    gated = gated_op(spec.epilogue)
    if gated is not None and gated.layout != "halves":  # check refuses it (GRP204)
        raise ValueError(f"{spec.name}: the grouped TPU kernel reads a gated B as halves (GRP204)")
    n_dim = "2N" if gated is not None else "N"
    b_dims = f"(G, {n_dim}, K)" if spec.b.major == "k" else f"(G, K, {n_dim})"
    b_doc = f"{b_dims} {spec.b.dtype}, stored {spec.b.major}-major: one weight per group" + ((
        ", gate rows [0, N), up rows [N, 2N) (the per-group torch.cat([w_gate, w_up]))" if spec.b.major == "k" else
        ", gate columns [0, N), up columns [N, 2N); N a multiple of the block") if gated is not None else "")
    a_doc = f"{a_dims} {spec.a.dtype}, stored {spec.a.major}-major: every group's rows, group by group"
    out_doc = f"(M, N) {spec.out.dtype}"
    ragged_k = spec.groups.ragged == "k"
    if ragged_k:  # groups along K: A^T's and B's K rows group by group, one (M, N) product per group
        a_doc = (f"{a_dims} {spec.a.dtype}, stored {spec.a.major}-major: every group's K rows, group by group (A^T of "
                 "the layer's (K, M) input)")
        b_doc = (f"{'(N, K)' if spec.b.major == 'k' else '(K, N)'} {spec.b.dtype}, stored {spec.b.major}-major: every "
                 "group's K rows, group by group")
        out_doc = f"(G, M, N) {spec.out.dtype}: one (M, N) product per group"
    return GroupedTpuPlan(
        **plan_header(loaded),
        targets=[str(t) for t in targets],
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
        tile_m=spec.tile.m,
        tile_n=spec.tile.n,
        tile_k=spec.tile.k,
        ab_stages=contexts[0].ab_stages,
        vmem_bytes=need,
        vmem_breakdown=contexts[0].budget.breakdown(),
        vmem_limit_bytes=spec.pallas.vmem_limit_bytes or min(cap, math.ceil(need * VMEM_HEADROOM)),
        epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
        spec_json=loaded.spec.model_dump(mode="json"),
        training=None if companion or getattr(spec, "training", None) is None else plan_tpu_training(
            loaded, targets, resolved, lambda ld, ts, rs: plan_tpu(ld, ts, rs, companion=True), JNP_DTYPES),
    )


def describe(op: dict) -> str:
    """An epilogue op as the module's docstring lists it (a per-group operand says so)."""
    if op["op"] == "bias":
        return f"bias: + {op['name']}[g] (G, N) {op['dtype']}, group g's row"
    if op["op"] == "scale" and op["by"] == "col":
        return f"scale: * {op['name'] or 'col_scale'}[g, n] (G, N) f32, group g's row"
    if op["op"] == "scale" and op["by"] == "rowcol":
        return "scale: * scale_a[m] * scale_b[g, n], per row and per group and column (rowwise fp8 scales)"
    return describe_op(op)


def metadata(p: GroupedTpuPlan) -> dict[str, object]:
    """The module's METADATA: its identity, then its plan figures."""
    return {"runtime_abi": RUNTIME_ABI, "kernel": p.name, "spec_file": p.spec_file, "spec_hash": p.spec_hash,
            "specgen_version": p.specgen_version, "description": p.description, "targets": p.targets, "kind": KIND,
            "groups": {"index": p.index_kind, "tail": "zero" if p.tail_zero else "untouched"} | ({"ragged": "k"} if p.ragged_k else {}),
            "a_major": p.a_major, "b_major": p.b_major, **({"gated": "halves"} if p.gated else {}), "block_m": p.tile_m, "block_n": p.tile_n,
            "block_k": p.tile_k, "ab_buffers": p.ab_stages, "vmem_bytes": p.vmem_bytes,
            "vmem_breakdown": p.vmem_breakdown, "vmem_limit_bytes": p.vmem_limit_bytes} | (
                {"training": training_metadata(p.training)} if p.training is not None else {})


def tpu_context(p: GroupedTpuPlan) -> dict[str, object]:
    """The template's variables: the plan, its METADATA, and the numbers its cost estimate uses."""
    return {
        "p": p,
        "plan_meta": metadata(p),
        "describe": [describe(op) for op in p.epilogue],
        "jnp_dtypes": {d.value: JNP_DTYPES[d] for d in DType},
        "transcendentals": sum(1 for op in p.epilogue if op["op"] in ("activation", "gated")
                               and FORMULAS[op["fn"]].transcendental),
        "a_bytes": p.a.dtype.bytes,
        "b_bytes": p.b.dtype.bytes,
        "out_bytes": p.out.dtype.bytes,
    }


DESIGN = PallasTpuGrouped()
