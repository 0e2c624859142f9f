"""The Mosaic GPU (pallas:gpu_sm90) module's backward (a spec's `training` section, specgen/kinds/gemm/training.py):
the plan of the kernels templates/gemm/pallas/backward_mgpu.jinja renders into the module, behind a `jax.custom_vjp`
on its JAX entry (backward_mgpu_vjp.jinja), as the TPU module's (training.py in this package).

Every backward GEMM is the module's own warp-specialized wgmma kernel (a memory warpgroup's TMA pipeline into
swizzled SMEM, two consumer warpgroups, the epilogue staged in SMEM and stored by TMA) traced with the role's
`Config` row: the companion's tile, stages and swizzles as check resolved them (SMEM001, PAL004-PAL009 on
"backward <role>"), its operand majors (wgmma reads K- or MN-major 16-bit operands from SMEM, so B^T, A^T and G
are read as they are stored) and the role, which picks the epilogue at trace time: `forward_pre` stores
pre = acc + bias (the output's dtype) and out = act(pre) through the same staging slots in turn, `recompute`
TMA-loads dOut into the staging slot (as a residual is read) and stores G = dOut * act'(acc + bias), dgrad and
wgrad store the product. Each GEMM computes the companion's logical product C = X @ Y (its tile, operands and
majors, exactly what was checked); where the gradient's stored layout is C's transpose (dA of an mn-major A,
dB of a K-major B: the nn.Linear weight) the epilogue writes each subtile through the slot's transposed view
(as a `pallas.swap_ab` kernel stores out^T's subtiles), so the TMA store lays down C^T's: the same SMEM, which
needs square epilogue subtiles (tile.m >= 64 and tile.n >= 128: TRN001 says so otherwise).
G and the bias gradient from the saved pre (grad_cols) are one `pl.pallas_call` through Pallas' Triton lowering, not
Mosaic GPU (G = dOut * act'(pre) and its column sums by band in f32); with recompute or no activation the bias
gradient is jnp's column sum.
A gated epilogue (`gated`: its layout): forward_pre and recompute read a gate and an up tile of B's gated view (two
accumulators, as the gated forward) and store pre / G as an (M, 2, N) array, gate at [:, 0], up at [:, 1] (a TMA
store through a squeezed middle index); G in B's layout (preact: grad_cols writes it so; recompute: halves the
array's (M, 2N) reshape, no copy, interleaved its transpose, an XLA copy) feeds dgrad and wgrad, the plain GEMMs over
2N; dbias = dOut's column sum.
An fp8 forward (A and B both e4m3 or both e5m2, B K-major: the forward's PAL004 / MAJ001; the rowwise scales first,
then [bias], [activation] or both; a bf16 or f16 output; session 32): the dense Triton and Pallas TPU designs'
meaning, a backward in the output's dtype giving the gradients of the dequantized operands, the scales none. The pre
GEMM (with an activation) is this kernel over the 8-bit A and B with the scales and the bias in its epilogue (as the
forward applies them): forward_pre stores pre (the output's dtype) and out = act(pre), recompute stores pre in f32
(the companion's output) and reads no dOut. U = dOut * act'(pre) (or dOut), G_b = U scale_b, G_a = scale_a U and dbias
(U's column sum) are jnp (templates/gemm/pallas/fp8_backward.jinja, the grouped Pallas backwards' macro); wgmma takes
no 8-bit operand MN-major nor beside a 16-bit one, so dgrad and wgrad read 16-bit copies of B and A (a jnp astype,
exact), as the grouped Mosaic GPU backward does.
The other chains (scale, residual, clamp, cast, bias along m, any order; session 33): the Pallas TPU
module's meaning and jnp chain pass (templates/gemm/pallas/chain_backward.jinja, `_chain_grads`), dgrad and wgrad
the plain GEMMs over its G. forward_pre applies the ops before pre (`start`) in its epilogue, stores pre, applies
the rest and stores out; recompute applies the ops before pre and stores it in f32 (the companion's output, as the
TPU's and the fp8 forward's recompute), reading no dOut. A residual's subtile is TMA-loaded into the slot of the store
that follows it (one mbarrier a slot, as recompute's dOut; PAL005: the output's dtype), so recompute, whose slots are
f32, takes no residual before pre (`training_refusal`: save = "preact" does); a runtime scalar is read as the forward
reads it (an epi_n-long f32 vector).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from specgen.kinds.gemm.training import SaveModes, activation_fn, chain_refusal, legacy_chain, value_index
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op

# What the Mosaic GPU backward covers beyond the section's checks: 16-bit operands (wgmma reads MN-major operands of
# 16-bit types only, and dgrad and wgrad read B^T and A^T as stored) with an output of their dtype (pre and G are
# staged in the output's SMEM slots and stored in it)
MGPU_TRAINING_DTYPES = (DType.f16, DType.bf16)
FLIP = {"k": "mn", "mn": "k"}
EPI_TILE = 64  # the epilogue subtile's edge (design.MGPU_EPI_TILE): a transposed store needs a square one


@dataclass(frozen=True)
class MgpuBackwardGemm:
    """One backward GEMM: C (P, Q) = X @ Y by the module's kernel with `config`; X stored (P, R) (`x_major` "k")
    or (R, P), Y stored (Q, R) (`y_major` "k") or (R, Q); C stored as its transpose where `transposed`."""

    role: str  # forward_pre, recompute, dgrad, wgrad
    x: str  # the backward's arrays read as X and Y ("a", "b", "g")
    y: str
    x_major: str
    y_major: str
    p: str  # the problem symbols P, Q, R ("m", "n", "k")
    q: str
    r: str
    transposed: bool  # C^T is stored (the gradient's stored layout)
    out_jnp: str  # C's dtype
    config: object  # design.MgpuConfig: the companion's tile, stages, swizzles, SMEM (figure below)
    smem_bytes: int  # the kernel's SMEM: the companion's figure, and recompute's dOut barriers


@dataclass(frozen=True)
class MgpuTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    act_op: dict[str, object]  # the activation op (its params for the formula macros); {} without one
    bias: str  # the bias argument's name ("" without one)
    bias_jnp: str
    operand_jnp: str  # A's, B's and out's dtype: pre and G are stored in it
    gemms: dict[str, MgpuBackwardGemm]  # by role
    gated: str = ""  # a gated epilogue's layout ("halves", "interleaved"); "" without one
    fp8: bool = False  # an fp8 forward: the backward in the output's dtype (operand_jnp), w.r.t. the dequantized operands
    # the other chains (module docstring): pre is the value before epilogue[start] (-1: none); `pre_args` the
    # arguments of the ops before it (recompute's), `residuals` whether a role's epilogue TMA-loads a residual
    chain: bool = False
    start: int = -1
    pre_args: tuple[str, ...] = ()

    @property
    def grad_cols(self) -> bool:
        """Whether the backward runs the columns pass (G from the saved pre, and / or the bias gradient; an fp8
        forward's U, G_b and G_a are jnp, as the other chains' pass)."""
        return (self.stores_pre or bool(self.bias)) and not self.fp8 and not self.chain


def _role_tile(spec: object, role: str) -> object:
    t = spec.training  # type: ignore[attr-defined]
    cfg = {"forward_pre": t.pre, "recompute": t.pre, "dgrad": t.dgrad, "wgrad": t.wgrad}[role]
    return cfg.tile or spec.tile  # type: ignore[attr-defined]


def transposed_roles(spec: object) -> tuple[str, ...]:
    """The GEMMs that store their product's transpose: dgrad for an mn-major A, wgrad for a K-major B."""
    return (*(("dgrad",) if spec.a.major == "mn" else ()), *(("wgrad",) if spec.b.major == "k" else ()))  # type: ignore[attr-defined]


