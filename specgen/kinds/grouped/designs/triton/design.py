"""The grouped Triton design: a persistent kernel over (group, M tile, N tile), its SMEM layout, its plan and
its render; its compile hook is the dense Triton design's (the module carries the same CONFIGS, _CONSTEXPRS and
METADATA keys).

One module serves all of a spec's Triton targets, as the dense design's does: the kernel source is the same on
sm90 and sm100, and the launcher picks the per-arch launch config by compute capability.

The schedule (templates/grouped/triton/grouped.py.jinja): a static number of programs (the SMs; the launcher
caps the grid at a bound on the tile count that needs no group sizes: (cdiv(M, BLOCK_M) + G + 1) row tiles,
as each group and the tail add at most one partial tile) each walks the groups in order, reading the group
index on the device, and takes every NUM_SMS-th tile; inside a group the M tiles of one N tile come side by
side, so each expert's weight tile is read from DRAM once however many row tiles share it. Nothing is read on
the host, so a CUDA graph replays with new group sizes. With `triton.tma` (the default) A and B load through
host-built TMA descriptors: A's over all rows (a tile that runs past its group's end reads the next group's
rows, which its store drops), B's a 3-D one with one expert's box; the output is stored through masked pointers
(its rows stop at the group's end). Without it, loads are masked pointer accesses too. The ragged-K kernel
(ragged_k.py.jinja: one program per out[g] tile) loads by TMA the same way and, with `triton.tma`, stores out (G, M, N)
by TMA too where the host can describe it (`tma_store`; a masked pointer store otherwise, chosen per call). A last partial wave of
R tiles (the groups' tile count mod the SMs, counted on the device) runs split along K in 2 or 4 parts where R times
that fits the SMs, reduced through the dense split-K's workspace (`tail_split` on the plan; docs/grouped.md).

SMEM: A/B stages (FMA dots keep one buffer fewer, as the dense kernel's do, and a TMA one transposes a K-major
f32 B through a tile of scratch), and the out tile once the K loop is done, where the compiler reuses the A/B stages
(dead by then): the pointer stores' layout conversion, or the ragged-K kernel's TMA store staging; it is the figure
where it exceeds the stages (an f32 out over a shallow pipeline: `specgen compile`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.abi import Arg, make_arg
from specgen.design import ModuleHeader, compiles_as, module_identity, plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.design import ab_stage_bytes, b_box_columns, tma_boxes
from specgen.kinds.gemm.designs.triton.design import (
    TL_DTYPES,
    TRITON_SIG,
    EpilogueStep,
    KernelParam,
    StepArg,
    TritonArchConfig,
    TritonGemm,
    TritonVariant,
    uses_tanh,
    variant_metadata,
)
from specgen.kinds.grouped import KIND
from specgen.kinds.grouped.design import GroupedDesign
from specgen.kinds.grouped.designs.triton.training import GroupedTrainingPlan, plan_training
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


@compiles_as(TritonGemm)  # the module carries what the dense design's compile hook reads
class TritonGrouped(GroupedDesign):
    name = "Triton grouped"
    keys = ((KIND, Backend.triton, "wgmma"), (KIND, Backend.triton, "tcgen05"))
    # The dense Triton kernel's measured margin (SMEM001): the grouped kernel's pipeline is the dense kernel's. Its
    # own compile grid (tests/grids/grouped_triton.py, triton 3.6: seed 37 and a fresh seed 38) has every config
    # the plan accepts and the compiler does not build within it (0 false accepts, 0 false rejects with the compiler).
    smem_margin = TritonGemm.smem_margin
    shared_config = (("tile",), ("schedule",), ("groups",), ("epilogue",))
    # Size-selected variants (decode's few rows an expert): the launcher picks one by M (all rows), N and K, read
    # from shapes, never from the group index. Descriptors or pointers are the kernel's parameters: one for all.
    renders_variants = True
    renders_gated = True  # a gated epilogue: B (G, K, 2N) into N outputs (EPI001 elsewhere, EPI002 its limits)
    renders_training = True  # a `training` backward (training.py in this package; TRN001 elsewhere)
    renders_gated_training = True  # a gated epilogue's too (pre and G over B's 2N columns)
    # and an fp8 forward's (rowwise scales): every chain the grouped kind's `training` takes (it refuses the rest at
    # load), so TRN001 has nothing to refuse here
    renders_chain_training = True
    # Its companions run backward.jinja's kernels, each rendered from the companion's own plan (unsplit: no tail split,
    # TMA or pointer loads as training.py derives them): check settles their near verdicts by compiling those (the
    # training module's role rows), not a forward at the companion's config, which would split its last wave (the
    # reduction's registers: a 128x256 dgrad's forward spilled 4 B at 255 registers where the dgrad kernel uses 193)
    backward_kernels = True
    variant_shared_config = (("triton", "tma"),)
    dot_accumulators = TritonGemm.dot_accumulators
    # `specgen tune`'s knobs: the dense Triton kernel's (block shape, warps, pipeline depth), which the grouped
    # kernel reads the same way; check prunes what cannot fit.
    tune_space = TritonGemm.tune_space

    def mma_tile(self, spec: GroupedSpec) -> tuple[tuple[int, str], tuple[int, str]]:
        """The tile the MMA computes: transposed with `triton.swap_ab`."""
        t = spec.tile
        return ((t.n, "n"), (t.m, "m")) if spec.triton.swap_ab else ((t.m, "m"), (t.n, "n"))

    def accumulator_threads(self, spec: GroupedSpec, target: TargetInfo) -> int:
        return spec.triton.num_warps * 32

    def has_register_model(self, target: TargetInfo) -> bool:
        return True

    def memory(self, spec: GroupedSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        gpu = target.gpu
        assert gpu is not None
        t = spec.tile
        # an FMA dot reads B N-major: a TMA kernel transposes a K-major f32 B through one tile (the dense design's)
        scratch = (t.k * b_box_columns(spec) * 4 if spec.a.dtype == DType.f32 and uses_tma(spec) and spec.b.major == "k"
                   else 0)
        # the out tile goes through SMEM after the K loop, over the drained A/B stages: the ragged-K kernel's TMA store
        # stages it, and the masked pointer stores (both kernels) convert the accumulator's layout through it (the same
        # bytes, triton 3.9: 65,536 B for a 128x128 f32 out over two 16,384 B stages, 131,072 for 128x256, ragged M or
        # K; `specgen compile`)
        epilogue = t.m * t.n * spec.out.dtype.bytes
        return MemoryBudget("SMEM", gpu.smem_per_block, 0, ab_stage_bytes(spec), ab_stages, epilogue, True,
                            extra_bytes=scratch, extra_label="layout scratch",
                            ab_buffers_delta=-1 if spec.a.dtype == DType.f32 else 0)

    def tma_boxes(self, spec: GroupedSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """A's and B's boxes where they load by TMA, and the ragged-K kernel's out tile (its TMA store; the ragged-M
        kernel's output is stored through pointers)."""
        if not uses_tma(spec) or target.gpu is None:
            return ()
        return tma_boxes(spec)[:3 if spec.groups.ragged == "k" else 2]

    def modules(self, spec: GroupedSpec, targets: list[Target]) -> dict[str, list[Target]]:
        return {f"{Backend.triton.value}/{spec.name}.py": list(targets)}

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        p = plan_grouped(loaded, targets, resolved)
        (rel,) = self.modules(loaded.spec, targets)
        template = grouped_environment().get_template("triton/ragged_k.py.jinja" if p.ragged_k else "triton/grouped.py.jinja")
        schema = [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, p.index, *p.args)]
        text = template.render(p=p, metadata=metadata(p), spec_import=spec_import(rel, p.name) if shared_spec else "",
                               op_schema=[*schema, ["out", "Tensor?"]], train_schema=schema,
                               # the backward op's arguments: the output's gradient, the forward's, the saved pre (None:
                               # not saved), and which gradients autograd needs (the index has none)
                               backward_schema=[["grad", "Tensor"], *schema, ["pre", "Tensor?"],
                                                *([f"need_{a.name}", "bool"] for a in (p.a, p.b, *p.args))],
                               uses_tanh=uses_tanh(p.steps, p.training is not None))
        return {rel: text}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> GroupedTritonPlan:
        return plan_grouped(loaded, targets, resolved)


