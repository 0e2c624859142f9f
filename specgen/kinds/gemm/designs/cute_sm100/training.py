"""The CuTe sm100 design's backward (a spec's `training` section, specgen/kinds/gemm/training.py): the CuTe sm90
design's backward (designs/cute_sm90/training.py: its plan, `plan_cute_training`, is this design's with this design's
config rows) on the tcgen05 kernel, behind the same `_backward`, autograd registration and JAX custom_vjp.

Every backward GEMM is this design's own kernel (templates/gemm/cute/gemm_sm100.py.jinja: TMA loads by warp 5,
tcgen05 MMAs into TMEM by warp 4, the epilogue warps' TMEM -> registers -> SMEM -> TMA store; its training parts in
templates/gemm/cute/training_sm100.jinja) traced with the role's `Config` row: the companion's tile, cluster, 1-CTA
or 2-CTA MMA and stages as check resolved them, the role's operand majors (tcgen05 reads K- or MN-major 16-bit
operands from SMEM: dgrad and wgrad read the transposed operands as they are stored) and the role's epilogue:
`forward_pre` stores pre = acc + bias by TMA beside out = act(pre) (a second SMEM subtile per subtile: its companion
has twice the forward's epilogue stages), `recompute` reads dOut as a matrix operand (as the forward reads a
residual: this thread's TMEM fragment's elements, predicated on the bounds) and stores G = dOut * act'(acc + bias),
dgrad and wgrad store the plain product. The gradients' orientation (dA^T = B G^T where A is mn-major, ...), the
columns pass (templates/gemm/cute/grad_cols.jinja: G from dOut and the saved pre, the bias gradient in row bands) and
the host side are the sm90 module's, rendered by the same macros (templates/gemm/cute/training.jinja).

A gated epilogue (either layout; the sm90 backward's meaning, cute_sm90/training.py): forward_pre and recompute are the
gated kernel (a gate and an up TMEM accumulator a stage), forward_pre storing pre's gate and up halves by TMA beside out
(three SMEM subtiles a subtile: its companion keeps three times the forward's epilogue stages; interleaved: pre's pairs
element-wise, as sm90 stores them, no TMA box holding every other column, its SMEM out's alone), recompute storing G's dgate =
(dOut * up) * act'(gate) and dup = dOut * act(gate) element-wise into G's (M, N, 2) pairs; dgrad and wgrad run the
kernel ungated (`Config.gated`: one accumulator, no up tiles), plain GEMMs over B's 2N columns; the columns pass is the
sm90 module's gated one (either layout).

An fp8 forward (A and B fp8, rowwise scales first, then [bias], [activation] or both; the sm90 plan's meaning):
forward_pre is the fp8 kernel storing pre (after the scales and the bias) beside out, recompute the fp8 kernel storing
pre as its output; the sm90 module's fp8 columns kernel forms G_b and G_a; dgrad and wgrad run the kernel on 16-bit
operands (`Config.operands` by role: the SMEM struct, layouts and MMA take the config's dtypes) over the operands'
copies the backward makes with `.to()` (exact), as on sm90.

The other chains (scale, residual, clamp, cast, bias along m, in any order; 16-bit; the sm90 plan's `chain`
and meaning): forward_pre and recompute run templates/gemm/cute/chain_pass.jinja's epilogue (the ops before `start`,
pre stored in the output's dtype: by TMA beside out, or as recompute's output), `train_host` passes every chain
argument as the forward's host does, and the backward is the sm90 module's chain pass, bands kernel and `_backward`,
rendered by the same macros (`chain_refusal(spec, fp8=True, chains=True, batch=True)`; the design's
`renders_unbatched_chain_training`).

A batched forward (`batch = true`, 16-bit; session 34), the sm90 batched backward's meaning (cute_sm90/training.py:
each GEMM per batch, every batch its own B, a vector's gradient summed over the batches and rows in a fixed order) and
its host (training.jinja's batched glue, character for character): every role's kernel walks the L mode of (batch,
rows, cols) views as the batched forward does (its persistent schedule over batch x tiles, `tl` indexing dOut, pre's
TMA store and a gated role's (M, N, 2, L) pairs), the transposes `.mT` views; the columns and chain passes see the
batches' rows as one (batch M, N) matrix. Nothing of the kernel changed but the batched pairs' view of pre and G
(`_gated_pairs`' batch mode, the halves' up column from pre's last dim). A batched fp8 forward stays refused
(`chain_refusal(batch=True)`).

The fused roles' companions (forward_pre, recompute; specgen/kinds/gemm/training.py `pre_epilogue`) carry the epilogue
their kernel runs: the forward's chain and pre stored beside out (a gated one's two halves: `GemmSpec.stores`), or
dOut read as a residual is beside the bias and the activation (a gated op's G: dOut, and G's up half stored beside its
gate half), or the ops before pre (the other chains, an fp8 forward's): `epilogue_tile` counts their fragments, so
the subtile, SMEM and TMA boxes check rules are the ones this plan renders (`plan_cute_training` takes each
companion's config row as check resolved it).

Covered: f16 / bf16 operands with an output of their dtype, the chains [], [bias], [activation], [bias, activation]
(bias along N), [gated], [gated, bias] (halves or interleaved), the other chains and an fp8 forward's, both save
modes, 1-CTA and 2-CTA configs (a gated forward has no 2-CTA form: EPI003) and clusters, batched (16-bit) or not.
Refused by TRN001 (and by the plan, for a render that skipped check): other dtypes, an fp8 forward batched, an fp8
forward's other chains.

Verified on a CPU only: every role's kernel compiles for sm_100a and its SASS has UTCHMMA and no local-memory
spills, and the plan's SMEM and TMEM equal what each compiled kernel allocates (tests/backends/cute/
test_cute_sm100_training.py; batched: test_cute_sm100_training_batch.py). No Blackwell GPU has run it: no numerics
and no speed are claimed.
"""

from __future__ import annotations

from specgen.kinds.gemm.designs.cute_sm90.training import (
    CuteTrainingPlan,
    dtype_refusal,
    plan_cute_training,
)
from specgen.kinds.gemm.training import chain_refusal
from specgen.resolved import Resolved


def training_refusal(spec: object) -> str:
    """Why this design renders no backward for `spec` ("" where it does): TRN001's message on cute:sm100 (a batched
    fp8 forward's and an fp8 forward's other chains' are TRN001's own, `chain_refusal`, ahead of this one)."""
    return dtype_refusal(spec, "sm100")


def _refusal(spec: object) -> str:
    return training_refusal(spec) or chain_refusal(spec, fp8=True, chains=True, batch=True)


def plan_training(spec: object, r: Resolved, sm100_config) -> CuteTrainingPlan | None:
    """The backward's plan (None without `training`); raises what TRN001 refuses (a render that skipped check)."""
    return plan_cute_training(spec, r, sm100_config, lambda d: d.info.torch, _refusal)
