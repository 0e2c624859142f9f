"""The Triton GEMM design: its SMEM layout, its plan, its render, and (lazily) its compile hook.

One generated module serves all of a spec's Triton targets: the kernel source is the same for sm90
and sm100, and the launcher picks the per-arch launch config (`configs`) by the device's compute
capability.

SMEM (`memory`, measured against `triton.compile` by tests/differential.py, whose verdicts
tests/data/grid_triton.jsonl records): each stage holds one A tile and one B tile (FMA dots keep one
buffer fewer). Three lifetimes share the block: buffers of the K loop (the A/B stages; sm_100's K-major
copies of MN-major tf32 TMA operands), scratch used after it over the drained pipeline buffers
(swap_ab's transpose, an sm_90 pointer kernel's residual conversion), and buffers beside both (a
persistent TMA kernel's store tile, whose async store outlives the tile; layout scratch; in a
flattened loop, the epilogue's buffers too). One program per tile, or a split-K kernel's last
program, stores over the drained pipeline; pointer stores need no SMEM.
Triton itself keeps no barrier reserve worth counting (a few 8-byte mbarriers per stage).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgen.abi import Arg, make_arg
from specgen.design import module_identity, plan_header
from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm import KIND
from specgen.kinds.gemm.design import GemmDesign, ab_stage_bytes, b_box_columns, b_tile_columns
from specgen.kinds.gemm.designs.triton.training import TrainingPlan, plan_training, prestore_scratch
from specgen.kinds.gemm.plan import ConfigRow, GemmModule
from specgen.kinds.gemm.sections import When
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolved import Resolved
from specgen.resolved import TmaBox as RuleBox
from specgen.rules.finding import Margin
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.formulas import DERIVATIVES, FORMULAS
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.targets import Backend, TargetInfo

# Each dtype as triton.language names it (tl.<name>) and as a kernel signature spells a pointer's element.
TL_DTYPES: dict[DType, str] = {
    DType.f32: "float32", DType.tf32: "float32", DType.f16: "float16", DType.bf16: "bfloat16",
    DType.fp8_e4m3: "float8e4nv", DType.fp8_e5m2: "float8e5", DType.int8: "int8", DType.int32: "int32",
}
TRITON_SIG: dict[DType, str] = {
    DType.f32: "fp32", DType.tf32: "fp32", DType.f16: "fp16", DType.bf16: "bf16",
    DType.fp8_e4m3: "fp8e4nv", DType.fp8_e5m2: "fp8e5", DType.int8: "i8", DType.int32: "i32",
}

CONVERSION_PIECE = 131072  # the most scratch one layout conversion took (measured, tests/differential.py)
FLAT_STORE_SCRATCH = 32768  # the most a flattened pointer kernel's store conversion took (measured)


class TritonGemm(GemmDesign):
    name = "Triton"
    # tl.dot picks its instructions from the block: one design for every MMA family Triton lowers to
    keys = (("gemm", Backend.triton, "wgmma"), ("gemm", Backend.triton, "tcgen05"))
    compile_hook = "specgen.kinds.gemm.designs.triton.compile:compile_module"
    backward_kernels = True  # templates/gemm/triton/backward.jinja's, one per role
    compiler_modules = ("torch", "triton")
    compile_environment = {"TRITON_INTERPRET": "0"}  # an AOT compile is for the GPU, never the CPU interpreter
    libraries = ("torch", "triton")
    compile_caches = ("TRITON_CACHE_DIR",)
    extra = "triton"
    max_auto_stages = 4
    # SMEM001's margin, the plan against `triton.compile`'s allocation (tests/differential.py's seed-17 grid,
    # 1000 kernels on sm_90 / sm_100 each with triton 3.9.0 (tests/data/grid_triton.jsonl) and 3.6.0
    # (tests/data/grid_triton_3.6.jsonl, what torch 2.11 ships)): 3.6 allocated up to 131136 B more than
    # the plan (its epilogue conversions beside the pipeline: f32 256x256x32 and f16-accumulator 256x256x64
    # tiles), and both allocated up to 24560 B less
    smem_margin = Margin(below=131136, above=24560, unit="bytes")

    def accumulator_threads(self, spec: GemmSpec, target: TargetInfo) -> int:
        return spec.triton.num_warps * 32

    def dot_accumulators(self, a: DType) -> tuple[DType, ...]:
        """tl.dot: int8 -> int32; f16 may accumulate in f16 (out_dtype); everything else in f32."""
        return {DType.int8: (DType.int32,), DType.f16: (DType.f32, DType.f16)}.get(a, (DType.f32,))

    def has_register_model(self, target: TargetInfo) -> bool:
        return True


    def config_notes(self, spec: GemmSpec) -> str:
        return " swap_ab" if spec.triton.swap_ab else ""

    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        gpu = target.gpu
        assert gpu is not None
        t, out_bytes, opt = spec.tile, spec.out.dtype.bytes, spec.triton
        tile_bytes = t.m * t.n * out_bytes
        persistent, flatten, tma_store = spec.schedule.persistent, opt.flatten, opt.tma
        prestore = opt.backward_role in ("forward_pre", "recompute")
        if opt.backward_role:  # a training backward's GEMM: backward.jinja's TMA kernel for that role (persistent;
            # dgrad and wgrad store by TMA, forward_pre and recompute by pointers; a gated pre kernel not flattened)
            persistent, tma_store = True, not prestore
            flatten = not (prestore and gated_op(spec.epilogue) is not None)
        persistent_tma = opt.tma and persistent
        split = spec.schedule.split_k > 1
        # flatten pipelines a persistent kernel's whole tile loop, epilogue included: its buffers stay
        # live beside the next tile's loads (a split-K kernel reduces outside that loop: measured)
        flat = persistent and flatten and not split
        # a backward pre kernel's matrices (dOut, residuals) share its pointer stores' region (triton 3.9, sm_90: 256x128x64
        # recompute with dOut, 3 stages: 180,248 B, the plan without it + 24; 128x128x64 forward_pre with one, 4: + 32)
        residuals = [] if prestore else [arg.dtype.bytes for arg in spec.runtime_args() if arg.shape == "matrix"]
        # The TMA store stages the output tile (half of it with epilogue_subtile). A persistent kernel
        # keeps it beside the next tile's pipeline; one program per tile, or a split-K kernel's last
        # program, reuses the drained pipeline buffers.
        epi = (tile_bytes // 2 if opt.epilogue_subtile else tile_bytes) if tma_store else 0
        overlaps = not (tma_store and persistent) or split
        # FMA dots (f32 ieee operands) read their operands through registers: the pipeliner keeps
        # num_stages - 1 A/B buffers, not num_stages (measured).
        delta = -1 if spec.a.dtype == DType.f32 else 0
        # tcgen05 reads tf32 operands K-major only: a TMA kernel copies each MN-major one through
        # registers into a double-buffered K-major tile, live with the pipeline and freed with it: the
        # epilogue of a kernel that drains its pipeline reuses it (measured on sm_100; pointer kernels
        # load through registers anyway and need no copy).
        copies = 0
        if target.mma == "tcgen05" and spec.a.dtype == DType.tf32 and opt.tma:
            copies = 2 * sum(size for major, size in ((spec.a.major, t.m * t.k * 4),
                                                      (spec.b.major, t.k * b_tile_columns(spec) * 4))
                             if major == "mn")
        # Layout-conversion scratch beside the pipeline, one region reused (the largest sizes it):
        # - an FMA dot reads A K-major and B N-major: a TMA kernel transposes an operand stored the
        #   other way through one tile of scratch;
        # - on sm_90 a persistent TMA kernel converts a residual with rows of 1 KB or more into the
        #   accumulator's layout a quarter tile at a time beside the live pipeline;
        # - a flattened loop converts its epilogue's values beside it: a subtiled TMA store the whole
        #   output tile, a pointer store its output (at most 32 KB), any residual (sm_90: up to a whole
        #   tile, sm_100: a quarter).
        scratch = 0
        if spec.a.dtype == DType.f32 and opt.tma:
            scratch = max(t.m * t.k * 4 if spec.a.major == "mn" else 0,
                          t.k * b_box_columns(spec) * 4 if spec.b.major == "k" else 0)
        if flat and tma_store and opt.epilogue_subtile:
            scratch = max(scratch, tile_bytes)
        if not tma_store:  # (the recompute GEMM's epilogue knobs: training.py)
            scratch = max(scratch, prestore_scratch(spec, flat, min(FLAT_STORE_SCRATCH, tile_bytes)))
        # Conversions after the K loop go through scratch over the drained pipeline buffers (measured: a
        # conversion of more than 128 KB goes in pieces of 128 KB):
        # - an sm_90 pointer kernel converts a residual with rows of 1 KB or more through a whole tile;
        # - swap_ab transposes the BLOCK_N x BLOCK_M accumulator back.
        drained = 0
        for size in residuals:
            if flat and opt.tma:
                scratch = max(scratch, t.m * t.n * size // (1 if target.mma == "wgmma" else 4))
            elif target.mma == "wgmma" and t.n * size >= 1024:
                if persistent_tma and not split and not opt.swap_ab:
                    scratch = max(scratch, t.m * t.n * size // 4)
                elif not opt.tma:
                    drained = max(drained, min(CONVERSION_PIECE, t.m * t.n * size))
        if opt.swap_ab:
            drained = max(drained, min(CONVERSION_PIECE, t.m * t.n * spec.accumulator.bytes))
        return MemoryBudget("SMEM", gpu.smem_per_block, 0, ab_stage_bytes(spec), ab_stages, epi,
                            epilogue_overlaps_ab=overlaps, extra_bytes=scratch, extra_label="layout scratch",
                            ab_buffers_delta=delta, loop_bytes=copies, loop_label="tf32 K-major copies",
                            drained_bytes=drained)

    def tma_boxes(self, spec: GemmSpec, target: TargetInfo) -> tuple[RuleBox, ...]:
        """The descriptors' boxes as the TMA rules see them (the same boxes the module builds)."""
        if target.gpu is None:
            return ()
        return tuple(RuleBox(side.upper() if side != "out" else "out", *block, dtype.bytes, (side,))
                     for side, (dtype, _, _, block, *_) in _box_layout(spec).items())

    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        return {f"triton/{spec.name}.py": list(targets)}

    # One kernel source serves every target of the module: these fields shape it (constexpr blocks, the
    # descriptors' boxes, the loop), so its targets' effective configs must agree on them. Warps and
    # pipeline depth are per compute capability (CONFIGS) and may differ.
    shared_config: tuple[tuple[str, ...], ...] = (
        ("tile",), ("schedule",), ("triton", "tma"), ("triton", "epilogue_subtile"), ("triton", "flatten"),
        ("triton", "swap_ab"))
    # A size-selected variant launches the same kernel with its own constexprs (tile, group_m), warps
    # and stages; these fields change the kernel's code, so a variant keeps the target's (swap_ab is a
    # constexpr, SWAP_AB, like split_k: a variant may set its own).
    renders_variants = True  # the launcher selects a variant (check's CFG003 refuses them elsewhere)
    renders_split_k = True  # schedule.split_k: one launch, partials reduced in the kernel (SPK001 elsewhere)
    renders_gated = True  # a gated epilogue: B's 2N columns into N outputs (EPI001 elsewhere, EPI002 its limits)
    renders_training = True  # a `training` backward (training.py in this package; TRN001 elsewhere)
    renders_gated_training = True  # a gated epilogue's too (G = [dgate, dup] in the forward's layout)
    renders_chain_training = True  # scale, residual, clamp, cast, bias along m, an fp8 forward's (training.py)
    variant_shared_config: tuple[tuple[str, ...], ...] = (
        ("schedule", "persistent"), ("schedule", "raster"), ("triton", "tma"), ("triton", "epilogue_subtile"),
        ("triton", "flatten"))

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> TritonPlan:
        return plan_triton(loaded, targets, resolved)

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        from specgen.render.env import environment
        from specgen.render.specs import spec_import

        (rel,) = self.modules(loaded.spec, targets)
        context = triton_context(self.plan(loaded, targets, resolved))
        context["spec_import"] = spec_import(rel, loaded.name) if shared_spec else None
        return {rel: environment(KIND).get_template("triton/gemm.py.jinja").render(context)}

    def tune_space(self, spec: GemmSpec, target: TargetInfo, when: When | None = None) -> dict[str, tuple[object, ...]]:
        """The knobs `specgen tune` sweeps on a Triton target and their ranges (check prunes what cannot
        fit): block shape, warps, pipeline depth. 8-bit operands take deeper K blocks (tl.dot's K is 32 bytes)."""
        narrow = spec.a.dtype.bytes == 1
        return {"tile.m": (64, 128), "tile.n": (64, 128, 256), "tile.k": (128, 256) if narrow else (64, 128),
                "triton.num_warps": (4, 8), "pipeline.ab_stages": ("auto", 3, 4)}