def uses_tma(spec: GroupedSpec) -> bool:
    """Whether A and B load through TMA descriptors: `triton.tma`, in both kernels (the ragged-K kernel's over
    each group's whole K tiles, its last partial tile one box masked in registers: kernels.jinja ragged_k)."""
    return spec.triton.tma


@dataclass(frozen=True, kw_only=True)
class GroupedTritonPlan(GroupedHostOperands, ModuleHeader):
    kernel_name: str
    a: Arg
    b: Arg
    index: Arg  # the group index (offs or group_sizes)
    index_kind: str  # "offs" (cumulative ends) or "sizes"
    out: Arg
    args: list[Arg]  # epilogue runtime arguments, in chain order
    a_major: str
    b_major: str
    tail_zero: bool  # groups.tail = "zero": the kernel zeroes the rows past the last group
    ragged_k: bool  # groups.ragged = "k": groups along K, out (G, M, N) (templates/grouped/triton/ragged_k.py.jinja)
    tma: bool  # A and B load through TMA descriptors (triton.tma, ragged M: `uses_tma`)
    swap: bool  # some config computes its tile transposed (triton.swap_ab): the kernel takes SWAP_AB
    swap_ab: bool  # the default config does
    variants: list[TritonVariant]  # size-selected, in the order the launcher tries them
    acc_dtype: str
    input_precision: str | None
    tile_m: int
    tile_n: int
    tile_k: int
    configs: list[TritonArchConfig]
    spec_json: dict[str, object]
    params: list[KernelParam]
    steps: list[EpilogueStep]
    gated: bool = False  # a gated epilogue: B (G, K, 2N), gate and up columns, into N outputs
    gated_layout: str = ""  # where its gate and up columns sit: "halves" or "interleaved"
    training: GroupedTrainingPlan | None = None  # a `training` backward (training.py), rendered beside the forward
    # an fp8 forward's backward GEMM (training.py): this operand's tiles are fp8 in memory, converted exactly to its
    # planned (16-bit) dtype in registers before the dot
    convert_a: bool = False
    convert_b: bool = False
    # the ragged-M forward splits its last partial wave along K (kernels.jinja ragged_m; f32 accumulators only, as
    # the dense split-K): the kernel takes the launcher's workspace and G_BLOCK / TAIL_SPLIT. The training
    # companions (dgrad, pre) stay unsplit: their launches come from the backward's host part, which has no workspace
    tail_split: bool = False
    # the ragged-K kernel's TMA boxes start on a multiple of this many K rows: 16 bytes of a K-major operand (a box
    # whose inner coordinate is off 16 bytes is an illegal instruction), 1 where both are M- / N-major
    k_align: int = 1
    # the ragged-K kernel stores out (G, M, N) through a host-built 3-D TMA descriptor (out_desc, boxes of one group's
    # (BLOCK_M, BLOCK_N) tile, so TMA clips a box at M within its group) where the host can describe out; the
    # constexpr TMA_STORE picks it or the masked pointer store per call (`_gg.out_descriptor`)
    tma_store: bool = False



