"""The CuTe sm90 design's backward (a spec's `training` section, specgen/kinds/gemm/training.py): the plan of the
kernels templates/gemm/cute/training.jinja (its columns pass: grad_cols.jinja) renders into the CuTe module, behind
`torch.library.register_autograd` on its torch op.

Every backward GEMM is this design's own kernel (templates/gemm/cute/gemm_sm90.py.jinja: TMA loads, wgmma,
the persistent schedule, the epilogue through SMEM and TMA stores) traced with the role's `Config` row: the
companion's tile, stages and warpgroups as check resolved them, the role's operand majors (wgmma reads K- or
MN-major 16-bit operands from SMEM, so the transposed operands of dgrad and wgrad are read as they are stored)
and the role's epilogue: `forward_pre` stores pre = acc + bias beside out = act(pre) (predicated element stores
of this thread's fragment, as a residual is read), `recompute` reads dOut as a matrix operand and stores
G = dOut * act'(acc + bias), dgrad and wgrad store the plain product. Each gradient comes back in its operand's
stored layout: where that is the transpose of the logical gradient (dA of an mn-major A, dB of a K-major B, the
nn.Linear weight) the kernel computes the transposed product (dA^T = B G^T, dB^T = G^T A) with the companion's
tile, as the Pallas TPU plan orients its GEMMs (designs/pallas/training.py). G's columns (G from dOut and the
saved pre, and the bias gradient) are one small SIMT CuTe kernel (`grad_cols`), its row bands' f32 sums added
in band order by a second kernel: no atomics, the same bits every run.

The companions are resolved and ruled as GEMMs of their own (SMEM001 on "backward dgrad"); the transposed
orientation has the same stage bytes (tile.m x tile.k + tile.n x tile.k of one dtype), epilogue subtile and
accumulator registers as the companion it orients.

A gated epilogue (act(gate) * up, then at most a bias; `gated` the layout): pre and G have B's 2N columns in the
forward's layout. forward_pre and recompute are the gated kernel (a gate and an up accumulator; their companions keep
the gated op, so SMEM counts the up tiles) storing pre's, or G's dgate = (dOut * up) * act'(gate) and dup = dOut *
act(gate), into their (M, N, 2) pairs: forward_pre's halves pre through SMEM by TMA, two boxes a subtile beside out's
(its companion keeps three times the forward's epilogue stages; pre staged with each half padded to 16 bytes where N
is no multiple of 8), the rest element by element (a TMA box cannot hold every other element, nor start G's halves
up column N elements on unless N is a multiple of 8); dgrad and wgrad run the kernel ungated (`Config.gated`), plain GEMMs over 2N; the columns
pass forms G from pre with dOut's column sums (the bias after the gate), 8 output columns a thread in 16-byte loads and
stores (the up vector N columns on with halves, a 16-element run split in registers with interleaved; an N off whole
16 bytes through padded copies).

An fp8 forward (A and B fp8, rowwise scales first, then [bias], [activation] or both; `chain_refusal(spec, fp8=True)`),
the Triton design's meaning (docs/training/cute_sm90.md, "An fp8 forward on CuTe sm90"): forward_pre is the fp8 kernel storing pre
(after the scales and the bias) beside out, recompute the fp8 kernel storing pre as its output (U's column sums, the
bias gradient, need U itself: an epilogue forming G would sum it across CTAs only with atomics); one columns kernel
(`grad_cols_fp8`) reads dOut and pre and stores G_b = U scale_b and G_a = scale_a U in the output's dtype with U's band
sums; dgrad (G_b, B's copy) and wgrad (A's copy, G_a) run the kernel on 16-bit operands (`Config.operands` by role) over
copies the backward makes with `.to()` (exact for e4m3 and e5m2; wgmma reads no 8-bit MN-major operand).

The other chains (`chain`: scale, residual, clamp, cast, bias along m, in any order; session 33), the Triton design's
meaning (its plan's ChainOps; docs/training/triton.md, "Other chains"): forward_pre applies the ops before `start` (the first
whose backward reads a value, `value_index`), stores pre (the output's dtype) beside out = the rest of the chain;
recompute is the kernel storing that same pre as its output, in the output's dtype (the value forward_pre stores, so
both save modes differentiate the same rounded pre; the kernel's epilogue SMEM and TMA store are one dtype, the
companion is ruled as the Triton chain's f32 pre GEMM: conservative); one SIMT CuTe kernel (templates/gemm/cute/
chain_pass.jinja) replays the chain from pre, walks it backward from dOut and forms G and each argument's gradient
(a residual's beta dOut, a vector's column sums as band partials or row sums as column-run partials, f32, added in
order by the columns pass's bands kernel: no atomics); dgrad and wgrad as above over G (dOut where no op changes it).

A batched forward (`batch = true`, 16-bit; session 33), the Triton design's meaning (docs/training/batched.md, "A batched GEMM on
CuTe sm90"): every GEMM above per batch over (batch, rows, cols) views (the kernel walks their L mode as the forward's
does; `.mT` the transposes), the columns pass and the chain pass over the batches' rows as one (batch M, N) matrix (a
vector along m repeated per batch, a row gradient's partials added over the runs and batches in order); the plan is
the unbatched one. An fp8 one's too (session 34; templates/gemm/cute/fp8_backward.jinja): the scales shared by the
batches, the fp8 columns pass over the batch x M rows with scale_a repeated for each batch, dgrad and wgrad per batch
over 16-bit copies (`chain_refusal(batch=True, batch_fp8=True)`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specgen.envelope.budget import MemoryBudget
from specgen.kinds.gemm.designs.triton.training import ChainOp, TrainingPlan, _chain
from specgen.kinds.gemm.training import (
    DOUT,
    SaveModes,  # noqa: I001
    activation_fn,
    chain_refusal,
    legacy_chain,
    value_index,
)
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op

# What this design's backward covers beyond the shared section's checks (TRN001 says so elsewhere): 16-bit operands
# of one dtype (wgmma's MN-major operands are 16-bit only) and an output of that dtype (pre and G are stored in it).
CUTE_TRAINING_DTYPES = (DType.f16, DType.bf16)
FLIP = {"k": "mn", "mn": "k"}


@dataclass(frozen=True)
class CuteBackwardGemm:
    """One backward GEMM: C (P, Q) = X (P, R) @ Y (R, Q), run by the module's kernel with `config`."""

    role: str  # forward_pre, recompute, dgrad, wgrad
    x: str  # what the backward passes as the kernel's A: "a", "b", "g", their transposes "a.t()", ...
    y: str
    a_major: str  # X's major in the kernel's terms ("k": R contiguous)
    b_major: str  # Y's major ("k": R contiguous; Y is B's (K, N))
    transposed: bool  # C is the transpose of the logical gradient (its operand's stored layout)
    config: object  # design.CuteConfig: the companion's resolved tile, stages, warpgroups, SMEM