DESIGN = TritonGemm()


@dataclass(frozen=True)
class TritonArchConfig:
    arch: str
    compute_capability: int
    num_warps: int
    ab_stages: int  # the launch's num_stages
    smem_bytes: int  # the plan's estimate; `specgen compile` prints it beside the compiler's figure
    smem_breakdown: str
    acc_registers: int


@dataclass(frozen=True, kw_only=True)
class TritonVariant(ConfigRow):
    """A size-selected variant: its bounds (the launcher's integer compares), constexprs (the tile is
    BLOCK_M, BLOCK_N, BLOCK_K), the TMA boxes its descriptors use and its launch config (warps, pipeline
    depth) per compute capability."""

    boxes: dict[str, list[int]]  # "a", "b", "out" -> the descriptor's box (TMA kernels)
    configs: list[TritonArchConfig]
    split_k: int = 1  # programs per output tile along K (schedule.split_k)
    split_atomic: bool = False  # schedule.split_k_reduction = "atomic"
    swap_ab: bool = False  # triton.swap_ab: the MMA computes the tile transposed
    desc_types: dict[str, str] | None = None  # descriptor parameter -> its Triton type with this box


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter. The kernel def, the launch tuple, the specialization key, SIGNATURE,
    do_not_specialize, the constexprs and the AOT compile all loop over the plan's list of these."""

    name: str
    type: str  # Triton's signature spelling: "*bf16", "i32", "fp32", "tensordesc<...>", "constexpr"
    role: str  # operand, epilogue, workspace, size, stride, device, constexpr
    # aligned: pointers 16-byte aligned, integers keyed (and specialized) on % 16 and == 1;
    # wide: may pass 2**31 (batch strides and counts): never specialized, keyed on its width;
    # none: never specialized nor keyed (the SM count: one compile serves every GPU); constexpr.
    specialization: str
    # How the launcher fills it: "name" (the local `var`), "stride" (`var[dim]`), "float" (float(var)),
    # "num_sms" (the device's SM count); constexprs: "constant" (module constant `var`), "fast_math".
    value: str
    var: str = ""
    dim: int = 0

    @property
    def keyed(self) -> bool:
        return self.specialization in ("aligned", "wide") and self.type in ("i32", "i64")


