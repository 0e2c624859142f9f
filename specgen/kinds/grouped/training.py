"""The grouped kind's `training` section: the dense kind's (specgen/kinds/gemm/training.py: the same keys, `save`,
`pre`, `dgrad`, `wgrad`, and the same checks of dtypes, accumulator and chain), for a ragged-M grouped GEMM.

    out[rows of g] = act(A[rows of g] @ B[g] + bias[g])      G = dOut * act'(pre), formed once

- dgrad: dA[rows of g] = G[rows of g] @ B[g]^T, a ragged-M grouped GEMM (B read in its stored major); rows past
  the last group get dA = 0;
- wgrad: dB[g] = A[rows of g]^T @ G[rows of g] in B's stored layout, a ragged-K grouped GEMM (the groups run
  along its K); an empty group's dB[g] is 0;
- dbias[g] = the column sum of G over group g's rows ((G, N), an empty group's 0);
- `offs` (or `group_sizes`) is an integer index: it has no gradient.

Each backward GEMM is a grouped spec of its own (`companions`), resolved with the forward and run through the
same rules (SMEM001 on "backward dgrad" points at `training.dgrad`), rendered by the same design from that spec: the
GEMM that stores pre (save = "preact", the forward; "recompute", the backward) is the ragged-M kernel with the ops
before the activation (the bias; an fp8 forward's scales first) and no activation, pre its output (out = act(pre) and
G = dOut * act'(pre) are streaming passes beside it: the dense designs' pre kernels fuse them instead, and their
companions carry that chain), dgrad the ragged-M kernel with no epilogue and `groups.tail = "zero"`, wgrad the
ragged-K kernel with no epilogue. The rules shared with the dense kind (the pre GEMM's chain and dtype, dgrad's
operands, a role's config over the forward's) are its functions (specgen/kinds/gemm/training.py).

Covered: the dense kind's chains, a bias per group: the plain GEMM, [bias], [activation], [bias, activation], and
a gated op (SwiGLU, GeGLU; halves or interleaved) then at most a bias: pre = A @ B[g] has B's 2N columns, G (rows,
2N) holds dgate = dOut * up * act'(gate) and dup = dOut * act(gate) in the forward's layout, dgrad and wgrad are the
same grouped GEMMs over 2N, dbias[g] the column sum of dOut over group g's rows. And an fp8 forward (A and B e4m3,
e5m2 or one of each) with torch._scaled_grouped_mm's rowwise scales first (scale_a (M,), scale_b (G, N)), then [bias],
[activation] or [bias, activation]: its backward runs in the output's 16-bit dtype and gives the gradients of the
dequantized operands A scale_a and B[g] scale_b[g] (dgrad and wgrad checked as GEMMs of that dtype; the fp8 operand
is converted in their registers), the scales none. No ragged-K forward (it is itself a weight gradient)."""

from __future__ import annotations

import re

from specgen.kinds.gemm.sections import Operand, Output
from specgen.kinds.gemm.training import (
    BackwardGemm,
    Training,
    backward_dtype,
    check_training,
    dgrad_operands,
    legacy_refusal,
    pre_gemm,
    role_config,
)
from specgen.spec.dtypes import DType

__all__ = ["Training", "check_grouped_training", "companions"]

def check_grouped_training(training: Training | None, data: dict[str, object]) -> Training | None:
    """The grouped kind's own check (ragged M), then the dense kind's (dtypes, accumulator, the chain: a grouped bias
    is along N, per group); ValueError naming the field."""
    if training is None:
        return None
    groups = data.get("groups")
    if getattr(groups, "ragged", "m") == "k":
        raise ValueError("groups.ragged = 'k' with `training`: a ragged-K kernel is itself a weight gradient; "
                         "training has a backward for the ragged-M forward (groups of rows)")
    a, b = data.get("a"), data.get("b")
    if isinstance(a, Operand) and isinstance(b, Operand) and a.dtype.is_fp8 and b.dtype.is_fp8:
        # an fp8 forward: torch._scaled_grouped_mm's rowwise scales first (check_training), then a legacy chain
        chain = data.get("epilogue") or []
        rest = {**data, "epilogue": chain[1:], "a": Operand(dtype=DType.bf16), "b": Operand(dtype=DType.bf16)}
        if chain and (chain[0].op == "gated" or any(op.op == "gated" for op in chain)):  # type: ignore[attr-defined]
            raise ValueError("a gated epilogue with fp8 operands: training has a backward for an fp8 forward's "
                             "[scale rowcol], then [bias], [activation] or [bias, activation]; drop `training`")
        if chain and chain[0].op == "scale" and (why := legacy_refusal(rest)):  # type: ignore[attr-defined]
            raise ValueError(re.sub(r"epilogue\[(\d+)\]", lambda m: f"epilogue[{int(m[1]) + 1}]", why)
                             .replace("epilogue [", "epilogue[1:] ["))
        return check_training(training, data)
    if why := legacy_refusal(data):  # the other chains, fp8 beside a 16-bit operand: the dense Triton design's only
        raise ValueError(why)
    return check_training(training, data)