@dataclass(frozen=True)
class CuteTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    act_op: dict[str, object]  # the activation op (its params, for the formula macros); {} without one
    bias: str  # the bias argument's name ("" without one)
    bias_torch: str
    operand_torch: str  # A's, B's and out's torch dtype (G and pre are stored in it)
    out_torch: str
    gemms: dict[str, CuteBackwardGemm]  # by role
    gated: str = ""  # a gated epilogue's layout ("halves", "interleaved"; "" without one): act is its fn
    # an fp8 forward (rowwise scales first: their arguments' names): dgrad and wgrad over G_b = U scale_b and
    # G_a = scale_a U and 16-bit copies of B and A, in the output's dtype (operand_torch); the scales get no gradient
    fp8: bool = False
    scales: tuple[str, ...] = ()
    start: int = -1  # the op pre is the value before (an fp8 forward's activation, a chain's `value_index`; -1: none)
    # the other chains (scale, residual, clamp, cast, bias along m, any order; empty for the ones above): the Triton
    # plan's ChainOps (a cast's dtype its spec name), replayed and differentiated by the chain pass (chain_pass.jinja)
    chain: tuple[ChainOp, ...] = ()

    # pre stored or recomputed where an op reads a value (a chain's `start`, else the activation), whether G differs
    # from dOut, and how the chain pass writes each gradient ("cols", "rows", "matrix"): the Triton plan's meaning
    stores_pre = TrainingPlan.stores_pre
    recomputes = TrainingPlan.recomputes
    forms_g = TrainingPlan.forms_g
    grad_kinds = TrainingPlan.grad_kinds

    @property
    def replayed(self) -> tuple[str, ...]:
        """The residuals the chain pass reads: those between pre and an op whose backward reads its input."""
        reads = [k for k, op in enumerate(self.chain) if op.op in ("activation", "clamp") or (op.op == "scale" and op.axis)]
        return tuple(op.names[0] for k, op in enumerate(self.chain)
                     if op.op == "residual" and self.start <= k < max(reads, default=-1))

    @property
    def kernels(self) -> list[str]:
        """The backward's kernels, as the module docstring lists them."""
        if self.fp8:
            return [*self.gemms, "grad_cols_fp8", *(["grad_cols_bands"] if self.bias else [])]
        if self.chain:
            return [*self.gemms, "chain_pass", "grad_cols_bands"]
        return [*self.gemms, *(["grad_cols"] if self.stores_pre or self.bias else [])]

    @property
    def configs(self) -> list[object]:
        """Each backward GEMM's config (the module renders ping-pong code where one runs it)."""
        return [g.config for g in self.gemms.values()]

    @property
    def reads_pre(self) -> bool:
        """An fp8 backward's columns pass reads pre (stored by forward_pre, or recomputed): with an activation."""
        return self.fp8 and bool(self.act)

    @property
    def grad_args(self) -> tuple[str, ...]:
        """The chain's arguments that get a gradient (the bias; an fp8 forward's scales none; a chain's tensors, a
        runtime scalar none): the torch side's autograd macro (templates/gemm/torch/training.jinja) reads it for an
        fp8 module or a chain's, whose backward op takes a need flag for each argument."""
        if self.chain:
            return TrainingPlan.grad_args.fget(self)  # type: ignore[attr-defined]
        return (self.bias,) if self.bias else ()