@dataclass(frozen=True)
class StepArg:
    name: str  # the launcher's argument
    param: str  # the kernel's parameter
    role: str  # vec_m, vec_n, matrix, scalar
    axis: str  # "m" / "n" for vectors ("" otherwise)
    dtype: str  # triton.language dtype name
    needs_f32: bool  # loaded values convert to f32


@dataclass(frozen=True)
class EpilogueStep:
    """One epilogue op with everything the template spells: argument names, axis, constants, dtypes."""

    op: str  # gated, bias, scale, activation, residual, clamp, cast
    describe: str
    args: list[StepArg]
    fn: str = ""  # activation, gated
    value: float | None = None  # scale by a constant
    beta: float = 1.0  # residual
    min: float | None = None  # clamp
    max: float | None = None
    dtype: str = ""  # cast: triton.language dtype to round through


@dataclass(frozen=True)
class TmaBox:
    """A TMA descriptor: the host builds it, SIGNATURE types it, the kernel loads or stores through it."""

    param: str  # kernel parameter (a_desc)
    tensor: str  # launcher tensor (a)
    shape: list[str]  # global extents in descriptor order (batch first when batched)
    strides: list[tuple[str, int]]  # (stride tuple, dim) for every dim but the contiguous one
    block: list[int]  # the box, in elements, descriptor order (1 for the batch dim)
    block_names: list[str]  # the kernel's view of the box (no batch dim)
    coords: list[str]  # the kernel's load/store coordinates (pid_b first when batched)
    transposed: bool  # the kernel transposes the loaded tile (MN-major A, K-major B)
    type: str  # Triton signature type
    elem_bytes: int
    # a gated epilogue's halves layout: the up tile's coordinates (the gate tile's at N + off_n), else None
    up_coords: list[str] | None = None


