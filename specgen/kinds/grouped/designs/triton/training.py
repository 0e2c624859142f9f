"""The grouped Triton design's backward (a spec's `training` section, specgen/kinds/grouped/training.py): the plan
of the kernels templates/grouped/triton/backward.jinja renders beside the forward.

The backward's GEMMs are the design's own grouped kernels (templates/grouped/triton/kernels.jinja), each rendered
from the plan of its companion spec (the configs check resolved, per compute capability):
- forward_pre (save = "preact", with an activation): the ragged-M kernel with the chain's bias, storing pre in
  the output's dtype; `act_rows` then writes out = act(pre) over the groups' rows (and zeros past them where the
  forward's `groups.tail = "zero"`);
- recompute (save = "recompute", with an activation): the same ragged-M kernel in the backward, pre in f32;
- grad_cols (one program per (column block, group) walking that group's rows): G = dOut * act'(pre) stored in the
  operand dtype (with an activation), and dbias[g] = the column sum of G over group g's rows, in a fixed order
  (no atomics; an empty group's is 0);
- dgrad: dA = G @ B[g]^T, the ragged-M kernel over B's transpose (B read in its stored major) with rows past the
  last group zeroed;
- wgrad: dB[g] = A_g^T @ G_g, the ragged-K kernel (groups along its K; an empty group's dB[g] is 0), written in
  B's stored layout: (G, K, N) from A^T @ G for an N-major B, (G, N, K) from G^T @ A for a K-major one.
With a gated epilogue (act(gate) * up, then at most a bias) pre and G have B's 2N columns in the forward's layout:
the GEMM that computes pre is the plain ragged-M kernel over 2N (no epilogue), `act_rows` writes act(gate) * up +
bias[g] walking each group's rows (the bias is per group), grad_cols forms dgate = dOut * up * act'(gate) and dup =
dOut * act(gate), dbias[g] the column sum of dOut; dgrad and wgrad are the same GEMMs over 2N.
An fp8 forward (`fp8`: rowwise scales scale_a (M,), scale_b (G, N) first, then the bias and activation): forward_pre /
recompute keep the scales and the bias in their epilogue; grad_cols forms U = dOut * act'(pre) and stores G_b =
U scale_b[g] (dgrad's) and G_a = scale_a U (wgrad's) in the output's dtype, the bias gradient U's column sum; dgrad
(G_b @ B[g]^T) and wgrad (A_g^T @ G_a) convert the fp8 operand's tiles to that dtype in registers (`convert_a` /
`convert_b` on their plans), so dA and dB are the dequantized operands' gradients, in that dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specgen.kinds.gemm.designs.triton.design import TL_DTYPES, TRITON_SIG
from specgen.kinds.gemm.training import (
    SaveModes,  # noqa: I001
    activation_fn,
)
from specgen.resolved import Resolved
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import gated_op
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target


@dataclass(frozen=True)
class GroupedTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    bias: str  # the bias argument's name ("" without one)
    bias_torch: str
    bias_triton: str
    operand_torch: str  # A's and B's torch dtype (G rounds to it for the dots)
    operand_triton: str
    out_torch: str
    pre_torch: str  # what pre is stored in: the output's dtype (preact) or f32 (recompute)
    pre: object | None  # the companion plans (GroupedTritonPlan): the GEMM that computes pre (with an activation)
    dgrad: object
    wgrad: object
    grad_cols_kernel: str
    act_rows_kernel: str
    gated: str = ""  # a gated epilogue's layout ("halves", "interleaved"; "" without one): act is its fn
    # an fp8 forward (rowwise scales scale_a (M,), scale_b (G, N) first): the backward runs in the output's dtype, G
    # twice (G scale_b[g] for dgrad, scale_a G for wgrad), the fp8 operand converted in dgrad's and wgrad's registers
    fp8: bool = False
    chain_args: tuple[str, ...] = ()  # the chain's tensor arguments in order (an fp8 forward's: scale_a, scale_b[, bias])

    @property
    def kernels(self) -> dict[str, object]:
        """The companion GEMMs by role, in the order they run."""
        roles = {"forward_pre" if self.stores_pre else "recompute": self.pre} if self.pre is not None else {}
        return roles | {"dgrad": self.dgrad, "wgrad": self.wgrad}


def plan_training(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
                  plan_grouped: Callable) -> GroupedTrainingPlan:
    """The backward's plan: each companion check resolved on every target, planned as the design plans a grouped
    spec (its kernel, parameters and launch configs)."""
    first = resolved[str(targets[0])]
    spec = first.spec
    t = spec.training  # type: ignore[attr-defined]
    plans = {}
    for i, c in enumerate(first.companions):
        mine = {str(target): resolved[str(target)].companions[i] for target in targets}
        assert all(r.companion == c.companion for r in mine.values())
        plans[c.companion] = plan_grouped(loaded, targets, mine, companion=True)  # unsplit (design.py: tail_split)
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    name = spec.name  # type: ignore[attr-defined]
    pre_dtype = spec.out.dtype if t.save == "preact" else DType.f32  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    g_dtype = spec.out.dtype if fp8 else spec.a.dtype  # type: ignore[attr-defined]
    if fp8:  # dgrad: G_b (rows, N) @ B[g]^T, B fp8; wgrad: A^T @ G_a (B N-major) or G_a^T @ A (B K-major), A fp8
        plans["dgrad"] = replace(plans["dgrad"], convert_b=True)
        b_major = spec.b.major  # type: ignore[attr-defined]
        w = plans["wgrad"]
        fp8_side = "a" if b_major == "mn" else "b"  # the operand that is fp8 in memory: a TMA descriptor says so
        sig = f"tensordesc<{TRITON_SIG[spec.a.dtype]}"  # type: ignore[attr-defined]
        params = [replace(q, type=sig + q.type[q.type.index("["):]) if q.name == f"{fp8_side}_desc" else q for q in w.params]
        plans["wgrad"] = replace(w, convert_a=b_major == "mn", convert_b=b_major == "k", params=params)
    return GroupedTrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue),  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", bias_torch=bias.dtype.info.torch if bias is not None else "",
        bias_triton=TL_DTYPES[bias.dtype] if bias is not None else "",
        operand_torch=g_dtype.info.torch, operand_triton=TL_DTYPES[g_dtype],
        out_torch=spec.out.dtype.info.torch, pre_torch=pre_dtype.info.torch,  # type: ignore[attr-defined]
        pre=plans.get("forward_pre", plans.get("recompute")), dgrad=plans["dgrad"], wgrad=plans["wgrad"],
        grad_cols_kernel=f"_{name}_grad_cols_kernel", act_rows_kernel=f"_{name}_act_rows_kernel",
        gated=gated.layout if gated is not None else "", fp8=fp8,
        chain_args=tuple(a.name for op in spec.epilogue for a in op.runtime_args()))  # type: ignore[attr-defined]