def training_refusal(spec: object) -> str:
    """Why the Mosaic GPU module renders no backward for `spec` ("" where it does): TRN001's message there."""
    a, b, out = spec.a.dtype, spec.b.dtype, spec.out.dtype  # type: ignore[attr-defined]
    fp8 = a.is_fp8 and b.is_fp8 and out in MGPU_TRAINING_DTYPES  # its dgrad and wgrad read 16-bit copies of B and A
    if not fp8 and (a not in MGPU_TRAINING_DTYPES or out != a):
        return (f"training: the Mosaic GPU backward takes f16 or bf16 operands with an output of their dtype, or fp8 A "
                f"and B with an f16 or bf16 output (pre and G are stored in it; wgmma reads the transposed operands "
                f"MN-major, 16-bit only); a.dtype = {a.value}, b.dtype = {b.value}, out.dtype = {out.value}")
    if spec.pallas.swap_ab:  # type: ignore[attr-defined]
        return "training: the Mosaic GPU backward has no swap_ab forward (pallas.swap_ab = true); drop it or `training`"
    if spec.cluster.m * spec.cluster.n > 1:  # type: ignore[attr-defined]
        return (f"training: the Mosaic GPU backward runs no cluster (cluster = {spec.cluster.m}x{spec.cluster.n}); "  # type: ignore[attr-defined]
                "drop it or `training`")
    if spec.training.save == "recompute" and not fp8 and not legacy_chain(spec.epilogue):  # type: ignore[attr-defined]
        start = value_index(spec.epilogue)  # type: ignore[attr-defined]
        if (i := next((i for i, op in enumerate(spec.epilogue[:max(start, 0)]) if op.op == "residual"), None)) is not None:  # type: ignore[attr-defined]
            return (f"training: epilogue[{i}] (residual) comes before epilogue[{start}], whose backward reads its input: "
                    "the Mosaic GPU recompute stores that value in f32 and would stage the residual's subtile in its f32 "
                    "SMEM slot (a residual is staged in the output's dtype); set training.save = \"preact\"")
    for role in transposed_roles(spec):
        tile = _role_tile(spec, role)
        if tile.m < EPI_TILE or tile.n < 2 * EPI_TILE:  # type: ignore[attr-defined]
            return (f"training: the Mosaic GPU {role} stores its product's transpose (the gradient's stored layout) "
                    f"through square {EPI_TILE}x{EPI_TILE} epilogue subtiles, which its {tile.m}x{tile.n} tile does not "  # type: ignore[attr-defined]
                    f"give (tile.m >= {EPI_TILE}, tile.n >= {2 * EPI_TILE}: two warpgroups' halves); set "
                    f"training.{role}.tile")
    return ""