@dataclass(frozen=True)
class TritonPlan(GemmModule):
    kernel_name: str
    acc_dtype: str  # triton.language name of the accumulator
    input_precision: str | None  # "tf32" / "ieee" for 32-bit operands, None otherwise
    tile_m: int  # the default config's tile (the kernel's BLOCK_M, BLOCK_N, BLOCK_K)
    tile_n: int
    tile_k: int
    group_m: int
    raster_along_n: bool
    persistent: bool
    tma: bool
    epilogue_subtile: bool
    flatten: bool
    configs: list[TritonArchConfig]
    spec_json: dict[str, object]
    params: list[KernelParam]  # the kernel ABI, in declaration order
    steps: list[EpilogueStep]  # the epilogue, resolved
    boxes: dict[str, TmaBox]  # "a", "b", "out" -> its TMA descriptor (empty for pointer kernels)
    variants: list[TritonVariant]  # size-selected, tried in order before the default config
    split_k: int = 1  # the default config's split-K (schedule.split_k)
    split_atomic: bool = False  # its reduction: float atomics instead of the ordered sum
    # any config of the module splits K: the kernel takes the workspace and SPLIT_K constexprs
    split: bool = False
    swap_ab: bool = False  # the default config's triton.swap_ab
    swap: bool = False  # any config of the module swaps A and B: the kernel takes the SWAP_AB constexpr
    # a gated epilogue (epilogue[0], `gated`): B has 2N columns, gate and up (keyword-only: GemmModule's ClassVar
    # default would otherwise place it before kernel_name)
    gated: bool = field(default=False, kw_only=True)
    gated_layout: str = ""  # where B's gate and up columns sit: "halves" or "interleaved"
    # the backward (spec: training; training.py in this package), None for a forward-only kernel
    training: TrainingPlan | None = field(default=None, kw_only=True)


