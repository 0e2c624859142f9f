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
Their configs are the companions' that check resolved (tile, warps, stages per compute capability), so the
numbers the launcher uses are the ones the rules passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.kinds.gemm.training import (
    SaveModes,  # noqa: I001
    activation_fn,
)
from specgen.resolved import Resolved
from specgen.spec.epilogue import gated_op
from specgen.spec.models import Target

ROLES = ("forward_pre", "recompute", "dgrad", "wgrad")


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


def plan_training(name: str, spec: object, targets: list[Target], resolved: dict[str, Resolved],
                  tl_dtypes: dict, torch_name) -> TrainingPlan | None:
    """The backward's plan from the companions check resolved on each target (None without `training`)."""
    t = getattr(spec, "training", None)
    if t is None:
        return None
    kernels: dict[str, BackwardKernel] = {}
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
    return TrainingPlan(
        save=t.save, act=activation_fn(spec.epilogue),  # type: ignore[attr-defined]
        bias=bias.name if bias is not None else "", bias_torch=torch_name(bias.dtype) if bias is not None else "",
        bias_triton=tl_dtypes[bias.dtype] if bias is not None else "",
        operand_torch=torch_name(spec.a.dtype), operand_triton=tl_dtypes[spec.a.dtype],  # type: ignore[attr-defined]
        out_torch=torch_name(spec.out.dtype), out_triton=tl_dtypes[spec.out.dtype],  # type: ignore[attr-defined]
        kernels=kernels, gated=gated.layout if gated is not None else "", grad_cols_kernel=f"_{name}_grad_cols_kernel")