# The recompute epilogue's dOut (act and gated recomputes; session 34): the producer warpgroup's second warp loads its
# (epi_m, epi_n) subtiles by TMA into a ring of SMEM buffers ahead of the consumers (its own full / empty mbarriers),
# the epilogue reads each from SMEM. The ring: as many subtiles as the SMEM the A/B stages leave, DOUT_STAGES[0] at
# least (counted when `auto` picks the A/B depth: the depth drops where two do not fit) and DOUT_STAGES[1] at most.
DOUT_STAGES = (2, 4)


def reads_dout(spec: object) -> bool:
    """Whether a companion is the dense recompute GEMM whose epilogue reads dOut (an act or gated recompute: its chain
    carries dOut as the residual `DOUT`, specgen/kinds/gemm/training.py's `pre_epilogue`; an fp8 forward's and the
    other chains' recompute store pre and read none; the grouped kind's kernel reads it from global memory)."""
    return getattr(spec, "kind", "") == "gemm" and any(
        op.op == "residual" and op.name == DOUT for op in spec.epilogue)  # type: ignore[attr-defined]


def gathered_args(spec: object) -> list:
    """The epilogue's runtime arguments read from global memory at a subtile (the register model's operands): all of
    them but dOut where the SMEM ring holds it (read there a subtile at a time, it is no residual's gathered
    fragment: the model before dOut was counted, session 34, left the ring's kernels spill-free)."""
    return [x for x in spec.runtime_args() if not (x.name == DOUT and reads_dout(spec))]  # type: ignore[attr-defined]