def _spellings(dtype: DType) -> dict[str, str]:
    return {"torch": dtype.info.torch, "triton": TL_DTYPES[dtype]}


def _tensor_arg(name: str, role: str, dtype: DType, doc: str) -> Arg:
    return make_arg(name, role, dtype, doc, _spellings)


def plan_triton(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> TritonPlan:
    # The effective config (per_target applied): its shared_config fields agree across the module's
    # targets (check's CFG001), so the first target's shapes the kernel.
    spec = resolved[str(targets[0])].spec
    configs = [_arch_config(resolved[str(t)]) for t in targets]
    variants = []
    for i, first in enumerate(resolved[str(targets[0])].variants):  # CFG001: the same bounds on every target
        vs, when = first.spec, first.when
        assert when is not None
        variants.append(TritonVariant(
            index=i, when=str(when), bounds=list(when.bounds().items()),
            tile_m=vs.tile.m, tile_n=vs.tile.n, tile_k=vs.tile.k, group_m=vs.schedule.group_m,
            boxes={side: b.block for side, b in _boxes(vs).items()},
            configs=[_arch_config(resolved[str(t)].variants[i]) for t in targets],
            split_k=vs.schedule.split_k, split_atomic=vs.schedule.split_k_reduction == "atomic",
            swap_ab=vs.triton.swap_ab, desc_types={b.param: b.type for b in _boxes(vs).values()}))
    split = spec.schedule.split_k > 1 or any(v.split_k > 1 for v in variants)
    swap = spec.triton.swap_ab or any(v.swap_ab for v in variants)
    gated = gated_op(spec.epilogue)
    if gated is not None and (split or swap):  # check refuses it (EPI002); a render that skipped check must not emit
        raise ValueError(f"{spec.name}: the Triton kernel's gated epilogue takes no split-K or swap_ab config (EPI002)")
    b_cols = "2N" if gated is not None else "N"
    a_dt = spec.a.dtype
    precision = ("tf32" if a_dt == DType.tf32 else "ieee") if a_dt.bytes == 4 else None
    batch_dims = "(batch, M, K)" if spec.batch else "(M, K)"
    return TritonPlan(
        **plan_header(loaded),
        kernel_name=f"_{spec.name}_kernel",
        a=_tensor_arg("a", "a", a_dt, f"{batch_dims} {a_dt}, {spec.a.major}-major"),
        b=_tensor_arg("b", "b", spec.b.dtype, f"{f'(batch, K, {b_cols})' if spec.batch else f'(K, {b_cols})'} "
                      f"{spec.b.dtype}, {spec.b.major}-major" + _gated_doc(gated)),
        out=_tensor_arg("out", "out", spec.out.dtype, f"{'(batch, M, N)' if spec.batch else '(M, N)'} {spec.out.dtype}, "
                        "row-major"),
        a_major=spec.a.major,
        b_major=spec.b.major,
        acc_dtype=TL_DTYPES[spec.accumulator],
        input_precision=precision,
        batch=spec.batch,
        tile_m=spec.tile.m,
        tile_n=spec.tile.n,
        tile_k=spec.tile.k,
        group_m=spec.schedule.group_m,
        raster_along_n=spec.schedule.raster == "along_n",
        persistent=spec.schedule.persistent,
        tma=spec.triton.tma,
        epilogue_subtile=spec.triton.epilogue_subtile,
        flatten=spec.schedule.persistent and spec.triton.flatten,
        args=[_tensor_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        configs=configs,
        spec_json=loaded.spec.model_dump(mode="json"),
        params=_params(spec, split, swap),
        steps=_steps(spec),
        boxes=_boxes(spec),
        variants=variants,
        split_k=spec.schedule.split_k,
        split_atomic=spec.schedule.split_k_reduction == "atomic",
        split=split,
        swap_ab=spec.triton.swap_ab,
        swap=swap,
        gated=gated is not None,
        gated_layout=gated.layout if gated is not None else "",
        training=plan_training(spec.name, spec, targets, resolved, TL_DTYPES, lambda d: d.info.torch),
    )


def _gated_doc(op: object) -> str:
    """What B's 2N columns hold, for the module docstring (empty without a gated epilogue)."""
    if op is None:
        return ""
    return (": gate columns [0, N), up columns [N, 2N)" if op.layout == "halves"  # type: ignore[attr-defined]
            else ": column 2j is gate j, 2j + 1 up j")


def _arch_config(r: Resolved) -> TritonArchConfig:
    """One compute capability's launch config: the numbers `check` proved (stages and budget come
    from one place)."""
    assert r.info.backend is Backend.triton and r.info.compute_capability is not None
    return TritonArchConfig(r.target.arch, r.info.compute_capability, r.spec.triton.num_warps, r.ab_stages,
                            r.budget.total, r.budget.breakdown(), r.acc_registers)


# One box, batch aside: its dtype, the tensor's dims and the block's constexprs, the block (outer, inner), the
# block's offsets, the stride dim that is not 1, and whether the block is stored transposed.
BoxLayout = tuple[DType, tuple[str, str], tuple[str, str], tuple[int, int], tuple[str, str], int, bool]


def _box_layout(spec: GemmSpec) -> dict[str, BoxLayout]:
    """Each TMA descriptor's box (none without `triton.tma`): what `_boxes` renders and the TMA rules check."""
    if not spec.triton.tma:
        return {}
    t, a, b = spec.tile, spec.a, spec.b
    out_n = t.n // 2 if spec.triton.epilogue_subtile else t.n
    op = gated_op(spec.epilogue)
    if op is not None:  # B is (K, 2N): an interleaved tile's 2 BLOCK_N columns in one box, from column 2 off_n
        bn, wide = b_box_columns(spec), op.layout == "interleaved"
        bn_name, bn_off = ("2 * BLOCK_N", "2 * off_n") if wide else ("BLOCK_N", "off_n")
        b_layout = ((b.dtype, ("N2", "K"), (bn_name, "BLOCK_K"), (bn, t.k), (bn_off, "off_k"), -1, True)
                    if b.major == "k" else
                    (b.dtype, ("K", "N2"), ("BLOCK_K", bn_name), (t.k, bn), ("off_k", bn_off), -2, False))
    return {
        "a": (a.dtype, ("M", "K"), ("BLOCK_M", "BLOCK_K"), (t.m, t.k), ("off_m", "off_k"), -2, False)
        if a.major == "k" else
        (a.dtype, ("K", "M"), ("BLOCK_K", "BLOCK_M"), (t.k, t.m), ("off_k", "off_m"), -1, True),
        "b": b_layout if op is not None else
        (b.dtype, ("N", "K"), ("BLOCK_N", "BLOCK_K"), (t.n, t.k), ("off_n", "off_k"), -1, True)
        if b.major == "k" else
        (b.dtype, ("K", "N"), ("BLOCK_K", "BLOCK_N"), (t.k, t.n), ("off_k", "off_n"), -2, False),
        **({} if spec.triton.backward_role in ("forward_pre", "recompute") else {  # those store by pointers
            "out": (spec.out.dtype, ("M", "N"), ("BLOCK_M", "BLOCK_N"), (t.m, out_n), ("off_m", "off_n"), -2, False)}),
    }


def _boxes(spec: GemmSpec) -> dict[str, TmaBox]:
    batch = spec.batch
    lead_shape, lead_block, lead_coord = (["batch"], [1], ["pid_b"]) if batch else ([], [], [])
    op = gated_op(spec.epilogue)
    halves = op is not None and op.layout == "halves"  # the up tile sits N columns after the gate tile

    def box(side: str, dtype: DType, dims: tuple[str, str], blocks: tuple[str, str], block: tuple[int, int],
            coords: tuple[str, str], stride_dim: int, transposed: bool) -> TmaBox:
        var = "s" + side[0]
        full = [*lead_block, *block]
        up = [*lead_coord, *("N + off_n" if c == "off_n" else c for c in coords)] if halves and side == "b" else None
        return TmaBox(f"{side}_desc", side, [*lead_shape, *dims], ([(var, 0)] if batch else []) + [(var, stride_dim)],
                      full, list(blocks), [*lead_coord, *coords], transposed,
                      f"tensordesc<{TRITON_SIG[dtype]}[{', '.join(map(str, full))}]>", dtype.bytes, up)

    return {side: box(side, *layout) for side, layout in _box_layout(spec).items()}


def _params(spec: GemmSpec, split: bool = False, swap: bool = False) -> list[KernelParam]:
    """The kernel's parameters in declaration order, each with its type, role and specialization. A
    module with split-K configs adds the f32 partial-sum workspace, the per-tile arrival counters and
    the SPLIT_K / SPLIT_K_ATOMIC constexprs; one with swap_ab configs the SWAP_AB constexpr."""
    batch, persistent = spec.batch, spec.schedule.persistent
    ps: list[KernelParam] = []
    if spec.triton.tma:
        ps += [KernelParam(b.param, b.type, "operand", "aligned", "name", b.param) for b in _boxes(spec).values()]
    else:
        for side, dt in (("a", spec.a.dtype), ("b", spec.b.dtype), ("out", spec.out.dtype)):
            ps.append(KernelParam(f"{side}_ptr", "*" + TRITON_SIG[dt], "operand", "aligned", "name", side))
    for arg in spec.runtime_args():
        if arg.shape == "scalar":
            ps.append(KernelParam(arg.name, "fp32", "epilogue", "none", "float", arg.name))
        else:
            ps.append(KernelParam(f"{arg.name}_ptr", "*" + TRITON_SIG[arg.dtype], "epilogue", "aligned", "name",
                                  arg.name))
    if split:
        ps += [KernelParam("ws_ptr", "*fp32", "workspace", "aligned", "name", "ws"),
               KernelParam("counts_ptr", "*i32", "workspace", "aligned", "name", "counts")]
    ps += [KernelParam(d, "i32", "size", "aligned", "name", d) for d in ("M", "N", "K")]
    if batch and persistent:
        ps.append(KernelParam("BATCH", "i32", "size", "wide", "name", "batch"))

    if not spec.triton.tma:
        # each pointer operand's leading stride (the other is 1: its major mode)
        if batch:
            ps.append(KernelParam("stride_ab", "i32", "stride", "wide", "stride", "sa", 0))
        ps.append(KernelParam("stride_a", "i32", "stride", "aligned", "stride", "sa", -2 if spec.a.major == "k" else -1))
        if batch:
            ps.append(KernelParam("stride_bb", "i32", "stride", "wide", "stride", "sb", 0))
        ps.append(KernelParam("stride_b", "i32", "stride", "aligned", "stride", "sb", -1 if spec.b.major == "k" else -2))
        if batch:
            ps.append(KernelParam("stride_ob", "i32", "stride", "wide", "stride", "so", 0))
        ps.append(KernelParam("stride_om", "i32", "stride", "aligned", "stride", "so", -2))
    for arg in spec.runtime_args():
        if arg.shape == "matrix":
            if batch:
                ps.append(KernelParam(f"stride_{arg.name}b", "i32", "stride", "wide", "stride", f"s_{arg.name}", 0))
            ps.append(KernelParam(f"stride_{arg.name}m", "i32", "stride", "aligned", "stride", f"s_{arg.name}", -2))
    if persistent:  # a device fact, not a problem size: one compile serves every GPU
        ps.append(KernelParam("NUM_SMS", "i32", "device", "none", "num_sms"))
    ps += [KernelParam(c, "constexpr", "constexpr", "constexpr", "constant", c)
           for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", *(("SPLIT_K", "SPLIT_K_ATOMIC") if split else ()),
                     *(("SWAP_AB",) if swap else ()))]
    ps.append(KernelParam("FAST_MATH", "constexpr", "constexpr", "constexpr", "fast_math"))
    return ps


def _steps(spec: GemmSpec) -> list[EpilogueStep]:
    from specgen.render.env import describe_op

    steps = []
    for op in spec.epilogue:
        args = [StepArg(a.name, a.name if a.shape == "scalar" else f"{a.name}_ptr", a.shape,
                        a.shape[-1] if a.shape in ("vec_m", "vec_n") else "", TL_DTYPES[a.dtype],
                        a.dtype != DType.f32 or op.op == "bias")
                for a in op.runtime_args()]
        data = op.model_dump(mode="json")
        steps.append(EpilogueStep(
            op=op.op, describe=describe_op(data), args=args, fn=data.get("fn", ""),
            value=data.get("value"), beta=data.get("beta", 1.0), min=data.get("min"), max=data.get("max"),
            dtype=TL_DTYPES[DType(data["dtype"])] if op.op == "cast" else "",
        ))
    return steps


def metadata(p: TritonPlan) -> dict[str, object]:
    """The module's one metadata dict (rendered as METADATA)."""
    return module_identity(p.name, p.spec_file, p.spec_hash, p.specgen_version, [f"triton:{c.arch}" for c in p.configs]) | {
        "plan": {c.compute_capability: {"num_warps": c.num_warps, "num_stages": c.ab_stages, "smem_bytes": c.smem_bytes,
                                        "smem_breakdown": c.smem_breakdown, "acc_registers": c.acc_registers}
                 for c in p.configs},
        "parameters": [[q.name, q.type, q.specialization] for q in p.params],
    } | ({"split_k": p.split_k, "split_k_reduction": "atomic" if p.split_atomic else "deterministic"}
         if p.split_k > 1 else {}) | ({"swap_ab": True} if p.swap_ab else {}) | ({"variants": [variant_metadata(v) for v in p.variants]} if p.variants else {}) | (
        {"training": training_metadata(p.training)} if p.training is not None else {})


def training_metadata(t: TrainingPlan) -> dict[str, object]:
    """The backward's METADATA entry: what the forward saves and each backward kernel's tile and launch config."""
    return {"save": t.save, "kernels": {
        role: {"tile": [k.tile_p, k.tile_q, k.tile_r], "group_m": k.group_m,
               "plan": {c.compute_capability: {"num_warps": c.num_warps, "num_stages": c.ab_stages, "smem_bytes": c.smem_bytes}
                        for c in k.configs}}
        for role, k in t.kernels.items()}}


def variant_metadata(v: TritonVariant) -> dict[str, object]:
    """A size-selected variant's METADATA entry (the compile hook reads it; the grouped Triton design's too)."""
    return {"when": {f"{dim.lower()}_max": n for dim, n in v.bounds}, "tile": [v.tile_m, v.tile_n, v.tile_k],
            "group_m": v.group_m,
            **({"split_k": v.split_k, "split_k_reduction": "atomic" if v.split_atomic else "deterministic"}
               if v.split_k > 1 else {}),
            **({"swap_ab": True} if v.swap_ab else {}),
            # the TMA descriptors' types with this variant's boxes (the kernel's signature differs there)
            **({"descriptors": v.desc_types} if v.desc_types else {}),
            "plan": {c.compute_capability: {"num_warps": c.num_warps, "num_stages": c.ab_stages,
                                            "smem_bytes": c.smem_bytes, "acc_registers": c.acc_registers}
                     for c in v.configs}}


def uses_tanh(steps: list[EpilogueStep], training: bool = False) -> bool:
    """Whether an epilogue's formulas call `_tanh` (the module then renders it: epilogue.jinja `tanh_function`),
    or, in a module with a backward, their derivatives do."""
    return any(s.op in ("activation", "gated") and ("tanh" in FORMULAS[s.fn].expr.kinds()
                                                    or (training and "tanh" in DERIVATIVES[s.fn].expr.kinds()))
               for s in steps)


def triton_context(p: TritonPlan) -> dict[str, object]:
    return {
        "p": p,
        "metadata": metadata(p),
        "no_specialize": [q.name for q in p.params if q.specialization in ("wide", "none") and q.type == "i32"],
        "op_schema": [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, *p.args)],
        "uses_tanh": uses_tanh(p.steps, p.training is not None),
        # the backward op's arguments: the output's gradient, the forward's, the saved pre (None: not saved), and
        # which gradients autograd needs (spec: training)
        "backward_schema": [["grad", "Tensor"], *([a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, *p.args)), ["pre", "Tensor?"],
                            *([f"need_{a.name}", "bool"] for a in (p.a, p.b, *p.args))] if p.training else [],
    }


