"""The grouped CuTe sm90 design's backward (a spec's `training` section, specgen/kinds/grouped/training.py): the plan
of what templates/grouped/cute/train_sm90.jinja renders into the CuTe module, behind `torch.library.register_autograd`
on its torch op (the grouped Triton design's autograd layer, templates/grouped/torch/training.jinja).

Each backward GEMM is this design's own kernel (templates/grouped/cute/kernel_sm90.jinja) rendered a second time from
its companion's plan (`plan_grouped` over the companion check resolved and ruled: its tile, stages, warpgroups, SMEM,
majors, chain and grouping), under its own names (`grouped_host_<kernel>`), its `Config` row in TRAIN_CONFIGS:
- pre (role forward_pre, save = "preact"; recompute, save = "recompute"): the ragged-M kernel with the chain's bias
  and no activation, pre = A @ B[g] + bias[g] stored in the output's dtype. forward_pre stores pre, then the module's
  `act_rows` pass writes out = act(pre) over the groups' rows (zeros past them where `groups.tail = "zero"`): pre then
  a pass, not pre beside out in one epilogue, so the GEMM is the forward's kernel unchanged (its predicated stores
  follow group ends on the device; a second output there would double its SMEM subtiles); the pass reads pre once and
  writes out once, 4 bytes an element against the GEMM's 2K flops. recompute runs the same kernel in the backward
  and keeps pre in the output's dtype too (the Triton design keeps f32): the module's kernels share one output dtype
  (the CuTe epilogue copies are built for OUT_DTYPE), so its G is the one save = "preact" gives. Its row's SMEM is
  the design's `memory` of the companion with that output dtype (check ruled the f32 one: no smaller);
- dgrad: dA = G @ B[g]^T, the ragged-M kernel over B's transpose read in its stored major (wgmma takes MN- or K-major
  16-bit operands: b_k flipped), rows past the last group zeroed (`groups.tail = "zero"`);
- wgrad: dB[g] = A_g^T @ G_g, the ragged-K kernel (templates/grouped/cute/ragged_k_sm90.jinja; both operands
  M- / N-major in its terms, an empty group's dB[g] zero), written in B's stored layout: A^T @ G into (G, K, N) for an
  N-major B, G^T @ A into (G, N, K) for a K-major one.
G = dOut * act'(pre) and dbias[g] (the column sum of G over group g's rows, in row order, no atomics; an empty group's
0) are the module's `grad_cols` pass, a SIMT kernel of one CTA per (column block, group), as the grouped Triton
design's (templates/gemm/cute/grad_cols.jinja's dense pass sums row bands of one matrix instead). The columns pass
moves COLS_VEC columns a thread (16-byte loads and stores) where every matrix's rows are 16-byte runs and N is a
multiple of COLS_VEC, one otherwise (each a compiled variant of its own); either way a column's rows are summed in
order, so the bits do not depend on the variant.

A gated epilogue (act(gate) * up, then at most a bias; B (G, K, 2N) K-major as the forward's EPI003), with the grouped
Triton design's semantics: pre (rows, 2N) = A @ B[g] is the plain ragged-M kernel over B's 2N columns (its companion
has no epilogue: gate and up land in the forward's layout, halves or interleaved), `act_rows` writes out = act(gate)
* up + bias[g], `grad_cols` forms G (rows, 2N, the same layout) of dgate = (dOut * up) * act'(gate) and dup = dOut *
act(gate), and dbias[g] = the column sum of dOut over group g's rows; dgrad and wgrad are the same GEMMs over 2N.

An fp8 forward (A and B e4m3 or e5m2, B K-major: the forward's MAJ001; rowwise scales first, then [bias],
[activation] or [bias, activation]; a bf16 or f16 output; session 32) has the grouped Triton, Pallas TPU and Mosaic GPU
designs' backward, in the output's dtype, the gradients of the dequantized operands A scale_a and B[g] scale_b[g]: pre
is the fp8 ragged-M companion with the scales and the bias (the forward's kernel at the companion's config, the one GEMM
that reads the scales); `grad_cols` forms U = dOut * act'(pre) (dOut without an activation) in f32 and stores both of
the backward's G, dgrad's G_b = U scale_b[g] (each row's group's row of scale_b) and wgrad's G_a = scale_a U, each
rounded to the output's dtype, beside dbias (U's column sums): one pass reads dOut, pre and the scales once and writes
2 x 2 bytes an element (the two G), against a second pass's re-read of U. wgmma cannot read 8-bit MN-major operands
(dgrad reads B, wgrad A MN-major), so `_backward` converts A and B to the output's dtype by a torch `.to()` first
(exact: every e4m3 and e5m2 value is a bf16 and an f16 value; 1 byte read and 2 written an element, B's where dA is
needed, A's where dB is), and dgrad and wgrad are the 16-bit companions the grouped kind derives (their Config rows
say a_dtype = b_dtype = OUT_DTYPE). The scales and the group index get no gradient (the autograd layer refuses a
scale or an fp8 operand that requires grad, as the grouped Triton module does).

Covered: 16-bit A, B and out of one dtype (f16, bf16), the chains [bias], [activation], [bias, activation], the
plain GEMM and a gated op (silu, gelu, gelu_tanh; halves or interleaved) with at most a bias after it, save =
"preact" and "recompute", either B major (a gated op: K-major, EPI003), either group index; an fp8 forward's (above).
Refused (TRN001): other dtypes (the grouped kind refuses the other chains, an fp8 gated op, fp8 beside a 16-bit
operand and an fp8 forward's f32 output at load).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from specgen.kinds.gemm.designs.cute_sm90.design import CUTLASS_DTYPES
from specgen.kinds.gemm.designs.cute_sm90.training import CUTE_TRAINING_DTYPES
from specgen.kinds.gemm.sections import Output
from specgen.kinds.gemm.training import SaveModes, activation_fn
from specgen.resolved import Resolved
from specgen.spec.epilogue import gated_op

SUFFIX = {"forward_pre": "_pre", "recompute": "_pre", "dgrad": "_dgrad", "wgrad": "_wgrad"}


@dataclass(frozen=True)
class GroupedCuteTrainingPlan(SaveModes):
    save: str  # preact, recompute
    act: str  # the activation's formula name ("" without one: G = dOut)
    act_op: dict[str, object]  # the activation op (its params, for the formula macros); {} without one
    bias: str  # the bias argument's name ("" without one)
    bias_torch: str
    bias_cutlass: str
    operand_torch: str  # A's, B's and out's torch dtype (pre and G are stored in it)
    out_torch: str
    pre_torch: str  # pre's: the output's (both save modes)
    roles: dict[str, object]  # the backward GEMMs' plans (GroupedCutePlan) by role, in the order they run
    gated: str = ""  # a gated epilogue's layout ("halves", "interleaved"; "" without one): act is its fn
    # an fp8 forward (rowwise scales first): a backward in the output's dtype w.r.t. the dequantized operands; the
    # autograd layer's switch too (templates/grouped/torch/training.jinja)
    fp8: bool = False
    chain_args: tuple[str, ...] = ()  # the chain's tensor arguments in order (the bias; an fp8 forward's scale_a, scale_b first)

    @property
    def kernels(self) -> dict[str, str]:
        """Each role's kernel suffix (grouped_host_<suffix>)."""
        return {role: SUFFIX[role] for role in self.roles}

    @property
    def gemm_args(self) -> tuple[str, ...]:
        """The chain arguments the backward GEMMs' host function takes (the pre GEMM's: the bias, an fp8 forward's
        scales first; dgrad and wgrad read none): none after a gated op, whose bias act_rows adds on the N outputs."""
        return () if self.gated else self.chain_args

    def operand_dtype(self, role: str) -> str:
        """The module constant naming a role's A and B element type: the forward's (A_DTYPE, B_DTYPE: "") but for an
        fp8 forward's dgrad and wgrad, whose operands are 16-bit copies in the output's dtype ("OUT_DTYPE")."""
        return "OUT_DTYPE" if self.fp8 and role in ("dgrad", "wgrad") else ""

    @property
    def pre_role(self) -> str:
        return next((r for r in ("forward_pre", "recompute") if r in self.roles), "")