def oriented(role: str, spec: object) -> tuple[str, str, str, str, str, str, str, bool]:
    """(X, Y, X's major, Y's major, P, Q, R, transposed) of the role's GEMM: the companion's product (operands and
    majors as `companions` derives them), stored transposed where the gradient's layout is C's transpose."""
    a, b = spec.a.major, spec.b.major  # type: ignore[attr-defined]
    if role in ("forward_pre", "recompute"):  # pre (M, N) = A @ B, as the forward
        return "a", "b", a, b, "m", "n", "k", False
    if role == "dgrad":  # dA (M, K) = G (M, N) @ B^T: B (N, K) k-major is (R, Q), (K, N) mn-major is (Q, R)
        return "g", "b", "k", FLIP[b], "m", "k", "n", a == "mn"
    # wgrad: dB (K, N) = A^T (K, M) @ G (M, N): A (M, K) k-major is (R, P), (K, M) mn-major (P, R); G is (R, Q)
    return "a", "g", FLIP[a], "mn", "k", "n", "m", b == "k"


def plan_mgpu_training(spec: object, r: Resolved, mgpu_config: Callable[[Resolved], object],
                       jnp: dict) -> MgpuTrainingPlan | None:
    """The backward's plan from the companions check resolved on the Mosaic GPU target (None without `training`)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    if why := training_refusal(spec) or chain_refusal(spec, fp8=True, chains=True, batch=True, batch_fp8=True):
        # check refuses these (TRN001; a batched forward's backward, an fp8 one's too, is the plan's kernels over every
        # batch entry, templates/gemm/pallas/batch_backward.jinja); a render that skipped check must not emit a wrong
        # backward
        raise ValueError(f"{spec.name}: {why} (TRN001)")  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    chain = not fp8 and not legacy_chain(spec.epilogue)  # type: ignore[attr-defined]
    start = value_index(spec.epilogue) if chain else -1  # type: ignore[attr-defined]
    # the ops each pre role's epilogue applies (the other chains): forward_pre all, recompute those before pre
    applies = {"forward_pre": spec.epilogue, "recompute": spec.epilogue[:max(start, 0)]} if chain else {}  # type: ignore[attr-defined]
    gemms = {}
    for c in r.companions:
        x, y, xm, ym, p, q, rr, transposed = oriented(c.companion, spec)
        # the forward's schedule (the companion keeps only its group_m); SMEM is the same
        cfg = dataclasses.replace(mgpu_config(c), index=None, when="", bounds=[],  # type: ignore[type-var]
                                  persistent=spec.schedule.persistent)  # type: ignore[attr-defined]
        # recompute TMA-loads dOut into each staging slot (one mbarrier a slot, as a residual's; an fp8 forward's
        # recompute stores pre and reads no dOut), as forward_pre and recompute load the other chains' residuals: the
        # companion's chain (`pre_epilogue`) holds dOut and those residuals, so its SMEM counts their barriers
        dtype = c.spec.out.dtype if fp8 or chain else {"forward_pre": spec.out.dtype, "recompute": spec.a.dtype,  # type: ignore[attr-defined]
                                              "dgrad": spec.a.dtype, "wgrad": spec.b.dtype}[c.companion]  # type: ignore[attr-defined]
        gemms[c.companion] = MgpuBackwardGemm(c.companion, x, y, xm, ym, p, q, rr, transposed, jnp[dtype], cfg,
                                              cfg.smem_bytes)  # type: ignore[attr-defined]
        if gemms[c.companion].smem_bytes > c.budget.capacity:  # check refuses it (SMEM001); a render that skipped check
            raise ValueError(f"{spec.name}: the Mosaic GPU {c.companion} needs {gemms[c.companion].smem_bytes} B of SMEM "  # type: ignore[attr-defined]
                             f"(its dOut or residual barriers among them), past {c.budget.capacity} (SMEM001): set "
                             f"training.{'pre' if c.companion in ('forward_pre', 'recompute') else c.companion}")
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    act_op = next((op.model_dump(mode="json") for op in spec.epilogue if op.op in ("activation", "gated")), {})  # type: ignore[attr-defined]
    return MgpuTrainingPlan(save=t.save, act=activation_fn(spec.epilogue), act_op=act_op,  # type: ignore[attr-defined]
                            bias=bias.name if bias is not None and not chain else "",
                            bias_jnp=jnp[bias.dtype] if bias is not None and not chain else "",
                            operand_jnp=jnp[spec.out.dtype if fp8 else spec.a.dtype], gemms=gemms,  # type: ignore[attr-defined]
                            gated=gated.layout if gated is not None else "", fp8=fp8, chain=chain, start=start,
                            pre_args=tuple(a.name for op in applies.get("recompute", []) for a in op.runtime_args()))


def mgpu_training_metadata(t: MgpuTrainingPlan) -> dict[str, object]:
    """The backward's METADATA entry: the save mode and each GEMM's tile, majors, orientation and SMEM."""
    return {"save": t.save, "activation": t.act, **({"gated": t.gated} if t.gated else {}),
            **({"fp8_backward_dtype": t.operand_jnp} if t.fp8 else {}),
            **({"chain_pre_before": t.start} if t.chain else {}), "gemms": {
        role: {"tile": [g.config.tile_m, g.config.tile_n, g.config.tile_k], "stages": g.config.ab_stages,  # type: ignore[attr-defined]
               "x": g.x, "y": g.y, "x_major": g.x_major, "y_major": g.y_major, "transposed": g.transposed,
               "smem_bytes": g.smem_bytes}
        for role, g in t.gemms.items()}}