def companions(spec: object) -> tuple[tuple[str, object, tuple[str, ...]], ...]:
    """The grouped GEMMs a training spec runs beside its forward, each a grouped spec of its own that resolve and
    the rules take as they take the forward: (label, spec, the field a finding about it points at). Each grouped
    design renders these specs' kernels (its own forward and ragged-K kernels at their configs), so each is what its
    kernel runs; the rules shared with the dense kind's companions are its (specgen/kinds/gemm/training.py)."""
    t: Training | None = getattr(spec, "training", None)
    if t is None:
        return ()
    s = spec
    out: list[tuple[str, object, tuple[str, ...]]] = []
    # pre = A @ B[g] (+ the ops before the activation: the bias, an fp8 forward's scales first), stored in the output's
    # dtype (preact) or f32 (recompute); no activation, no dOut: out = act(pre) (act_rows, jnp) and G = dOut * act'(pre)
    # (grad_cols, jnp) are streaming passes beside it, unlike the dense designs' fused pre kernels (`pre_gemm`'s
    # `fused`). With a gated op pre is the plain GEMM over B's 2N columns (gate and up in the forward's layout; the
    # bias, after the gate, is on the N outputs).
    if pre := pre_gemm(s, fused=False):
        label, kept, epilogue, _ = pre
        out.append((label, _derived(s, label, t.pre, s.a, s.b, kept, epilogue, "untouched", "m"), ("training", "pre")))  # type: ignore[attr-defined]
    # dgrad: dA (rows, K) = G (rows, N) @ B[g]^T (N, K), ragged M, as the dense kind's; rows past the last group zeroed.
    out.append(("dgrad", _derived(s, "dgrad", t.dgrad, *dgrad_operands(s), [], "zero", "m"), ("training", "dgrad")))
    # wgrad: dB[g] = A_g^T @ G_g, ragged K (every group's rows are this GEMM's K): for an N-major B, A^T (K, rows)
    # @ G (rows, N) into (G, K, N); for a K-major B, G^T (N, rows) @ A (rows, K) into (G, N, K), B's own layout.
    # Either way both operands have their M (resp. N) dim contiguous: M-major and N-major in the ragged-K GEMM's terms.
    g = backward_dtype(s)
    out.append(("wgrad", _derived(s, "wgrad", t.wgrad, Operand(dtype=g, major="mn"), Operand(dtype=g, major="mn"), g,
                                  [], "untouched", "k"), ("training", "wgrad")))
    return tuple(out)


def _derived(s: object, label: str, cfg: BackwardGemm | None, a: Operand, b: Operand, out: DType, epilogue: list,
             tail: str, ragged: str) -> object:
    """A grouped GEMM with the given operands, chain and grouping, with the config `cfg` gives over the forward's
    (`role_config`: tile, warps, stages, schedule). On Triton the ragged-M companions (pre, dgrad) load through TMA
    where the forward does (session 29: through masked pointers they ran 1.2-1.5x cuBLAS's GEMM time at Mixtral's
    shapes on an H200), but not behind an fp8 forward, whose dgrad converts the fp8 B tile in registers on the pointer
    path; ragged K (wgrad) loads each group's whole K tiles by TMA where the forward does, an fp8 forward's too (its
    TMA loop converts the fp8 tile in registers; descriptors 2-D, over the operands as stored: backward.jinja
    `_wgrad`).
    """
    own = role_config(s, cfg or BackwardGemm())
    tma = s.triton.tma and (ragged == "k" or not s.a.dtype.is_fp8)  # type: ignore[attr-defined]
    triton = s.triton.model_copy(update={"tma": tma, "swap_ab": False, **own.pop("triton")})  # type: ignore[attr-defined]
    groups = s.groups.model_copy(update={"tail": tail, "ragged": ragged})  # type: ignore[attr-defined]
    return s.model_copy(update={  # type: ignore[attr-defined]
        "name": f"{s.name}_{label}", "a": a, "b": b, "out": Output(dtype=out), "epilogue": epilogue,  # type: ignore[attr-defined]
        "groups": groups, "triton": triton, **own, "training": None, "per_target": {}, "variants": []})