def training_refusal(spec: object) -> str:
    """Why this design renders no backward for `spec` ("" where it does): TRN001's message on grouped cute:sm90."""
    a, b, out = spec.a.dtype, spec.b.dtype, spec.out.dtype  # type: ignore[attr-defined]
    if a.is_fp8 and b.is_fp8 and out in CUTE_TRAINING_DTYPES:
        return ""  # an fp8 forward: a backward in the output's dtype (the grouped kind's check refuses the rest at load)
    if a not in CUTE_TRAINING_DTYPES or b != a or out != a:
        return (f"training: the grouped CuTe sm90 backward takes f16 or bf16 A and B with an output of their dtype, or "
                f"fp8 A and B with an f16 or bf16 output (pre and G are stored in the output's dtype, and its GEMMs read "
                f"G and 16-bit A and B); a.dtype = {a.value}, b.dtype = {b.value}, out.dtype = {out.value}")
    return ""


def role_resolved(c: Resolved, forward: object, memory: Callable) -> Resolved:
    """The companion as the module compiles it: recompute's pre in the output's dtype (see the docstring), its SMEM
    the design's `memory` of that spec at the stages check resolved."""
    if c.companion != "recompute":
        return c
    spec = c.spec.model_copy(update={"out": Output(dtype=forward.out.dtype)})  # type: ignore[attr-defined]
    return dataclasses.replace(c, spec=spec, budget=memory(spec, c.info, c.ab_stages))


