"""The Triton design's backward (a spec's `training` section, specgen/kinds/gemm/training.py): the plan of
the kernels templates/gemm/triton/backward.jinja renders beside the forward.

Every backward GEMM is X (P, R) @ Y (R, Q) -> C (P, Q), one program per output tile in grouped order, in two
forms: TMA loads where the device has TMA and both operands lie with a unit stride and 16-byte aligned bases and
leading strides (either major: a column-major operand is read as boxes of its transpose), else pointer loads that
take any strides (a view, autograd's expanded gradient of a sum). G = dOut * act'(pre) is formed once and stored
(M, N) in the operand dtype, so the GEMMs multiply stored matrices (forming it as a tile loads recomputed each
element once per output tile of the other side: ~32x on a 4096 x 14336 x 4096 layer, 0.32x eager on the H200):
- forward_pre (save = "preact", with an activation): the forward that also stores pre = A @ B + bias;
- recompute (save = "recompute", with an activation): G = dOut * act'(A @ B + bias), stored by its epilogue;
- grad_cols (a streaming pass, one program per column block walking every row): forms G from the saved pre
  (preact) and sums the bias gradient, G's column sum, in a fixed order (no atomics); with recompute or without
  an activation it only sums (G, or dOut itself);
- dgrad: dA (M, K) = G (M, N) @ B^T (N, K); wgrad: dB (K, N) = A^T (K, M) @ G (M, N).
With a gated epilogue (act(gate) * up, then at most a bias) pre and G have B's 2N columns in the forward's layout
(halves or interleaved): forward_pre and recompute read a gate and an up tile of B per output tile, as the forward
does, and store pre's (or G's: dgate = dOut * up * act'(gate), dup = dOut * act(gate)) two tiles; grad_cols forms
G from dOut and the saved gate and up, the bias gradient being dOut's column sum; dgrad and wgrad are the same
GEMMs over 2N.
The other chains (`chain`: scale, residual, clamp, cast, bias along m, any order; an fp8 forward's, its rowwise
dequantization first) keep dgrad and wgrad and replace grad_cols by the chain pass (templates/gemm/triton/
backward_chain.jinja): forward_pre stores (recompute stores in f32) pre, the value before the first op whose backward
reads a value (`start`), and one streaming kernel replays the chain from pre, walks it backward and forms G and every
argument's gradient (a residual's matrix; a vector's column or row sums as f32 partials added in order by the sums
kernel). An fp8 forward's G is two (G scale_b for dgrad, scale_a G for wgrad) in the output's dtype; dgrad and wgrad
convert the fp8 operand's tiles to it in registers.
Their configs are the companions' that check resolved (tile, warps, stages per compute capability), so the
numbers the launcher uses are the ones the rules passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.kinds.gemm.training import (
    DOUT,
    SaveModes,  # noqa: I001
    activation_fn,
    legacy_chain,
    value_index,
)
from specgen.resolved import Resolved
from specgen.spec.epilogue import gated_op
from specgen.spec.models import Target

ROLES = ("forward_pre", "recompute", "dgrad", "wgrad")

# The recompute GEMM's shipped epilogue knobs (templates/gemm/triton/recompute.jinja; docs/training/triton.md, "The
# recompute GEMM's epilogue knobs"), the fastest of gpu/bench_backward_epilogue.py --variants on the H200
# (2026-11-29): a plain activation's in 4 column subtiles with dOut and G by TMA and gelu_tanh's derivative factored
# (128 x 256: 704.5 us at 4096 x 14336 x 4096, 711.1 with the table's derivative; the 256 x 128 tile's whole-tile
# pointer epilogue 735.2); a gated one's in 2 (128 x 128 over 3 stages: 1408.4 us, 4 subtiles 1441.2), its loop not
# flattened (flattened: 1.4-2.2x the time).
RECOMPUTE_KNOBS: dict[str, object] = {"EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True, "DOUT_EARLY": False,
                                      "GELU_FACTORED": True}
GATED_RECOMPUTE_KNOBS: dict[str, object] = {"EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True, "DOUT_EARLY": False,
                                            "GELU_FACTORED": False, "FLATTEN": False}


def recompute_knobs(spec: object) -> dict[str, object] | None:
    """The epilogue knobs of the recompute GEMM that forms G (its companion reads dOut, its chain's residual DOUT):
    RECOMPUTE_KNOBS or GATED_RECOMPUTE_KNOBS where they apply (unbatched, a plain or a halves-gated activation), {}
    where the kernel forms G over the whole tile (batched, interleaved), None where it forms no G."""
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    reads_dout = any(op.op == "residual" and op.name == DOUT for op in spec.epilogue)  # type: ignore[attr-defined]
    if not reads_dout or spec.triton.backward_role != "recompute":  # type: ignore[attr-defined]
        return None
    if getattr(spec, "batch", False) or (gated is not None and gated.layout != "halves"):
        return {}
    return GATED_RECOMPUTE_KNOBS if gated is not None else RECOMPUTE_KNOBS


def prestore_scratch(spec: object, flat: bool, pointer: int) -> int:
    """SMEM beside the pipeline of a kernel that stores by pointers (forward_pre, recompute, a forward's pointer
    form): `pointer`, a flattened loop's store conversion, where `flat`. The recompute GEMM with the epilogue knobs
    (`recompute_knobs`; measured on sm_90 with triton 3.6 and 3.9 to 64 B): a TMA box (BLOCK_P x BLOCK_Q /
    EPI_SPLIT, rows of 16 bytes or more) for G where G_TMA, and for dOut where DOUT_TMA and the loop is flattened
    (else a drained stage holds it), or the pointer conversion / EPI_SPLIT where flattened."""
    t = spec.tile  # type: ignore[attr-defined]
    knobs = recompute_knobs(spec)
    if not knobs:
        return pointer if flat else 0
    flat = bool(knobs.get("FLATTEN", True))
    sub, size = t.n // int(knobs["EPI_SPLIT"]), spec.out.dtype.bytes  # type: ignore[attr-defined, call-overload]
    box = t.m * sub * size if sub * size >= 16 else 0
    dout = (box if box and knobs["DOUT_TMA"] else pointer // int(knobs["EPI_SPLIT"])) if flat else 0  # type: ignore[call-overload]
    return dout + (box if knobs["G_TMA"] else 0)


@dataclass(frozen=True)
class BackwardConfig:
    arch: str
    compute_capability: int
    num_warps: int
    ab_stages: int
    smem_bytes: int
    smem_breakdown: str


@dataclass(frozen=True)
class BackwardKernel:
    role: str  # forward_pre, recompute, dgrad, wgrad
    kernel_name: str
    tile_p: int  # BLOCK_P (output rows), BLOCK_Q (output columns), BLOCK_R (reduction)
    tile_q: int
    tile_r: int
    group_m: int
    configs: list[BackwardConfig]


@dataclass(frozen=True)
class ChainOp:
    """One op of a chain the backward replays and differentiates (`TrainingPlan.chain`), its runtime arguments'
    names and its constants."""

    op: str  # bias, scale, activation, residual, clamp, cast
    axis: str = ""  # bias: "m" or "n"; scale: "" (scalar), "m" (row), "n" (col), "mn" (rowcol)
    names: tuple[str, ...] = ()  # its runtime arguments (rowcol: scale_a, scale_b)
    value: float | None = None  # a scale's constant
    beta: float = 1.0  # a residual's
    lo: float | None = None  # a clamp's bounds
    hi: float | None = None
    fn: str = ""  # an activation's formula name
    dtype: str = ""  # a cast's (triton) or a residual's (torch) dtype
    grad: bool = True  # its arguments get gradients (false: an fp8 forward's dequantization scales)


@dataclass(frozen=True)
class TrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    bias: str  # the bias argument's name ("" without one)
    bias_torch: str  # its torch dtype name
    bias_triton: str
    operand_torch: str  # A's and B's torch dtype (G rounds to it for the dots)
    operand_triton: str
    out_torch: str
    out_triton: str
    kernels: dict[str, BackwardKernel]  # by role
    gated: str  # a gated epilogue's layout ("halves", "interleaved"; "" without one): act is its fn
    grad_cols_kernel: str  # G's columns: G formed from the saved pre, the bias gradient summed
    # The other chains (scale, residual, clamp, cast, bias along m, any order; an fp8 forward's), empty for the
    # ones above: the backward replays the chain from pre (the value before op `start`, the first whose backward
    # reads a value; -1: none) in one pass (`chain_kernel`) that forms G and every argument's gradient.
    chain: tuple[ChainOp, ...] = ()
    start: int = -1
    chain_kernel: str = ""
    fp8: bool = False  # fp8 operands: G * scale_b (dgrad) and scale_a * G (wgrad), in the output's dtype
    # batch = true: A (batch, M, K), B (batch, K, N), out, pre, G and a residual (batch, M, N), vectors shared; each
    # GEMM runs per batch (its matrices' strides lead with a batch stride), the streaming passes over batch x rows
    batch: bool = False

    @property
    def ext(self) -> bool:
        return bool(self.chain)

    @property
    def stores_pre(self) -> bool:
        return (self.start >= 0 if self.chain else bool(self.act)) and self.save == "preact"

    @property
    def recomputes(self) -> bool:
        return (self.start >= 0 if self.chain else bool(self.act)) and self.save == "recompute"

    @property
    def epilogue_knobs(self) -> bool:
        """Whether the recompute GEMM's TMA form takes the epilogue knobs (templates/gemm/triton/recompute.jinja:
        EPI_SPLIT, DOUT_TMA, G_TMA, DOUT_EARLY, GELU_FACTORED, gated FLATTEN; the module's RECOMPUTE_EPILOGUE):
        unbatched, no other chain, a plain or a halves-gated activation."""
        return self.recomputes and not self.chain and not self.batch and self.gated in ("", "halves")

    @property
    def recompute_knobs(self) -> dict[str, object]:
        """The shipped epilogue knobs (the module's RECOMPUTE_EPILOGUE) where `epilogue_knobs`."""
        return dict(GATED_RECOMPUTE_KNOBS if self.gated else RECOMPUTE_KNOBS)

    @property
    def forms_g(self) -> bool:
        """Whether G differs from dOut (a scale, an activation, a clamp or a cast, which rounds it; fp8's two G's)."""
        return self.fp8 or any(op.op in ("scale", "activation", "clamp", "cast") for op in self.chain)

    @staticmethod
    def in_args(ops: tuple[ChainOp, ...]) -> list[str]:
        """The runtime arguments `ops` read, in order."""
        return [n for op in ops for n in op.names]

    @staticmethod
    def in_params(ops: tuple[ChainOp, ...]) -> list[str]:
        """The kernel parameters `ops` read: vectors and matrices as `<name>_ptr`, a runtime scalar as itself."""
        return [n if op.op == "scale" and not op.axis else f"{n}_ptr" for op in ops for n in op.names]

    def in_strides(self, ops: tuple[ChainOp, ...]) -> list[str]:
        """A residual's row and column strides (batch, row and column where batched), each (after the kernel's own
        strides)."""
        return [f"stride_{op.names[0]}{d}" for op in ops if op.op == "residual" for d in self.dims]

    @property
    def dims(self) -> str:
        """The suffixes of a matrix's strides in the kernels' parameters: batch (where batched), rows, columns."""
        return "bmn" if self.batch else "mn"

    @property
    def out_params(self) -> list[str]:
        """The chain kernel's gradient outputs (`d<name>_ptr`), then their strides (a partial's row stride; a
        residual's two)."""
        kinds = self.grad_kinds
        return [f"d{n}_ptr" for n, _ in kinds] + [f"stride_d{n}{d}" for n, kind in kinds
                                                  for d in (tuple(self.dims) if kind == "matrix" else ("",))]

    @property
    def need_flags(self) -> tuple[str, ...]:
        return tuple(f"need_{n}" for n in self.grad_args)

    @property
    def grad_kinds(self) -> tuple[tuple[str, str], ...]:
        """(argument, how the chain pass writes its gradient): "cols" (an (N,) vector: column sums), "rows" (an (M,)
        one: row sums) or "matrix" (a residual's)."""
        out = []
        for op in self.chain:
            for n in op.names:
                if n in self.grad_args:
                    along_m = op.axis == "m" or (op.axis == "mn" and n == op.names[0])
                    out.append((n, "matrix" if op.op == "residual" else "rows" if along_m else "cols"))
        return tuple(out)

    @property
    def grad_args(self) -> tuple[str, ...]:
        """The chain's arguments that get a gradient (tensors), in the op's order."""
        return tuple(n for op in self.chain if op.grad and op.op in ("bias", "residual", "scale") for n in op.names
                     if not (op.op == "scale" and op.axis == ""))


def plan_training(name: str, spec: object, targets: list[Target], resolved: dict[str, Resolved],
                  tl_dtypes: dict, torch_name) -> TrainingPlan | None:
    """The backward's plan from the companions check resolved on each target (None without `training`)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    kernels: dict[str, BackwardKernel] = {}
    # the backward's operand dtype (G's, the dots'): the operands', or an fp8 forward's output dtype
    g_dtype = spec.out.dtype if spec.a.dtype.is_fp8 else spec.a.dtype  # type: ignore[attr-defined]
    first = resolved[str(targets[0])]
    for i, c in enumerate(first.companions):
        cs = c.spec
        configs = []
        for target in targets:
            r = resolved[str(target)].companions[i]
            assert r.companion == c.companion and r.info.compute_capability is not None
            configs.append(BackwardConfig(target.arch, r.info.compute_capability, r.spec.triton.num_warps,  # type: ignore[attr-defined]
                                          r.ab_stages, r.budget.total, r.budget.breakdown()))
        kernels[c.companion] = BackwardKernel(c.companion, f"_{name}_{c.companion}_kernel", cs.tile.m, cs.tile.n,  # type: ignore[attr-defined]
                                              cs.tile.k, cs.schedule.group_m, configs)  # type: ignore[attr-defined]
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    chain = () if legacy_chain(spec.epilogue) and not fp8 else _chain(spec, tl_dtypes, torch_name)  # type: ignore[attr-defined]
    if chain:
        bias = None  # the chain's arguments: chain_kernel's
    return TrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue),  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", bias_torch=torch_name(bias.dtype) if bias is not None else "",
        bias_triton=tl_dtypes[bias.dtype] if bias is not None else "",
        operand_torch=torch_name(g_dtype), operand_triton=tl_dtypes[g_dtype],
        out_torch=torch_name(spec.out.dtype), out_triton=tl_dtypes[spec.out.dtype],  # type: ignore[attr-defined]
        kernels=kernels, gated=gated.layout if gated is not None else "", grad_cols_kernel=f"_{name}_grad_cols_kernel",
        chain=chain, start=value_index(spec.epilogue, fp8) if chain else -1,  # type: ignore[attr-defined]
        chain_kernel=f"_{name}_chain_kernel" if chain else "", fp8=fp8, batch=spec.batch)  # type: ignore[attr-defined]


def _chain(spec: object, tl_dtypes: dict, torch_name) -> tuple[ChainOp, ...]:
    """The spec's epilogue as ChainOps (an fp8 forward's first op, its dequantization, with no gradient)."""
    out = []
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    for i, op in enumerate(spec.epilogue):  # type: ignore[attr-defined]
        names = tuple(a.name for a in op.runtime_args())
        if op.op == "bias":
            out.append(ChainOp("bias", op.along, names))
        elif op.op == "scale":
            axis = {"scalar": "", "row": "m", "col": "n", "rowcol": "mn"}[op.by]
            out.append(ChainOp("scale", axis, names, value=op.value, grad=not (fp8 and i == 0)))
        elif op.op == "activation":
            out.append(ChainOp("activation", fn=op.fn))
        elif op.op == "residual":
            out.append(ChainOp("residual", names=names, beta=op.beta, dtype=torch_name(op.dtype)))
        elif op.op == "clamp":
            out.append(ChainOp("clamp", lo=op.min, hi=op.max))
        else:
            out.append(ChainOp("cast", dtype=tl_dtypes[op.dtype]))
    return tuple(out)
