"""The grouped Pallas TPU design's backward (a ragged-M spec's `training` section, specgen/kinds/grouped/training.py):
the plan of the kernels templates/grouped/pallas/backward_tpu.jinja renders into the TPU module, behind a
`jax.custom_vjp` on its JAX entry (as the dense TPU module's: specgen/kinds/gemm/designs/pallas/training.py).

The GEMMs are the design's own kernels, each rendered from the plan of its companion spec (the configs check
resolved, the first TPU target's: CFG001 keeps a module's TPU targets in step), as the grouped Triton design's
backward is (designs/triton/training.py):
- pre (with an activation): the ragged-M kernel with the chain's bias and no activation (`_pre`), storing pre =
  A[rows of g] @ B[g] + bias[g] in the output's dtype (save = "preact", the forward rule, which then forms out =
  act(pre) over the groups' rows) or f32 (save = "recompute", in the backward);
- dgrad: dA = G @ B[g]^T, the ragged-M kernel over B's transpose (B read in its stored major: the companion's B major
  is the flip of the forward's) with `groups.tail = "zero"`: rows past the last group get dA = 0 (`_dgrad`);
- wgrad: dB[g] = A_g^T @ G_g, the ragged-K kernel (groups along its K: megablox's `tgmm`, an empty group's dB[g] = 0)
  over M- and N-major operands, written in B's stored layout: (G, K, N) from A^T @ G for an N-major B, (G, N, K) from
  G^T @ A for a K-major one (`_wgrad`);
- dbias (G, N): the same ragged-K kernel with an f32 output over a column of ones, dbias[g] = 1^T @ G_g: G's column
  sums over group g's rows, f32 sums of G as the dots read it (in the operands' dtype), an empty group's 0
  (`_dbias`; no atomics, every group's sum in one block walked in K order).
G = dOut * act'(pre) (the formula table's `DERIVATIVES`) is formed once by an elementwise jnp expression over the
saved or recomputed pre (XLA fuses it: no kernel of its own), rows past the last group zeroed, rounded to the
operands' dtype for the dots.

A gated epilogue (SwiGLU, GeGLU; halves, as the forward's GRP204; session 27): pre = A[rows of g] @ B[g] is the plain
ragged-M GEMM over B's 2N columns (the companion has no epilogue: the bias comes after the gate), (rows, 2N) in the
forward's layout, gate columns [0, N) and up [N, 2N), read as B is stored (K-major (G, 2N, K) or N-major (G, K, 2N);
this GEMM takes any N: only the forward's up block j + N / tile.n needs N a multiple of tile.n). The forward rule
(preact) forms out = act(gate) * up (+ bias[g], each row's group's row) from pre in jnp; G = [(dOut * up) *
act'(gate), dOut * act(gate)] (rows, 2N) in pre's layout, as the dense Pallas TPU design's planes and the grouped
Triton design's columns hold it; dgrad and wgrad are the same companions over 2N (dA = G @ B[g]^T, dB[g] = A_g^T @ G_g
in B's stored (G, 2N, K) / (G, K, 2N)); dbias (G, N) = dOut's column sums over group g's rows (the bias after the
gate). No kernel beyond the companions: VMEM001 checks each as the GEMM it is (pre's over 2N with one B block a step).

An fp8 forward (rowwise scales first; session 27) has the grouped Triton design's backward in the output's dtype, the
gradients of the dequantized operands A scale_a and B[g] scale_b[g]: pre is the fp8 ragged-M kernel with the scales
and the bias; U = dOut * act'(pre) (f32), dgrad over U scale_b[g] and B as stored, wgrad over scale_a U and A as
stored, their plans' `convert` casting each (8-bit) block to the GEMM's dtype in the kernel; dbias U's column sums;
the scales get none (None). GRP205 checks wgrad's 8-bit A blocks (rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specgen.abi import make_arg
from specgen.kinds.gemm.training import SaveModes, activation_fn, chain_refusal
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target


@dataclass(frozen=True)
class GroupedTpuTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    bias: str  # the bias argument's name ("" without one)
    bias_jnp: str
    operand_jnp: str  # A's and B's dtype (an fp8 forward's: the output's): G is stored in it, every backward dot multiplies in it
    pre_jnp: str  # what pre is stored in: the output's dtype (preact) or f32 (recompute)
    b_major: str  # the forward's B major: wgrad's operand order and dB's layout
    gated: bool  # a gated epilogue (halves): pre and G (rows, 2N), gate columns [0, N) and up [N, 2N)
    fp8: bool  # an fp8 forward (rowwise scales first): a backward in the output's dtype, w.r.t. the dequantized operands
    pre: object | None  # the companion plans (GroupedTpuPlan): the GEMM that computes pre (with an activation)
    dgrad: object
    wgrad: object
    dbias: object | None  # wgrad's kernel with an f32 output (over a column of ones), with a bias

    @property
    def kernels(self) -> dict[str, object]:
        """The companion GEMMs by role, in the order they run."""
        roles = {"forward_pre" if self.stores_pre else "recompute": self.pre} if self.pre is not None else {}
        return roles | {"dgrad": self.dgrad, "wgrad": self.wgrad} | ({"dbias": self.dbias} if self.dbias else {})


def plan_tpu_training(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved], plan_grouped: Callable,
                      jnp: dict) -> GroupedTpuTrainingPlan:
    """The backward's plan: each companion check resolved, planned as the design plans a grouped spec."""
    first = resolved[str(targets[0])]
    spec = first.spec
    t = spec.training  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    if (chain_refusal(spec) and not fp8) or (gated is not None and gated.layout != "halves"):
        # the grouped kind refuses other chains at load, GRP204 an interleaved gated B; a render that skipped check
        # must not emit a wrong backward
        raise ValueError(f"{spec.name}: the Pallas TPU grouped backward renders none for it (GRP204)")  # type: ignore[attr-defined]
    plans = {}
    for i, c in enumerate(first.companions):
        plan = plan_grouped(loaded, targets, {str(tg): resolved[str(tg)].companions[i] for tg in targets})
        # an fp8 forward: dgrad reads B, wgrad A as stored (8-bit), each block converted to the GEMM's dtype
        plans[c.companion] = replace(plan, convert=fp8 and c.companion in ("dgrad", "wgrad"))
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    wgrad = plans["wgrad"]
    dbias = None
    if bias is not None:  # 1^T @ G_g: wgrad's kernel (its M- and N-major operands) into f32 (G, 1, N)
        dbias = replace(wgrad, name=f"{wgrad.name}_dbias", convert=False, out=make_arg(
            "out", "out", DType.f32, "(G, 1, N) f32", lambda d: {"jnp": jnp[d]}))
    return GroupedTpuTrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue),  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", bias_jnp=jnp[bias.dtype] if bias is not None else "",
        operand_jnp=jnp[spec.out.dtype if fp8 else spec.a.dtype], fp8=fp8,  # type: ignore[attr-defined]
        pre_jnp=jnp[spec.out.dtype if t.save == "preact" else DType.f32],  # type: ignore[attr-defined]
        b_major=spec.b.major, gated=gated is not None,  # type: ignore[attr-defined]
        pre=plans.get("forward_pre", plans.get("recompute")), dgrad=plans["dgrad"], wgrad=wgrad, dbias=dbias)


def training_metadata(t: GroupedTpuTrainingPlan) -> dict[str, object]:
    """The backward's METADATA: the save mode and each GEMM's blocks and VMEM figure."""
    return {"save": t.save, "activation": t.act, **({"gated": "halves"} if t.gated else {}),
            **({"fp8_backward_dtype": t.operand_jnp} if t.fp8 else {}),  # the dequantized operands' gradients
            "gemms": {role: {"blocks": [p.tile_m, p.tile_n, p.tile_k], "a_major": p.a_major, "b_major": p.b_major,  # type: ignore[attr-defined]
                             "ragged": "k" if p.ragged_k else "m", "vmem_bytes": p.vmem_bytes}  # type: ignore[attr-defined]
                      for role, p in t.kernels.items()}}