def plan_training(spec: object, r: Resolved, plan_role: Callable, memory: Callable) -> GroupedCuteTrainingPlan | None:
    """The backward's plan from the companions check resolved on the module's target (None without `training`)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    if why := training_refusal(spec):  # check refuses it (TRN001); a render that skipped check must not emit it
        raise ValueError(f"{spec.name}: {why} (TRN001)")  # type: ignore[attr-defined]
    roles = {c.companion: plan_role(role_resolved(c, spec, memory)) for c in r.companions}
    bias = next((op for op in spec.epilogue if op.op == "bias"), None)  # type: ignore[attr-defined]
    act_op = next((op.model_dump(mode="json") for op in spec.epilogue if op.op in ("activation", "gated")), {})  # type: ignore[attr-defined]
    gated = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    out = spec.out.dtype  # type: ignore[attr-defined]
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    return GroupedCuteTrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue), act_op=act_op,  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", bias_torch=bias.dtype.info.torch if bias is not None else "",
        bias_cutlass=CUTLASS_DTYPES[bias.dtype] if bias is not None else "",
        # G (and an fp8 forward's dA, dB) in the operands' dtype: the output's for an fp8 forward
        operand_torch=(out if fp8 else spec.a.dtype).info.torch, out_torch=out.info.torch, pre_torch=out.info.torch,  # type: ignore[attr-defined]
        roles=roles, gated=gated.layout if gated is not None else "", fp8=fp8,
        chain_args=(("scale_a", "scale_b") if fp8 else ()) + ((bias.name,) if bias is not None else ()))


def training_metadata(t: GroupedCuteTrainingPlan) -> dict[str, object]:
    """The backward's METADATA entry: what the forward saves and each backward GEMM's config (the compile hook reads
    each one's SMEM)."""
    return {"save": t.save, **({"gated": t.gated} if t.gated else {}),
            **({"fp8_backward_dtype": t.out_torch} if t.fp8 else {}), "kernels": {
        role: {"tile": [q.config.tile_m, q.config.tile_n, q.config.tile_k],  # type: ignore[attr-defined]
               "ab_stages": q.config.ab_stages, "smem_bytes": q.config.smem_bytes,  # type: ignore[attr-defined]
               "mma_warpgroups": q.config.mma_warpgroups, "a_major": q.a_major, "b_major": q.b_major,  # type: ignore[attr-defined]
               "ragged": "k" if q.ragged_k else "m"}  # type: ignore[attr-defined]
        for role, q in t.roles.items()}}