def dout_ring(budget: MemoryBudget, spec: object, subtile_bytes: int, barrier_bytes: int, pad: int,
              pingpong: bool) -> MemoryBudget:
    """The sm90 kernel's SMEM struct (`budget`: design.py's `memory`, `barrier_bytes` its mbarriers before their
    1024-byte alignment, `pad` the static SMEM before it) with the recompute GEMM's dOut ring: 2 mbarriers and a
    1024-aligned subtile a buffer (+ 2 mbarriers ordering the ping-pong warpgroups' turns), as many buffers as the
    room the rest leaves beside the ring's most mbarriers holds, up to DOUT_STAGES[1], at least DOUT_STAGES[0]
    (SMEM001 refuses a config where those do not fit; an `auto` A/B depth is the deepest whose total fits with
    them). Unchanged where the companion reads no dOut."""
    if not reads_dout(spec):
        return budget
    room = budget.capacity - (budget.total - budget.reserve) - pad - _aligned(barrier_bytes + 16 * DOUT_STAGES[1] + 16 * pingpong)
    n = max(DOUT_STAGES[0], min(DOUT_STAGES[1], room // subtile_bytes))
    return ring_of(budget, n, subtile_bytes, barrier_bytes, pad, pingpong)


def ring_of(budget: MemoryBudget, n: int, subtile_bytes: int, barrier_bytes: int, pad: int, pingpong: bool) -> MemoryBudget:
    """The struct `budget` with a dOut ring of n subtile buffers (`dout_ring`'s; unchanged for n = 0): 2 mbarriers and
    a 1024-aligned subtile a buffer, + 2 mbarriers ordering the ping-pong warpgroups' turns."""
    if not n:
        return budget
    return dataclasses.replace(budget, reserve=pad + _aligned(barrier_bytes + 16 * n + 16 * pingpong),
                               extra_bytes=budget.extra_bytes + _aligned(n * subtile_bytes), extra_label="dOut subtiles")


def dout_buffers(budget: MemoryBudget, subtile_bytes: int) -> int:
    """The dOut ring's subtile buffers a budget holds (`dout_ring`'s; 0 without one): the kernel's Config.dout_stages."""
    return budget.extra_bytes // subtile_bytes if budget.extra_label == "dOut subtiles" else 0


def _aligned(n: int) -> int:
    return -(-n // 1024) * 1024  # the struct's buffers (and its mbarriers as a group) start 1024-aligned


def dtype_refusal(spec: object, arch: str) -> str:
    """The CuTe backwards' (sm90, sm100) dtypes: 16-bit operands of one dtype with an output of it (wgmma and tcgen05
    read MN-major operands of 16-bit types only; pre and G are stored in it), or fp8 ones with a 16-bit output."""
    a, b, out = spec.a.dtype, spec.b.dtype, spec.out.dtype  # type: ignore[attr-defined]
    if (a not in CUTE_TRAINING_DTYPES or b != a or out != a) and not (a.is_fp8 and b.is_fp8 and out in CUTE_TRAINING_DTYPES):
        return (f"training: the CuTe {arch} backward takes f16 or bf16 operands with an output of their dtype (pre and G "
                f"are stored in it), or fp8 ones with a bf16 or f16 output; a.dtype = {a.value}, b.dtype = {b.value}, "
                f"out.dtype = {out.value}")
    return ""


def training_refusal(spec: object) -> str:
    """Why this design renders no backward for `spec` ("" where it does): TRN001's message on cute:sm90 (an fp8
    forward's: the section's own checks and `chain_refusal` say what it refuses)."""
    if why := dtype_refusal(spec, "sm90"):
        return why
    if spec.cute.swap_ab:  # type: ignore[attr-defined]
        return "training: the CuTe sm90 backward has no swap_ab forward (cute.swap_ab = true); drop it or `training`"
    if spec.schedule.split_k > 1:  # type: ignore[attr-defined]
        return (f"training: the CuTe sm90 backward has no split-K forward (schedule.split_k = "
                f"{spec.schedule.split_k}); drop it or `training`")  # type: ignore[attr-defined]
    return ""


def oriented(role: str, spec: object) -> tuple[str, str, str, str, bool]:
    """(X, Y, X's major, Y's major, transposed) of the role's GEMM in the orientation its output's stored layout
    takes (the same choice as the Pallas TPU plan's `oriented`)."""
    a, b = spec.a.major, spec.b.major  # type: ignore[attr-defined]
    if role in ("forward_pre", "recompute"):  # pre (M, N) = A (M, K) @ B (K, N), as the forward
        return "a", "b", a, b, False
    if role == "dgrad":
        if a == "k":  # dA (M, K) = G (M, N) @ B^T (N, K)
            return "g", "b.t()", "k", FLIP[b], False
        return "b", "g.t()", FLIP[b], "k", True  # dA^T (K, M) = B (K, N) @ G^T (N, M)
    if b == "mn":  # dB (K, N) = A^T (K, M) @ G (M, N)
        return "a.t()", "g", FLIP[a], "mn", False
    return "g.t()", "a", "mn", FLIP[a], True  # dB^T (N, K) = G^T (N, M) @ A (M, K)


def plan_cute_training(spec: object, r: Resolved, cute_config, torch_name, refusal=None) -> CuteTrainingPlan | None:
    """The backward's plan from the companions check resolved on the module's target (None without `training`):
    each role's config is `cute_config(companion)` (the design's config row: this design's, or the sm100 design's,
    cute_sm100/training.py), `refusal(spec)` what the design refuses (TRN001's message; default: this design's)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    why = refusal(spec) if refusal is not None else training_refusal(spec) or chain_refusal(spec, fp8=True, chains=True, batch=True, batch_fp8=True)
    if why:
        # check refuses these (TRN001); a render that skipped check must not emit a wrong backward
        raise ValueError(f"{spec.name}: {why} (TRN001)")  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    # the other chains: the Triton plan's ops (a cast's and a residual's dtype by spec name), their args the chain's
    chain = () if fp8 or legacy_chain(spec.epilogue) else _chain(spec, {d: d.value for d in DType}, torch_name)  # type: ignore[attr-defined]
    gemms = {}
    for c in r.companions:
        x, y, am, bm, transposed = oriented(c.companion, spec)
        if fp8 and c.companion in FP8_NAMES:  # G_b times B's 16-bit copy (dgrad), A's times G_a (wgrad)
            x, y = (_renamed(v, FP8_NAMES[c.companion]) for v in (x, y))
        if (fp8 or chain) and c.companion == "recompute":
            c = _pre_in_output_dtype(c, spec.out.dtype)  # type: ignore[attr-defined]
        # the forward's persistent schedule (the companion resets the schedule to its group_m; SMEM is the same)
        cfg = dataclasses.replace(cute_config(c), index=None, when="", bounds=[], persistent=spec.schedule.persistent)  # type: ignore[attr-defined]
        gemms[c.companion] = CuteBackwardGemm(c.companion, x, y, am, bm, transposed, cfg)
    act = activation_fn(spec.epilogue)  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    act_op = next((op.model_dump(mode="json") for op in spec.epilogue if op.op in ("activation", "gated")), {})  # type: ignore[attr-defined]
    bias = None if chain else next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    return CuteTrainingPlan(save=t.save, act=act, act_op=act_op, bias=bias.name if bias is not None else "",
                            bias_torch=torch_name(bias.dtype) if bias is not None else "",
                            operand_torch=torch_name(spec.out.dtype if fp8 else spec.a.dtype), out_torch=torch_name(spec.out.dtype),  # type: ignore[attr-defined]
                            gemms=gemms, gated=gated.layout if gated is not None else "", fp8=fp8,
                            scales=tuple(a.name for a in spec.epilogue[0].runtime_args()) if fp8 else (),  # type: ignore[attr-defined]
                            start=value_index(spec.epilogue, fp8) if fp8 or chain else -1, chain=chain)  # type: ignore[attr-defined]


# An fp8 forward's dgrad and wgrad: what they read in place of G and the fp8 operand (the backward's names for them)
FP8_NAMES = {"dgrad": {"g": "g_b", "b": "b16"}, "wgrad": {"g": "g_a", "a": "a16"}}


def _renamed(operand: str, names: dict[str, str]) -> str:
    """"b.t()" as "b16.t()" where names maps b to b16."""
    base, dot, rest = operand.partition(".")
    return names.get(base, base) + dot + rest


def _pre_in_output_dtype(c: Resolved, out: DType) -> Resolved:
    """An fp8 forward's (or another chain's) recompute companion as this design runs it: it stores pre in the output's dtype (the value
    forward_pre stores) where the shared companion is the Triton chain pass's f32 pre (`companions`). Check rules
    that f32 GEMM (its epilogue subtiles twice these bytes: conservative); the plan's SMEM and epilogue subtile are
    this kernel's, at the stages check resolved."""
    spec = c.spec.model_copy(update={"out": c.spec.out.model_copy(update={"dtype": out})})  # type: ignore[attr-defined]
    return dataclasses.replace(c, spec=spec, budget=c.design.budget(spec, c.info, c.ab_stages))


def training_metadata(t: CuteTrainingPlan, fields: tuple[str, ...] = ("mma_warpgroups",)) -> dict[str, object]:
    """The backward's METADATA entry: what the forward saves and each backward GEMM's config (the compile hook
    reads each one's SMEM; `fields`: the design's config fields beside it, the sm100 design's TMEM columns)."""
    return {"save": t.save, "kernels": {
        role: {"tile": [g.config.tile_m, g.config.tile_n, g.config.tile_k], "x": g.x, "y": g.y,  # type: ignore[attr-defined]
               "ab_stages": g.config.ab_stages, "smem_bytes": g.config.smem_bytes,  # type: ignore[attr-defined]
               **{f: getattr(g.config, f) for f in fields}, "transposed": g.transposed}
        for role, g in t.gemms.items()}}


def backward_schema(args: list) -> list[list[str]]:
    """The backward op's arguments: the output's gradient, the forward's, the saved pre (None: not saved), and which
    gradients autograd needs (spec: training), as the Triton design's."""
    return [["grad", "Tensor"], *([a.name, "float" if getattr(a, "role", "") == "scalar" else "Tensor"] for a in args),
            ["pre", "Tensor?"],
            *([f"need_{a.name}", "bool"] for a in args)]
