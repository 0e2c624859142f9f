"""The Pallas TPU design's backward (a spec's `training` section, specgen/kinds/gemm/training.py): the plan of the
kernels templates/gemm/pallas/backward_tpu.jinja renders into the TPU module, behind a `jax.custom_vjp` on its
JAX entry.

Every backward GEMM is one Pallas kernel C (P, Q) = X @ Y, X stored (P, R) (`k`: the reduction last) or (R, P)
(`mn`), Y stored (Q, R) (`k`) or (R, Q) (`mn`): the transposed operands of dgrad and wgrad are read as they
lie, through their BlockSpecs and the dot's dimension numbers (no transpose is materialized). Each gradient
comes back in its operand's stored layout, so where that layout is the transpose of the companion's logical
(M, K) / (K, N) the kernel computes the transposed product (dA^T = B G^T for an mn-major A, dB^T = G^T A for
a K-major B) with the companion's tile read transposed (P takes tile.n, Q tile.m). G = dOut * act'(pre) is
formed once: by the GEMM that recomputes pre (save = "recompute", its epilogue) or by `grad_cols`, a Pallas
pass over dOut and the saved pre (save = "preact"), which also sums the bias gradient (G's column sum; with
recompute it sums the stored G). The companions' configs are the ones check resolved (the first TPU target's:
CFG001 keeps a module's TPU targets in step on what shapes it).

A gated epilogue (halves: PAL013): pre and G are (2, M, N) arrays, gate plane [0] and up plane [1] (a TPU block
takes the half as a leading, squeezed dim). B (2N, K) K-major is viewed (2, N, K) without a copy: forward_pre and
recompute read a gate and an up block of B a step into two accumulators (the gated forward's loads); dgrad reduces
over both halves (its grid's reduction axis walks 2 x cdiv(N, block) steps, the half the step over the blocks of
one), wgrad writes dB's (2, N, K) view (its P axis walks 2 x cdiv(N, block) blocks): the plain GEMMs over 2N, each
half's N tail masked or dropped as one array's. B (K, 2N) N-major is read as stored, its up half at block
j + N / block, which needs N a multiple of every block along N (`n_blocks`; the entry checks it): dgrad's B blocks
along 2N are its folded steps, wgrad writes dB (K, 2N) over G's two planes. G = [(dOut * up) * act'(gate),
dOut * act(gate)]; the bias (after the gate) has dOut's column sum.

An fp8 forward (A and B fp8_e4m3 / fp8_e5m2, the rowwise scales first, then [bias], [activation] or both, a 16-bit
output; session 32) has the dense Triton design's backward in the output's dtype (OPERAND), the gradients of the
dequantized operands A scale_a[:, None] and B scale_b[None, :]: pre = scale_a scale_b (A @ B) + bias is an fp8 GEMM
multiplying the 8-bit blocks as the forward does (the scales and bias in its epilogue), stored in the output's dtype
by forward_pre (preact) or in f32 by recompute (which then reads no dOut: the companion's f32 output, as the Triton
design's); grad_cols always runs, over dOut (and pre), forming U = dOut * act'(pre) (or dOut) in f32 and storing
G_b = U scale_b (dgrad's X) and G_a = scale_a U (wgrad's) in OPERAND, dbias U's column sum; dgrad and wgrad read B and
A as stored (8-bit) and convert each block to OPERAND in the kernel (exact for both formats), so check takes them as
GEMMs of the output's dtype and PAL015 asks the 8-bit A block wgrad reads for its sublane tile. The scales get no
gradient (None: jax.grad gives zeros).

The other chains (scale, residual, clamp, cast, bias along m, in any order; 16- or 32-bit operands; session
33) have the dense Triton design's meaning (`chain`, `start`): pre is the value before op `start` (value_index: the
first op whose backward reads its input; -1: none, no pre GEMM). forward_pre applies epilogue[:start] to the
accumulator, stores pre (the output's dtype), applies the rest and stores out; recompute applies epilogue[:start] and
stores pre in f32 (the companion's output; it reads no dOut). The chain's backward is jnp code shared with the Mosaic
GPU module (templates/gemm/pallas/chain_backward.jinja), fused by XLA: it replays the chain from pre and walks it
backward from dOut, forming G (the operands' dtype) and every argument's gradient (a residual's beta dOut at it, a
vector's row or column sums in f32, a runtime scalar none); dgrad and wgrad are the plain backward GEMMs over G.

A batched forward (`batch = true`, every chain above; session 33, an fp8 forward's since session 34) has the Triton
design's meaning with this plan unchanged: templates/gemm/pallas/batch_backward.jinja (shared with the Mosaic GPU module)
runs each backward GEMM for every batch entry in one pallas_call of the kernels above, the batch folded into its grid's
first axis (`_every_entry`, `_entries`; session 34, where session 33 launched it per entry in a lax.map), and the
columns pass / chain pass over the batches' rows as one (batch M, N) matrix (an fp8 forward's scale_a, shared by the
batches, tiled to it).

VMEM (`pre_role_vmem`, `grad_cols_vmem`; PAL014 checks both): VMEM001 checks each companion as the GEMM it is (the
pre GEMM's with the chain its kernel applies: the bias's, the scales' and the arguments' blocks, a recompute's dOut);
the pre GEMM's pallas_call holds more (pre stored beside out, gated both planes; a gated recompute G's up plane), and
grad_cols has blocks of its own at the forward's tile.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from specgen.kinds.gemm.designs.pallas.tpu_vmem import TPU_ARGS_DOUBLE_BUFFERED, TPU_LANES, TPU_TILE_ROW_BYTES
from specgen.kinds.gemm.training import (
    SaveModes,  # noqa: I001
    activation_fn,
    chain_refusal,
    legacy_chain,
    value_index,
)
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.models import Target


@dataclass(frozen=True)
class TpuBackwardGemm:
    """One backward GEMM of the TPU module: C (P, Q) = X @ Y, and how the call binds it."""

    role: str  # forward_pre, recompute, dgrad, wgrad
    x: str  # the bwd rule's array read as X ("a", "b", "g")
    x_major: str  # "k": X stored (P, R); "mn": (R, P)
    y: str
    y_major: str  # "k": Y stored (Q, R); "mn": (R, Q)
    p: str  # the problem symbols P, Q, R ("m", "n", "k")
    q: str
    r: str
    block_p: int
    block_q: int
    block_r: int
    out_jnp: str  # C's dtype (dA's is A's, dB's B's; forward_pre's the output's; recompute's G the operands')
    transposed: bool  # C is the transpose of the companion's logical output (the gradient's stored layout)
    vmem_bytes: int = 0  # the companion's VMEM figure (VMEM001's; forward_pre / recompute add their second M x N
    # block), the most over the module's TPU targets
    vmem_limit_bytes: int = 0  # the scoped limit its pallas_call requests (the figure + 25%, capped at VMEM)


@dataclass(frozen=True)
class TpuTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    bias: str  # the bias argument's name ("" without one)
    bias_jnp: str
    operand_jnp: str  # A's and B's dtype: G is stored in it, and the dots multiply in it
    gemms: dict[str, TpuBackwardGemm]  # by role
    gated: bool = False  # a gated epilogue (halves): pre and G are (2, M, N), dgrad / wgrad over B's 2N rows
    cols_vmem_bytes: int = 0  # grad_cols's VMEM figure at the forward's blocks (0: no columns pass)
    cols_vmem_limit_bytes: int = 0  # the scoped limit its pallas_call requests (the figure + 25%, capped at VMEM)
    # an fp8 forward (rowwise scales first): the backward in the output's dtype (operand_jnp), w.r.t. the dequantized
    # operands; grad_cols forms G_b = U scale_b and G_a = scale_a U, dgrad / wgrad convert the 8-bit blocks
    fp8: bool = False
    # the other chains (module docstring): pre is the value before epilogue[start] (-1: no op reads a value, no pre
    # GEMM); `pre_args` the runtime arguments of the ops before it (recompute's inputs beside A and B)
    chain: bool = False
    start: int = -1
    pre_args: tuple[str, ...] = ()

    @property
    def grad_cols(self) -> bool:
        """Whether the backward runs the columns pass (to form G from the saved pre, or to sum dbias; an fp8
        forward's always: G_b and G_a; the other chains never: their pass is jnp)."""
        return (self.stores_pre or bool(self.bias) or self.fp8) and not self.chain

    @property
    def cols_reads_pre(self) -> bool:
        """Whether the columns pass reads pre (preact's saved one; an fp8 forward's recomputed f32 one too)."""
        return self.stores_pre or (self.fp8 and self.recomputes)

    @property
    def n_blocks(self) -> list[int]:
        """Each backward GEMM's block along N (a gated N-major B's up half is read at block j + N / block)."""
        return [{"p": g.block_p, "q": g.block_q, "r": g.block_r}["pqr"[(g.p, g.q, g.r).index("n")]]
                for g in self.gemms.values()]


def oriented(role: str, spec: object, tile: object, jnp: dict) -> TpuBackwardGemm:
    """The role's GEMM in the orientation its output's stored layout takes. An fp8 forward's: dA and dB in the
    output's dtype, dgrad's G is G_b (`g_b`), wgrad's G_a (`g_a`), recompute's output pre in f32."""
    a, b = spec.a.major, spec.b.major  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    flip = {"k": "mn", "mn": "k"}
    t = (tile.m, tile.n, tile.k)  # type: ignore[attr-defined]
    if role in ("forward_pre", "recompute"):  # pre (M, N) = A (M, K) @ B (K, N), as the forward
        f32 = fp8 or not legacy_chain(spec.epilogue)  # type: ignore[attr-defined]  # recompute's pre in f32 (no G)
        out = spec.out.dtype if role == "forward_pre" else DType.f32 if f32 else spec.a.dtype  # type: ignore[attr-defined]
        return TpuBackwardGemm(role, "a", a, "b", b, "m", "n", "k", *t, jnp[out], False)
    da, db = (jnp[spec.out.dtype],) * 2 if fp8 else (jnp[spec.a.dtype], jnp[spec.b.dtype])  # type: ignore[attr-defined]
    g = ("g_b" if role == "dgrad" else "g_a") if fp8 else "g"
    if role == "dgrad":
        if a == "k":  # dA (M, K) = G (M, N) @ B^T: B (N, K) stored k-major is (R, Q)
            return TpuBackwardGemm(role, g, "k", "b", flip[b], "m", "k", "n", *t, da, False)
        # dA^T (K, M) = B (K, N) @ G^T (N, M): G (M, N) is (Q, R)
        return TpuBackwardGemm(role, "b", flip[b], g, "k", "k", "m", "n", t[1], t[0], t[2], da, True)
    if b == "mn":  # dB (K, N) = A^T (K, M) @ G (M, N)
        return TpuBackwardGemm(role, "a", flip[a], g, "mn", "k", "n", "m", *t, db, False)
    # dB^T (N, K) = G^T (N, M) @ A (M, K): G (M, N) is (R, P); A k-major (M, K) is (R, Q)
    return TpuBackwardGemm(role, g, "mn", "a", flip[a], "n", "k", "m", t[1], t[0], t[2], db, True)


def pre_role_vmem(spec: object, role: str, tile: object) -> int:
    """VMEM the pre GEMM's pallas_call (forward_pre, recompute) holds beyond its companion's figure (VMEM001's: the
    GEMM whose output is out, G or pre, its chain the one its kernel applies, specgen/kinds/gemm/training.py
    `pre_epilogue`, so its figure counts every argument's block and a recompute's dOut, a residual's): forward_pre's pre
    (gated: its gate and up planes) in the output's dtype, a gated recompute's G up plane (the operands' dtype), each
    double-buffered."""
    gated = gated_op(spec.epilogue) is not None  # type: ignore[attr-defined]
    block = tile.m * tile.n  # type: ignore[attr-defined]
    if role == "forward_pre":
        return TPU_ARGS_DOUBLE_BUFFERED * block * (2 if gated else 1) * spec.out.dtype.bytes  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    return TPU_ARGS_DOUBLE_BUFFERED * block * spec.a.dtype.bytes if gated and not fp8 else 0  # type: ignore[attr-defined]


def grad_cols_vmem(spec: object) -> int:
    """grad_cols's VMEM at the forward's (tile.m, tile.n) blocks, 0 where the backward runs no columns pass: its
    double-buffered inputs (preact: dOut and pre, gated its two planes; else the one it sums: G with recompute, dOut
    without an activation or with a gated op) and G (preact; gated two planes), the bias gradient's (1, tile.n)
    block and its f32 sum (one (8, 128) tile per 128 columns)."""
    gated = gated_op(spec.epilogue) is not None  # type: ignore[attr-defined]
    act, save, t = activation_fn(spec.epilogue), spec.training.save, spec.tile  # type: ignore[attr-defined]
    if not spec.a.dtype.is_fp8 and not legacy_chain(spec.epilogue):  # type: ignore[attr-defined]
        return 0  # the other chains' backward pass is jnp (XLA's fusion), not a Pallas kernel
    bias = any(op.op == "bias" for op in spec.epilogue)  # type: ignore[attr-defined]
    out, g, halves = spec.out.dtype.bytes, spec.a.dtype.bytes, 2 if gated else 1  # type: ignore[attr-defined]
    if spec.a.dtype.is_fp8:  # type: ignore[attr-defined]
        # dOut, pre (preact: the output's dtype; recompute: f32) and the scales' blocks in, G_b and G_a out
        pre = (out if save == "preact" else 4) if act else 0
        blocks = out + pre + 2 * out
        vectors = TPU_ARGS_DOUBLE_BUFFERED * (t.m * TPU_LANES * 4 + TPU_TILE_ROW_BYTES * t.n)
    elif act and save == "preact":
        blocks = out + halves * (out + g)
    elif bias:
        blocks = g if act and not gated else out
    else:
        return 0
    sums = (TPU_ARGS_DOUBLE_BUFFERED + 1) * TPU_TILE_ROW_BYTES * t.n if bias else 0
    return TPU_ARGS_DOUBLE_BUFFERED * t.m * t.n * blocks + sums + (vectors if spec.a.dtype.is_fp8 else 0)  # type: ignore[attr-defined]


def plan_tpu_training(spec: object, targets: list[Target], resolved: dict[str, Resolved],
                      jnp: dict, headroom: float) -> TpuTrainingPlan | None:
    """The backward's plan from the companions check resolved on the first TPU target (None without `training`)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    if gated is not None and gated.layout != "halves":
        # check refuses it (PAL013); a render that skipped check must not emit a wrong backward
        raise ValueError(f"{spec.name}: the Pallas TPU backward reads a gated B as halves (PAL013)")  # type: ignore[attr-defined]
    if why := chain_refusal(spec, fp8=True, chains=True, batch=True, batch_fp8=True):  # scale, residual, clamp, cast, bias along m: the Triton design's (TRN001)
        raise ValueError(f"{spec.name}: {why}: the Pallas TPU backward renders none (TRN001)")  # type: ignore[attr-defined]
    first = resolved[str(targets[0])]
    gemms = {}
    for i, c in enumerate(first.companions):
        budgets = [resolved[str(target)].companions[i].budget for target in targets]
        need, cap = max(b.total for b in budgets), min(b.capacity for b in budgets)
        if c.companion in ("forward_pre", "recompute"):  # the blocks the companion's GEMM has not (PAL014)
            need += pre_role_vmem(spec, c.companion, c.spec.tile)  # type: ignore[attr-defined]
        gemms[c.companion] = dataclasses.replace(oriented(c.companion, spec, c.spec.tile, jnp),  # type: ignore[attr-defined]
                                                 vmem_bytes=need, vmem_limit_bytes=min(cap, math.ceil(need * headroom)))
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    chain = not fp8 and not legacy_chain(spec.epilogue)  # type: ignore[attr-defined]
    start = value_index(spec.epilogue) if chain else -1  # type: ignore[attr-defined]
    cols = grad_cols_vmem(spec)
    cap = min(resolved[str(target)].budget.capacity for target in targets)
    return TpuTrainingPlan(save=t.save, act=activation_fn(spec.epilogue),  # type: ignore[attr-defined]
                           bias=bias.name if bias is not None and not chain else "",
                           bias_jnp=jnp[bias.dtype] if bias is not None and not chain else "",
                           operand_jnp=jnp[spec.out.dtype if fp8 else spec.a.dtype], gemms=gemms,  # type: ignore[attr-defined]
                           gated=gated is not None, fp8=fp8, chain=chain, start=start,
                           pre_args=tuple(a.name for op in spec.epilogue[:max(start, 0)] for a in op.runtime_args()),  # type: ignore[attr-defined]
                           cols_vmem_bytes=cols, cols_vmem_limit_bytes=min(cap, math.ceil(cols * headroom)))


def training_metadata(t: TpuTrainingPlan) -> dict[str, object]:
    """The backward's METADATA: the save mode and each GEMM's blocks (P, Q, R) and VMEM figure."""
    return {"save": t.save, "activation": t.act, **({"gated": "halves"} if t.gated else {}),
            **({"fp8_backward_dtype": t.operand_jnp} if t.fp8 else {}),  # the dequantized operands' gradients
            **({"chain_pre_before": t.start} if t.chain else {}),  # the other chains: pre is the value before op start
            **({"grad_cols_vmem_bytes": t.cols_vmem_bytes} if t.cols_vmem_bytes else {}),
            "gemms": {role: {"blocks": [g.block_p, g.block_q, g.block_r], "x_major": g.x_major, "y_major": g.y_major,
                             "transposed": g.transposed, "vmem_bytes": g.vmem_bytes}
                      for role, g in t.gemms.items()}}
