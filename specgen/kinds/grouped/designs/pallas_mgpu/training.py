"""The grouped Pallas Mosaic GPU design's backward (a ragged-M spec's `training` section, specgen/kinds/grouped/
training.py): the plan of what templates/grouped/pallas/backward_mgpu.jinja renders into the module, behind a
`jax.custom_vjp` on its JAX entry, with the semantics of the grouped Pallas TPU backward (designs/pallas/training.py)
and the grouped Triton one.

Each backward GEMM is one of the design's own kernels, a second copy of it rendered into the module (mgpu_m.jinja,
mgpu_k.jinja, with the role's prefix) from the plan of its companion spec, the config check resolved and ruled as a
grouped GEMM of its own (SMEM001, REG001, PAL004-PAL009, MMA001 / MAJ001, MGP001-MGP003 on "backward <role>"):
- pre (with an activation): the ragged-M kernel with the chain's bias and no activation (`_pre`), storing pre =
  A[rows of g] @ B[g] + bias[g] in the output's dtype (save = "preact": the forward rule runs it and forms out =
  act(pre) over the groups' rows in jnp; the kernel stores pre only) or f32 (save = "recompute": the backward runs it);
- dgrad: dA = G @ B[g]^T, the ragged-M kernel over G (K-major) and B as stored (its major flipped in this GEMM's
  terms: a K-major (G, N, K) B is the N-major (G, K', N') of dgrad's K' = N, N' = K), `groups.tail = "zero"`: the
  rows past the last group get dA = 0 (`_dgrad`);
- wgrad: dB[g] = A_g^T @ G_g, the ragged-K kernel (groups along its K; an empty group's dB[g] = 0), both operands
  read M- / N-major as stored: A (rows, K) and G (rows, N) into (G, K, N) for an N-major B, G and A into B's
  (G, N, K) for a K-major one (`_wgrad`).
G = dOut * act'(pre) (the formula table's `DERIVATIVES`) over the groups' rows and dbias (G, N) = its per-group column
sums (`jax.ops.segment_sum` over each row's group, f32, an empty group's exactly 0) are jnp under the entry's jit: XLA
fuses the elementwise G with its read of pre, and the sums are one reduction over (rows, N), no GEMM (the dense Mosaic
GPU design's grad_cols kernel exists because its forward_pre stores out too; here no kernel would save a pass).

A gated epilogue (SwiGLU, GeGLU-tanh; act(gate) * up, then at most a bias; halves on either B major, interleaved on
a K-major B: the forward's layouts, MGP003) has the grouped Triton and Pallas TPU designs' semantics: pre = A[rows of
g] @ B[g] is the plain ragged-M companion over B's 2N columns (no epilogue: the bias comes after the gate), (rows, 2N)
in the forward's layout (gate columns [0, N) and up [N, 2N), or gate 2j and up 2j + 1), B read as stored; the forward
rule (preact) forms out = act(gate) * up (+ bias[g], each row's group's) from it in jnp; G = [dgate, dup] (rows, 2N)
in pre's layout, dgate = (dOut * up) * act'(gate), dup = dOut * act(gate), in jnp; dgrad and wgrad are the plain
companions over 2N (dA = G @ B[g]^T, dB[g] = A_g^T @ G_g in B's stored (G, 2N, K) / (G, K, 2N)); dbias (G, N) =
dOut's column sums over group g's rows (the bias after the gate).

Under jax.shard_map (both check_vma modes): the entry casts A, B, the bias and the caller's `out` to vary over the
mesh axes any argument does (`_rt.vary`), and types every kernel's output likewise (jax 0.10's plgpu.kernel types its
output as not varying), so the custom_vjp's cotangents have their primals' types and a replicated B's and bias's
gradients come back summed over the mesh by the casts' transposes, as jax's own autodiff gives them.

An fp8 forward (A and B e4m3 or e5m2, one of each where the forward's PAL004 lets them mix; B K-major: MAJ001; rowwise scales first, then [bias], [activation] or
[bias, activation]; session 29) has the grouped Pallas TPU and Triton designs' backward, in the output's 16-bit dtype,
the gradients of the dequantized operands A scale_a and B[g] scale_b[g]: pre is the fp8 ragged-M companion with the
scales and the bias (the one kernel that reads the scales); U = dOut * act'(pre) (f32, jnp) over the groups' rows;
dgrad's G is U scale_b[g] (each row's group's row of scale_b) and wgrad's scale_a U, both rounded to the output's dtype
in jnp (templates/gemm/pallas/fp8_backward.jinja, shared with the TPU backward); dbias U's column sums; the scales get none (None). wgmma
cannot mix an 8-bit and a 16-bit operand, and dgrad reads B, wgrad A MN-major (16-bit only), so the 8-bit A and B are
converted to the output's dtype by a jnp astype before those kernels (exact: every e4m3 and e5m2 value is a bf16 and
an f16 value): one pass each that reads the fp8 array and writes a 2-byte copy (3 B an element, G N K and M K of
them), and the kernels read 2 B an element instead of 1 (docs/grouped.md says so). The companions are the 16-bit ones
the grouped kind derives (dgrad and wgrad in the output's dtype), so no kernel here reads an 8-bit operand past the
forward's and pre's.

Covered: f16 / bf16 operands with an output of their dtype, [], [bias], [activation], [bias, activation] (the grouped
kind's legacy chains), [gated] and [gated, bias], both B majors, both index formats, both tails; an fp8 forward's
(its forward takes B K-major only). TRN001 refuses other dtypes (`training_refusal`); the grouped kind refuses other
chains at load (`renders_chain_training` says so to TRN001).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specgen.kinds.gemm.training import SaveModes, activation_fn, chain_refusal
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target

# wgmma reads MN-major operands of 16-bit types only (dgrad reads B in its flipped major, wgrad A and G M- / N-major),
# and pre is stored in the output's dtype: 16-bit operands with an output of their dtype
MGPU_TRAINING_DTYPES = (DType.f16, DType.bf16)


def training_refusal(spec: object) -> str:
    """Why the grouped Mosaic GPU module renders no backward for `spec` ("" where it does): TRN001's message."""
    a, b, out = spec.a.dtype, spec.b.dtype, spec.out.dtype  # type: ignore[attr-defined]
    if a.is_fp8 and b.is_fp8 and out in MGPU_TRAINING_DTYPES:
        return ""  # an fp8 forward: a backward in the output's dtype (the grouped kind's check refuses the rest at load)
    if a not in MGPU_TRAINING_DTYPES or b != a or out != a:
        return (f"training: the grouped Mosaic GPU backward takes f16 or bf16 operands with an output of their dtype, "
                f"or fp8 A and B with an f16 or bf16 output (dgrad and wgrad read B, A and G MN-major, 16-bit only for wgmma; pre is stored in the output's "
                f"dtype); a.dtype = {a.value}, b.dtype = {b.value}, out.dtype = {out.value}")
    return ""