def _spellings(dtype: DType) -> dict[str, str]:
    return {"torch": dtype.info.torch, "triton": TL_DTYPES[dtype]}


def _arg(name: str, role: str, dtype: DType, doc: str) -> Arg:
    return make_arg(name, role, dtype, doc, _spellings)


def _arch_config(r: Resolved) -> TritonArchConfig:
    assert r.info.compute_capability is not None
    return TritonArchConfig(r.target.arch, r.info.compute_capability, r.spec.triton.num_warps, r.ab_stages,
                            r.budget.total, r.budget.breakdown(), r.acc_registers)


def plan_grouped(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
                 companion: bool = False) -> GroupedTritonPlan:
    spec: GroupedSpec = resolved[str(targets[0])].spec  # CFG001: the module's targets agree on shared_config
    # check refuses an M-major A with groups of rows (GRP001); a render that skipped check must not emit a wrong kernel
    if spec.a.major != "k" and spec.groups.ragged == "m":
        raise ValueError(f"{spec.name}: the grouped Triton kernel reads A K-major only (GRP001)")
    a_dt = spec.a.dtype
    variants = []
    for i, first in enumerate(resolved[str(targets[0])].variants):  # CFG001: the same bounds on every target
        vs, when = first.spec, first.when
        assert when is not None
        boxes = _boxes(vs)
        variants.append(TritonVariant(
            index=i, when=str(when), bounds=list(when.bounds().items()),
            tile_m=vs.tile.m, tile_n=vs.tile.n, tile_k=vs.tile.k, group_m=1, boxes=boxes,
            configs=[_arch_config(resolved[str(t)].variants[i]) for t in targets], swap_ab=vs.triton.swap_ab,
            desc_types={f"{side}_desc": _desc_type(vs, side) for side in boxes}))
    swap = spec.triton.swap_ab or any(v.swap_ab for v in variants)
    gated = gated_op(spec.epilogue)
    if gated is not None and swap:  # check refuses it (EPI002); a render that skipped check must not emit a wrong kernel
        raise ValueError(f"{spec.name}: the grouped Triton kernel's gated epilogue takes no swap_ab config (EPI002)")
    b_doc = (f"(G, K, 2N) {spec.b.dtype}, {spec.b.major}-major: one weight per group, "
             + ("gate columns [0, N), up columns [N, 2N)" if gated.layout == "halves" else "column 2j gate j, 2j + 1 up j")
             if gated is not None else f"(G, K, N) {spec.b.dtype}, {spec.b.major}-major: one weight per group")
    index_name, index_doc = INDEX_ARGS[spec.groups.index]
    ragged_k = spec.groups.ragged == "k"
    tail_split = not ragged_k and not companion and spec.accumulator == DType.f32
    if ragged_k:
        docs = (f"(M, K) {a_dt}, {spec.a.major}-major: every group's K columns, group by group (A^T of a (K, M) input)",
                f"(K, N) {spec.b.dtype}, {spec.b.major}-major: every group's K rows, group by group",
                f"(G, M, N) {spec.out.dtype}, row-major: one (M, N) product per group")
    else:
        docs = (f"(M, K) {a_dt}, {spec.a.major}-major: the rows of every group, group by group", b_doc,
                f"(M, N) {spec.out.dtype}, row-major")
    return GroupedTritonPlan(
        training=plan_training(loaded, targets, resolved, plan_grouped) if spec.training is not None else None,
        **plan_header(loaded),
        kernel_name=f"_{spec.name}_kernel",
        a=_arg("a", "a", a_dt, docs[0]),
        b=_arg("b", "b", spec.b.dtype, docs[1]),
        index=_arg(index_name, "index", DType.int32, f"(G,) int32 on the device, {index_doc}"),
        index_kind=spec.groups.index,
        out=_arg("out", "out", spec.out.dtype, docs[2]),
        args=[_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        a_major=spec.a.major,
        b_major=spec.b.major,
        tail_zero=spec.groups.tail == "zero",
        ragged_k=ragged_k,
        tma=uses_tma(spec),
        swap=swap,
        swap_ab=spec.triton.swap_ab,
        variants=variants,
        acc_dtype=TL_DTYPES[spec.accumulator],
        input_precision=("tf32" if a_dt == DType.tf32 else "ieee") if a_dt.bytes == 4 else None,
        tile_m=spec.tile.m,
        tile_n=spec.tile.n,
        tile_k=spec.tile.k,
        configs=[_arch_config(resolved[str(t)]) for t in targets],
        spec_json=loaded.spec.model_dump(mode="json"),
        params=_params_ragged_k(spec) if ragged_k else _params(spec, swap, tail_split),
        tail_split=tail_split,
        tma_store=ragged_k and uses_tma(spec),
        k_align=max([16 // o.dtype.bytes for o in (spec.a, spec.b) if o.major == "k" and ragged_k and uses_tma(spec)] or [1]),
        steps=_steps(spec),
        gated=gated is not None,
        gated_layout=gated.layout if gated is not None else "",
    )


def _boxes(spec: GroupedSpec) -> dict[str, list[int]]:
    """A's and B's TMA boxes (none without `triton.tma`): B's descriptor is 3-D, (G, N, K) for a K-major weight,
    (G, K, N) for an N-major one, a box holding one expert's tile. The ragged-K kernel's are 2-D, over A (M, K) and
    B (K, N) as stored, the contiguous dim inner (gemm's `tma_boxes`: an M-major A's boxes are (K, M))."""
    if not uses_tma(spec):
        return {}
    if spec.groups.ragged == "k":  # and out's, (1, tile.m, tile.n): one group's tile of its (G, M, N) view (TMA store)
        a, b = tma_boxes(spec)[:2]
        return {"a": [a.outer, a.inner], "b": [b.outer, b.inner], "out": [1, spec.tile.m, spec.tile.n]}
    t, bn = spec.tile, b_box_columns(spec)  # an interleaved gated tile's 2 tile.n columns in one box
    return {"a": [t.m, t.k], "b": [1, bn, t.k] if spec.b.major == "k" else [1, t.k, bn]}


def _desc_type(spec: GroupedSpec, side: str) -> str:
    dtype = {"a": spec.a.dtype, "b": spec.b.dtype, "out": spec.out.dtype}[side]
    return f"tensordesc<{TRITON_SIG[dtype]}[{', '.join(map(str, _boxes(spec)[side]))}]>"


def _params(spec: GroupedSpec, swap: bool = False, tail_split: bool = False) -> list[KernelParam]:
    """The kernel's parameters in declaration order. N, K and the strides are specialized as the JIT does (on
`% 16 == 0` and `== 1`: 16-byte aligned rows let Triton pipeline the pointer loads as async copies); the
total rows M, the group count G and the tile bound never are (`none`), so new group sizes and counts reuse the
compiled kernel. The launcher's key is those specializations, INDEX_64 (and G_BLOCK, with the tail split) and
which integers pass 32 bits."""
    tma = uses_tma(spec)
    ps = _operand_params(spec)
    if tail_split:  # the split last wave's f32 partials and arrival counters (the launcher's workspace)
        ps += [KernelParam("ws_ptr", "*fp32", "workspace", "aligned", "name", "ws"),
               KernelParam("counts_ptr", "*i32", "workspace", "aligned", "name", "counts")]
    ps += [KernelParam(d, "i32", "size", "aligned" if d in ("N", "K") else "none", "name", d) for d in ("M", "N", "K", "G")]
    if not tma:  # descriptors carry A's and B's strides
        ps += [KernelParam("stride_a", "i32", "stride", "aligned", "stride", "sa", -2 if spec.a.major == "k" else -1),
               KernelParam("stride_bg", "i32", "stride", "aligned", "stride", "sb", 0),
               KernelParam("stride_b", "i32", "stride", "aligned", "stride", "sb", -1 if spec.b.major == "k" else -2)]
    ps += [KernelParam("stride_om", "i32", "stride", "aligned", "stride", "so", -2),
           KernelParam("MAX_TILES", "i32", "size", "none", "name", "tiles"),
           KernelParam("NUM_SMS", "i32", "device", "none", "num_sms")]
    ps += [KernelParam(c, "constexpr", "constexpr", "constexpr", "constant", c)
           for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", *(("SWAP_AB",) if swap else ()), "INDEX_64",
                     *(("G_BLOCK", "TAIL_SPLIT") if tail_split else ()))]
    ps.append(KernelParam("FAST_MATH", "constexpr", "constexpr", "constexpr", "fast_math"))
    return ps


def _operand_params(spec: GroupedSpec) -> list[KernelParam]:
    """Both kernels' first parameters: A's and B's descriptors (TMA loads) or pointers, out's pointer, the group
    index, then the epilogue's arguments in chain order (a scalar as a float, a tensor as its pointer)."""
    tma = uses_tma(spec)
    ps = [KernelParam(f"{side}_desc", _desc_type(spec, side), "operand", "aligned", "name", f"{side}_desc")
          if tma and side != "out" else
          KernelParam(f"{side}_ptr", "*" + TRITON_SIG[dt], "operand", "aligned", "name", side)
          for side, dt in (("a", spec.a.dtype), ("b", spec.b.dtype), ("out", spec.out.dtype))]
    ps.append(KernelParam("index_ptr", "*i32", "operand", "aligned", "name", INDEX_ARGS[spec.groups.index][0]))
    for arg in spec.runtime_args():
        if arg.shape == "scalar":
            ps.append(KernelParam(arg.name, "fp32", "epilogue", "none", "float", arg.name))
        else:
            ps.append(KernelParam(f"{arg.name}_ptr", "*" + TRITON_SIG[arg.dtype], "epilogue", "aligned", "name", arg.name))
    return ps


def _params_ragged_k(spec: GroupedSpec) -> list[KernelParam]:
    """The ragged-K kernel's parameters: A (M, K) and B (K, N) in either major, as TMA descriptors (`triton.tma`)
    or pointers with their strides (each its own: the unit one specializes to 1), out (G, M, N). M and N are the
    model's (specialized as the JIT does); K, every group's rows, and G never are, so new group sizes and counts
    reuse the compiled kernel."""
    ps = _operand_params(spec)
    if uses_tma(spec):  # out's 3-D descriptor after its pointer: the TMA store's (None where TMA_STORE is False)
        ps.insert(3, KernelParam("out_desc", _desc_type(spec, "out"), "operand", "aligned", "name", "out_desc"))
    ps += [KernelParam(d, "i32", "size", "aligned" if d in ("M", "N") else "none", "name", d) for d in ("M", "N", "K", "G")]
    if not uses_tma(spec):  # descriptors carry A's and B's strides
        ps += [KernelParam("stride_am", "i32", "stride", "aligned", "stride", "sa", -2),
               KernelParam("stride_ak", "i32", "stride", "aligned", "stride", "sa", -1),
               KernelParam("stride_bk", "i32", "stride", "aligned", "stride", "sb", -2),
               KernelParam("stride_bn", "i32", "stride", "aligned", "stride", "sb", -1)]
    ps += [KernelParam("stride_og", "i32", "stride", "wide", "stride", "so", 0),
           KernelParam("stride_om", "i32", "stride", "aligned", "stride", "so", -2)]
    ps += [KernelParam(c, "constexpr", "constexpr", "constexpr", "constant", c)
           for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "INDEX_64", *(("TMA_STORE",) if uses_tma(spec) else ()))]
    ps.append(KernelParam("FAST_MATH", "constexpr", "constexpr", "constexpr", "fast_math"))
    return ps


def _describe(op: dict) -> str:
    if op["op"] == "bias":
        return f"bias: + {op['name']}[g] (G, N) {op['dtype']}, per group and column"
    if op["op"] == "scale" and op["by"] == "col":
        return f"scale: * {op['name'] or 'col_scale'}[g, n] (G, N) f32, per group and column"
    if op["op"] == "scale" and op["by"] == "rowcol":
        return "scale: * scale_a[m] * scale_b[g, n], per row and per group and column (rowwise fp8 scales)"
    return describe_op(op)


def _steps(spec: GroupedSpec) -> list[EpilogueStep]:
    """The epilogue as the dense Triton design's macros spell it (templates/gemm/triton/epilogue.jinja, which
    the grouped template imports): a per-row vector loads at the tile's global rows (`offs_m`), a bias per group
    at its group's row (`<name>_g`, moved there per group) along N."""
    steps = []
    for op in spec.epilogue:
        args = []
        for a in op.runtime_args():
            axis = {"vec_m": "m", "vec_n": "n", GROUP_N: "n"}.get(a.shape, "")
            param = a.name if a.shape == "scalar" else f"{a.name}_g" if a.shape == GROUP_N else f"{a.name}_ptr"
            args.append(StepArg(a.name, param, a.shape, axis, TL_DTYPES[a.dtype], a.dtype != DType.f32 or op.op == "bias"))
        data = op.model_dump(mode="json")
        steps.append(EpilogueStep(op=op.op, describe=_describe(data), args=args, fn=data.get("fn", ""),
                                  value=data.get("value"), min=data.get("min"), max=data.get("max"),
                                  dtype=TL_DTYPES[DType(data["dtype"])] if op.op == "cast" else ""))
    return steps


def metadata(p: GroupedTritonPlan) -> dict[str, object]:
    """The module's one metadata dict (rendered as METADATA): the keys the dense Triton compile hook reads."""
    return module_identity(p.name, p.spec_file, p.spec_hash, p.specgen_version, [f"triton:{c.arch}" for c in p.configs]) | {
        "kind": KIND,
        "groups": {"index": p.index_kind, "tail": "zero" if p.tail_zero else "untouched"} | ({"ragged": "k"} if p.ragged_k else {}),
        "plan": {c.compute_capability: {"num_warps": c.num_warps, "num_stages": c.ab_stages, "smem_bytes": c.smem_bytes,
                                        "smem_breakdown": c.smem_breakdown, "acc_registers": c.acc_registers}
                 for c in p.configs},
        "parameters": [[q.name, q.type, q.specialization] for q in p.params],
    } | ({"swap_ab": True} if p.swap_ab else {}) | ({"variants": [variant_metadata(v) for v in p.variants]}
                                                    if p.variants else {}) | (
        {"training": training_metadata(p.training)} if p.training is not None else {})


def training_metadata(t: GroupedTrainingPlan) -> dict[str, object]:
    """The backward's METADATA entry, as the dense design's: what the forward saves and each backward GEMM's tile and
    launch config (the compile hook's plan SMEM beside the compiler's)."""
    return {"save": t.save, "kernels": {
        role: {"tile": [k.tile_m, k.tile_n, k.tile_k],  # type: ignore[attr-defined]
               "plan": {c.compute_capability: {"num_warps": c.num_warps, "num_stages": c.ab_stages, "smem_bytes": c.smem_bytes}
                        for c in k.configs}}  # type: ignore[attr-defined]
        for role, k in t.kernels.items()}}


DESIGN = TritonGrouped()