@dataclass(frozen=True)
class GroupedMgpuTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    act_op: dict[str, object]  # the activation or gated op (its params for the formula macros); {} without one
    bias: str  # the bias argument's name ("" without one)
    operand_jnp: str  # A's, B's and out's dtype (an fp8 forward's: out's): G is rounded to it for the dots
    b_major: str  # the forward's B major: wgrad's operand order and dB's layout
    gated: str  # a gated op's layout ("halves", "interleaved"; "" without one): pre and G (rows, 2N) in it
    fp8: bool  # an fp8 forward (rowwise scales first): a backward in the output's dtype, w.r.t. the dequantized operands
    pre: object | None  # the companion plans (GroupedMgpuPlan): the ragged-M GEMM that computes pre (with an activation)
    dgrad: object
    wgrad: object

    @property
    def kernels(self) -> dict[str, object]:
        """The companion GEMMs by role, in the order they run."""
        roles = {"forward_pre" if self.stores_pre else "recompute": self.pre} if self.pre is not None else {}
        return roles | {"dgrad": self.dgrad, "wgrad": self.wgrad}

    @property
    def prefixes(self) -> dict[str, str]:
        """Each role's prefix of its kernel's names in the module (`_pre_build`, `_dgrad_build`, `_wgrad_build`)."""
        return {role: "_pre" if role in ("forward_pre", "recompute") else f"_{role}" for role in self.kernels}


def plan_mgpu_training(loaded: LoadedSpec, target: Target, r: Resolved,
                       plan_one: Callable[[LoadedSpec, Target, Resolved], object]) -> GroupedMgpuTrainingPlan | None:
    """The backward's plan from the companions check resolved on the target (None without `training`)."""
    spec = r.spec
    t = getattr(spec, "training", None)
    if t is None:
        return None
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    if why := training_refusal(spec) or (chain_refusal(spec) if not spec.a.dtype.is_fp8 else ""):  # type: ignore[attr-defined]
        # check refuses these (TRN001); a render that skipped check must not emit a wrong backward
        raise ValueError(f"{spec.name}: the grouped Mosaic GPU design renders no backward for it: {why} (TRN001)")  # type: ignore[attr-defined]
    plans = {c.companion: plan_one(loaded, target, c) for c in r.companions}
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    act_op = next((op.model_dump(mode="json") for op in spec.epilogue if op.op in ("activation", "gated")), {})  # type: ignore[attr-defined]
    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES

    return GroupedMgpuTrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue), act_op=act_op,  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", operand_jnp=JNP_DTYPES[spec.out.dtype],  # type: ignore[attr-defined]
        fp8=spec.a.dtype.is_fp8, b_major=spec.b.major, gated=gated.layout if gated is not None else "",  # type: ignore[attr-defined]
        pre=plans.get("forward_pre", plans.get("recompute")), dgrad=plans["dgrad"], wgrad=plans["wgrad"])


def training_metadata(t: GroupedMgpuTrainingPlan) -> dict[str, object]:
    """The backward's METADATA entry: the save mode and each GEMM's tile, stages, majors, grouping and SMEM."""
    return {"save": t.save, "activation": t.act, **({"gated": t.gated} if t.gated else {}),
            **({"fp8_backward_dtype": t.operand_jnp} if t.fp8 else {}), "gemms": {
        role: {"tile": [p.config.tile_m, p.config.tile_n, p.config.tile_k], "stages": p.config.ab_stages,  # type: ignore[attr-defined]
               "a_major": p.a_major, "b_major": p.b_major, "ragged": "k" if p.ragged_k else "m",  # type: ignore[attr-defined]
               "tail": "zero" if p.tail_zero else "untouched", "smem_bytes": p.config.smem_bytes}  # type: ignore[attr-defined]
        for role, p in t.kernels.items()}}
