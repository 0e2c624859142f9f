"""The GEMM kind's `training` section: a kernel that opts in gets a backward, generated from the same spec.

    [kernels.training]
    save = "preact"          # or "recompute"
    pre = { tile = { m = 128, n = 128, k = 64 } }   # optional (each); default: the forward's tile, warps, stages
    dgrad = { tile = { m = 128, n = 128, k = 64 }, num_warps = 8 }
    wgrad = { num_warps = 8 }

Absent (the default) the kernel is forward-only, as every kernel was before: its torch op refuses inputs that
require grad. Given, the forward's op gets a backward (torch.library.register_autograd) made of GEMMs the
design renders from this spec:

- dgrad: dA = G @ B^T and wgrad: dB = A^T @ G, with G = dOut * act'(pre) (act' from the formula table's
  DERIVATIVES) and the bias gradient dbias = the column sum of G;
- `save = "preact"`: the forward also stores the pre-activation pre = A @ B + bias (M x N, in the output's
  dtype: the memory); the backward forms G from it in one streaming pass (with the bias gradient), then dgrad
  and wgrad read G;
- `save = "recompute"`: the forward saves nothing beyond its inputs; the backward first recomputes
  pre = A @ B + bias in one GEMM whose epilogue reads dOut and writes G (the time: one GEMM more), then
  dgrad and wgrad read G. Without an activation there is nothing to save or recompute (G = dOut): both
  modes are the same kernels.

The backward GEMMs' configs are checked by the same rules as the forward's: each is a GEMM spec derived
here (`companions`: operands, majors, dtypes, tile, warps, stages, and for the GEMM that computes pre the epilogue its
kernel runs, `pre_epilogue`), resolved and ruled on every target.

What has a backward (anything else is refused here, naming the op, and the op keeps refusing grad): the
plain GEMM, `bias` along N, and one `activation` (relu, gelu, gelu_tanh, silu, sigmoid) after it; or a
`gated` op (SwiGLU, GeGLU: either layout) optionally followed by `bias` along N, where pre = A @ B has B's 2N
columns and G (M x 2N) holds dgate = dOut * up * act'(gate) and dup = dOut * act(gate) in the forward's
layout (the bias, after the gate, has dOut's column sum for gradient); f16, bf16 or f32 operands (A and B of
one dtype) with an f32 accumulator. Every design that renders training renders those (`legacy_chain`), unbatched;
the dense Triton design also the other chains (`scale`, `residual`, `clamp`, `cast`, `bias` along M, in any order:
pre is then the value before the first op whose backward reads a value, `value_index`) and an fp8 forward (e4m3,
e5m2 or a mix of the two: A and B each either) with rowwise scales first, whose backward runs in the output's 16-bit
dtype and gives the gradients of the dequantized operands, the scales none, and `batch = true` (A (batch, M, K), B
(batch, K, N): each GEMM of the backward per batch, dA[i] = G[i] @ B[i]^T and dB[i] = A[i]^T @ G[i], every batch with
its own B; a vector argument's gradient summed over the batches and rows; `chain_refusal` says what TRN001 refuses
elsewhere; the dense CuTe sm90 and Pallas (TPU, Mosaic GPU) designs render the fp8 forward's too, its scales then a
chain every design renders, and the dense CuTe sm90 and sm100 and Pallas (TPU, Mosaic GPU) designs the other chains,
`chains`, and the dense CuTe sm90 and sm100 (16-bit) and Pallas designs `batch`, not an fp8
forward's).
An int8 forward has no backward.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from specgen.kinds.gemm.sections import (
    DEFAULT_EPILOGUE_STAGES,
    Operand,
    Output,
    Pipeline,
    Schedule,
    Stages,
    Tile,
)
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import Residual, gated_op
from specgen.spec.models import KeysAddedLater, Strict, bounded

SAVE_MODES = ("preact", "recompute")
BACKWARD_DTYPES = (DType.f16, DType.bf16, DType.f32)
BACKWARD_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")


class BackwardGemm(KeysAddedLater):
    """One backward GEMM's config (its tile, warps and pipeline depth); a key not given is the forward's.
    dgrad's tile is (m: rows of dA, n: columns of dA (K), k: the reduction over N); wgrad's (m: rows of dB
    (K), n: columns of dB (N), k: the reduction over M)."""

    tile: Tile | None = None
    num_warps: bounded(64) | None = None
    ab_stages: Stages | None = None
    # the CuTe sm90 design's consumer schedule for this GEMM (cute.schedule's values); the other designs have one.
    # "pingpong" runs one warpgroup's epilogue under the other's mainloop: the recompute GEMM's G = dOut * act'(pre)
    # went 1.20 -> 1.14x and 1.12 -> 1.04x its plain GEMM's time at 128 x 128 tiles (docs/training/measurements.md)
    schedule: Literal["cooperative", "pingpong"] | None = None

    ADDED_LATER: ClassVar[dict[str, object]] = {"schedule": None}  # session 32: earlier specs hash as before


class Training(Strict):
    """A backward generated from this spec (absent: forward-only, the op refuses inputs that require grad).
    `save = "preact"`: the forward also stores the pre-activation A @ B + bias (M x N, the output's dtype) and
    the backward reads it; `"recompute"`: nothing more is kept, the backward recomputes it in one GEMM. `dgrad`
    (dA = G @ B^T) and `wgrad` (dB = A^T @ G), G = dOut * act'(pre) formed once, take the
    forward's tile, warps and stages unless given, as does `pre`, the GEMM that stores or recomputes pre. Covered: the plain GEMM, bias along n, then one activation;
    or a gated op then at most a bias along n (pre has B's 2N columns; the Triton, dense CuTe sm90 and sm100 and Pallas designs, on TPU halves);
    f16, bf16, f32 operands (Triton, CuTe sm90 and Pallas targets, TPU and Mosaic GPU; CuTe sm100 f16 / bf16, compiled
    for sm_100a only: TRN001 elsewhere;
    the CuTe sm90 and Mosaic GPU backwards take f16 / bf16 operands and an output of their dtype, or fp8 ones below). The dense Triton
    design also: scale, residual, clamp, cast, bias along m, in any order (the dense CuTe sm90, CuTe sm100 and Pallas designs' too), an fp8 forward (fp8_e4m3, fp8_e5m2, or
    one of each) with rowwise scales first (its backward in the output's dtype, the dequantized operands' gradients;
    the scales get none; the dense CuTe sm90, CuTe sm100 and Pallas designs' too, the scales then [bias], [activation] or both), and `batch = true` (each backward GEMM per batch, dB[i] = A[i]^T @ G[i]; a vector's
    gradient summed over the batches and rows; the dense CuTe sm90 and sm100 designs' too, 16-bit, and the Pallas design's, TPU and
    Mosaic GPU; after an fp8 forward the CuTe sm90 and Pallas designs', its scales shared by the batches). A grouped spec takes the same section for
    its ragged-M forward (the grouped Triton design: docs/grouped.md), an fp8 one's too (rowwise scales, then a bias
    and an activation; the grouped Pallas TPU, Mosaic GPU and CuTe sm90 designs' as well)."""

    save: Literal["preact", "recompute"]
    # the GEMM that computes the pre-activation for training: the forward that stores it (preact) or
    # the backward's recompute (recompute); unused without an activation
    pre: BackwardGemm = BackwardGemm()
    dgrad: BackwardGemm = BackwardGemm()
    wgrad: BackwardGemm = BackwardGemm()


def check_training(training: Training | None, data: dict[str, object]) -> Training | None:
    """The forward a backward is generated for (ValueError naming the field and what has a backward)."""
    if training is None:
        return None
    a, b, acc = data.get("a"), data.get("b"), data.get("accumulator")
    if not isinstance(a, Operand) or not isinstance(b, Operand):
        return training  # the operands' own errors are reported
    chain = data.get("epilogue") or []
    ops = [op.op for op in chain]  # type: ignore[attr-defined]
    fp8 = a.dtype.is_fp8 and b.dtype.is_fp8  # e4m3, e5m2 or one of each (the forward's DT001 lets them mix)
    for side, op in (("a", a), ("b", b)):
        if op.dtype not in BACKWARD_DTYPES and not fp8:
            raise ValueError(f"{side}.dtype = {op.dtype.value}: training has a backward for f16, bf16 and f32 operands, "
                             "or fp8 A and B (fp8_e4m3, fp8_e5m2 or one of each) with rowwise scales (an int8 forward, "
                             "or fp8 beside a 16- or 32-bit operand, has no backward); drop `training`")
    if a.dtype != b.dtype and not fp8:
        raise ValueError(f"a.dtype = {a.dtype.value} and b.dtype = {b.dtype.value}: training needs one operand "
                         "dtype (the backward GEMMs multiply the gradient in it)")
    if acc is not None and acc != DType.f32:
        raise ValueError(f"accumulator = {acc.value}: training needs an f32 accumulator")
    out = data.get("out")
    if isinstance(out, Output) and out.dtype not in BACKWARD_DTYPES:
        raise ValueError(f"out.dtype = {out.dtype.value}: training has a backward for f16, bf16 and f32 outputs only")
    if fp8 and (not chain or ops[0] != "scale" or chain[0].by != "rowcol"):  # type: ignore[attr-defined]
        raise ValueError(f"a.dtype = {a.dtype.value} with epilogue {ops}: an fp8 forward's backward (bf16, w.r.t. the "
                         "dequantized operands) needs the rowwise scales first: epilogue[0] = "
                         "{ op = \"scale\", by = \"rowcol\" } (scale_a (M,), scale_b (N,), torch._scaled_mm's)")
    if fp8 and isinstance(out, Output) and out.dtype == DType.f32:
        raise ValueError(f"out.dtype = f32 with {fp8_names(a.dtype, b.dtype)} operands: the fp8 forward's backward runs "
                         "in the output's 16-bit dtype (bf16 or f16); pick one")
    if ops[:1] == ["gated"]:
        # gated (first: check_gated), then at most a bias on its N outputs: pre = A @ B (2N columns) has G
        if ops not in (["gated"], ["gated", "bias"]):
            raise ValueError(f"epilogue {ops}: training with a gated op has a backward for [gated] and [gated, bias] "
                             "(bias along n, on the N outputs); drop `training` or the later ops")
        if len(chain) > 1 and chain[1].along != "n":  # type: ignore[attr-defined]
            raise ValueError("epilogue[1] (bias along m) has no backward after a gated op: training has one for bias "
                             "along n there")
        return training
    for i, op in enumerate(chain):
        if ops[i] == "activation" and op.fn not in BACKWARD_ACTIVATIONS:  # type: ignore[attr-defined]
            raise ValueError(f"epilogue[{i}] (activation {op.fn}) has no backward yet")  # type: ignore[attr-defined]
        if ops[i] == "scale" and op.by == "rowcol" and fp8 and i:  # type: ignore[attr-defined]
            raise ValueError(f"epilogue[{i}] (scale by rowcol): an fp8 forward's dequantization scales come first, "
                             "once")
    return training


def legacy_chain(epilogue: list) -> bool:
    """Whether a chain is one every design that renders training renders ([], [bias], [activation],
    [bias, activation], bias along n; a gated op then at most a bias): the others (scale, residual, clamp, cast, bias
    along m, more than one op of a kind, other orders) are the Triton dense design's only."""
    ops = [op.op for op in epilogue]
    if any(op.op == "bias" and op.along != "n" for op in epilogue):
        return False
    return ops in ([], ["bias"], ["activation"], ["bias", "activation"], ["gated"], ["gated", "bias"])


def legacy_refusal(data: dict[str, object]) -> str:
    """Why a chain (or an fp8 operand: the grouped kind takes an fp8 forward, A and B fp8, in its own check, its
    rowwise scales first) is not one every design renders ("" where it is), for a kind whose designs render only
    those (the grouped kind refuses the rest at load, naming the op)."""
    fp8 = next(((side, op) for side in ("a", "b") if isinstance(op := data.get(side), Operand) and op.dtype.is_fp8), None)
    if fp8 is not None:
        side, a = fp8
        return (f"{side}.dtype = {a.dtype.value}: training has a backward for f16, bf16 and f32 operands, or fp8 A and "
                "B with rowwise scales first (fp8 beside a 16- or 32-bit operand has none); drop `training`")
    chain = data.get("epilogue") or []
    if chain and chain[0].op == "gated":  # type: ignore[attr-defined]
        return ""  # check_training's own messages
    for i, op in enumerate(chain):
        if op.op == "bias" and op.along != "n":  # type: ignore[attr-defined]
            return f"epilogue[{i}] (bias along m) has no backward yet: training has one for bias along n"
        if op.op not in ("bias", "activation", "gated"):  # type: ignore[attr-defined]
            return (f"epilogue[{i}] ({op.op}) has no backward yet here: training has one for the plain GEMM, bias (along "  # type: ignore[attr-defined]
                    "n) and an activation after it, or a gated op first (then a bias); drop `training` or the op")
    if not legacy_chain(chain):
        return (f"epilogue {[op.op for op in chain]}: training has a backward for [bias, activation], [bias], "  # type: ignore[attr-defined]
                "[activation] or none, in that order (one op of each)")
    return ""


def chain_refusal(spec: object, fp8: bool = False, chains: bool = False, batch: bool = False,
                  batch_fp8: bool = False) -> str:
    """What in a training spec only the Triton designs' backward renders ("" where every design that renders
    training does): TRN001's message elsewhere (the Triton designs render every chain their kind takes: TRN001 does
    not concern them). `fp8`: the design renders an fp8 forward's backward too (the dense CuTe sm90 and Pallas
    designs': `renders_fp8_training_on` the target), its
    rowwise scales first and then a chain every design renders ([bias], [activation], [bias, activation]). `chains`:
    it renders the other chains of 16- or 32-bit operands too, unbatched (the dense CuTe sm90 and sm100 designs' chain
    pass, the Pallas design's jnp one: `renders_unbatched_chain_training`); an fp8 one's other chains stay refused.
    `batch`: it renders a batched forward's backward too (the dense CuTe sm90 and sm100 designs' and the Pallas
    design's, TPU and Mosaic GPU: `renders_batched_training`), an fp8 one's only with `batch_fp8` (the CuTe sm90 and
    Pallas designs' since session 34: `renders_batched_fp8_training`; the sm100 one refuses it)."""
    if spec.a.dtype.is_fp8 and not fp8:  # type: ignore[attr-defined]
        return (f"training with {fp8_names(spec.a.dtype, spec.b.dtype)} operands (a bf16 backward w.r.t. the "  # type: ignore[attr-defined]
                "dequantized operands)")
    if getattr(spec, "batch", False) and batch and not batch_fp8 and spec.a.dtype.is_fp8:  # type: ignore[attr-defined]
        return (f"training with batch = true and {fp8_names(spec.a.dtype, spec.b.dtype)} operands (a batched fp8 "  # type: ignore[attr-defined]
                "forward's backward: this design renders an fp8 forward's backward unbatched only)")
    if getattr(spec, "batch", False) and not batch:  # (a grouped spec has no `batch`)
        return ("training with batch = true (a batched GEMM's backward: dA[i] = G[i] @ B[i]^T, dB[i] = A[i]^T @ G[i] "
                "for each batch i, a bias's gradient summed over the batches and rows)")
    epilogue = spec.epilogue  # type: ignore[attr-defined]
    # an fp8 forward's dequantization (its first op: check_training sees to it) has a backward wherever fp8's has one
    rest = epilogue[1:] if spec.a.dtype.is_fp8 else epilogue  # type: ignore[attr-defined]
    if legacy_chain(rest) or (chains and not spec.a.dtype.is_fp8):  # type: ignore[attr-defined]
        return ""
    names = [f"bias along {op.along}" if op.op == "bias" else op.op for op in epilogue]
    if spec.a.dtype.is_fp8:  # type: ignore[attr-defined]
        return (f"training with {fp8_names(spec.a.dtype, spec.b.dtype)} operands and epilogue {names} (an fp8 "  # type: ignore[attr-defined]
                "forward's backward here: its rowwise scales, then [bias], [activation] or [bias, activation])")
    return f"training with epilogue {names}"


def fp8_names(a: DType, b: DType) -> str:
    """An fp8 forward's operand dtypes in a message: "fp8_e5m2", or "fp8_e4m3 x fp8_e5m2" where they mix."""
    return a.value if a == b else f"{a.value} x {b.value}"


# The ops whose backward reads the value they act on (an activation's or clamp's derivative, a scale vector's
# gradient): the forward's value before the first of them (pre) is what the backward starts from.
def value_index(epilogue: list, fp8: bool = False) -> int:
    """The index of the chain's first op whose backward reads its input value (-1 where none does). An fp8
    forward's dequantization (its first op, scale by rowcol) is not one: its scales get no gradient."""
    for i, op in enumerate(epilogue):
        if op.op in ("activation", "clamp", "gated") or (op.op == "scale" and op.by != "scalar" and not (fp8 and i == 0)):
            return i
    return -1


def activation_fn(epilogue: list) -> str:
    """The chain's activation, or its gated op's fn (empty where it has neither)."""
    return next((op.fn for op in epilogue if op.op in ("activation", "gated")), "")


def companions(spec: object) -> tuple[tuple[str, object, tuple[str, ...]], ...]:
    """The GEMMs a training spec's backward runs (and, with an activation, the forward that stores pre or the
    backward's recompute), each as a GEMM spec of its own that resolve and the rules take as they take the
    forward: (label, spec, the field a finding about it points at). `spec` is an effective spec (one target's)."""
    t: Training | None = getattr(spec, "training", None)
    if t is None:
        return ()
    s = spec  # GemmSpec; typed loosely: the spec module imports this one
    a = s.a  # type: ignore[attr-defined]
    out: list[tuple[str, object, tuple[str, ...]]] = []
    if pre := pre_gemm(s):
        # the GEMM that computes pre, derived with the epilogue its kernel runs (`pre_epilogue`), so that every rule
        # (SMEM, registers, TMA boxes, EPI*) sees that kernel; with a gated op it reads B's 2N columns as the forward
        # does (a gate and an up tile a stage, two accumulators)
        label, kept, epilogue, stores = pre
        out.append((label, _derived(s, label, t.pre, a, s.b, kept, epilogue, stores), ("training", "pre")))  # type: ignore[attr-defined]
    # wgrad: dB (K, N) = A^T (K, M) @ G (M, N): A^T's major flips A's, G is N-major. With a gated op N is B's 2N
    # columns (G holds dgate and dup): the same plain GEMMs over a longer N.
    g = backward_dtype(s)
    out.append(("dgrad", _derived(s, "dgrad", t.dgrad, *dgrad_operands(s)), ("training", "dgrad")))
    out.append(("wgrad", _derived(s, "wgrad", t.wgrad, Operand(dtype=g, major=FLIP[a.major]),
                                  Operand(dtype=g, major="mn"), g), ("training", "wgrad")))
    return tuple(out)


# The companions the dense and grouped kinds derive alike (specgen/kinds/grouped/training.py's `companions` too)
FLIP = {"k": "mn", "mn": "k"}  # an operand read transposed: its major flipped


def backward_dtype(spec: object) -> DType:
    """The dtype dgrad and wgrad multiply in (G's, dA's, dB's): the operands', or an fp8 forward's output dtype (the
    dequantized operands' gradients; the fp8 operand converted to it: checked as that dtype's GEMM)."""
    return spec.out.dtype if spec.a.dtype.is_fp8 else spec.b.dtype  # type: ignore[attr-defined]


def dgrad_operands(spec: object) -> tuple[Operand, Operand, DType]:
    """dgrad's A, B and output: dA (M, K) = G (M, N) @ B^T (N, K), G row-major (its reduction dim contiguous: K-major),
    B^T read as B is stored (its major flipped); a grouped kind's ragged-M dgrad reads them alike."""
    g = backward_dtype(spec)
    return Operand(dtype=g, major="k"), Operand(dtype=g, major=FLIP[spec.b.major]), g  # type: ignore[attr-defined]


def pre_gemm(spec: object, fused: bool = True) -> tuple[str, DType, list, int] | None:
    """The GEMM that computes pre (None where the backward reads none: G = dOut): its label (forward_pre where
    save = "preact", else recompute), output dtype, epilogue and stored matrices (`pre_epilogue`). Its output: pre in
    the output's dtype (forward_pre), a recompute's G in the operands' dtype where its epilogue forms G from dOut, or
    pre in f32. `fused`: the dense designs' pre kernels, whose epilogue runs the rest of the chain (forward_pre) or forms
    G; unfused, the grouped kind's (each grouped design renders its forward kernel again at this companion's config,
    a streaming pass forming out or G beside it), which apply the ops before pre and store pre as their output."""
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    if not activation_fn(spec.epilogue) and value_index(spec.epilogue, fp8) < 0:  # type: ignore[attr-defined]
        return None
    label = "forward_pre" if spec.training.save == "preact" else "recompute"  # type: ignore[attr-defined]
    epilogue, stores = pre_epilogue(spec, label, fused)
    forms_g = any(getattr(op, "name", "") == DOUT and op.op == "residual" for op in epilogue)
    kept = spec.out.dtype if label == "forward_pre" else spec.b.dtype if forms_g else DType.f32  # type: ignore[attr-defined]
    return label, kept, epilogue, stores


# The name of the dOut operand in a recompute companion's epilogue, which the rules count as a residual (never rendered:
# the Triton backward's own name for it, reserved, so no argument of the spec's chain shares it)
DOUT = "dout"


def pre_epilogue(spec: object, role: str, fused: bool = True) -> tuple[list, int]:
    """The epilogue the GEMM computing pre (forward_pre, recompute) runs, as a chain the rules read, and the matrices
    it stores beside its output (GemmSpec.stores): forward_pre applies the forward's whole chain and stores pre beside
    out (a gated op's gate and up halves: two); a recompute whose epilogue forms G (the chains every design renders,
    an activation or a gated op) reads dOut, a matrix of the output's shape and dtype, which its chain counts as a
    residual (named DOUT), beside the ops G needs: the bias and the activation (its derivative in the kernel), or the
    gated op alone (the bias after the gate plays no part in G; G's up half stored beside its gate half); the other
    recomputes (the other chains, an fp8 forward's) apply the ops before pre (`value_index`) and store pre as their
    output, as an unfused pre kernel (`fused` False: the grouped kind's, either role) does."""
    epilogue = list(spec.epilogue)  # type: ignore[attr-defined]
    gated = gated_op(epilogue)
    fp8 = spec.a.dtype.is_fp8  # type: ignore[attr-defined]
    if role == "forward_pre" and fused:
        return epilogue, 2 if gated is not None else 1
    if not fused or fp8 or not legacy_chain(epilogue):
        return epilogue[:value_index(epilogue, fp8)], 0
    dout = Residual.model_construct(op="residual", dtype=spec.out.dtype, beta=1.0, name=DOUT)  # type: ignore[attr-defined]
    return ([gated, dout], 1) if gated is not None else ([*epilogue, dout], 0)


def _derived(s: object, label: str, cfg: BackwardGemm | None, a: Operand, b: Operand, out: DType,
             epilogue: list | None = None, stores: int = 0) -> object:
    """A GEMM read through TMA (its kernel's pointer form, for layouts TMA cannot read, needs no more SMEM: one
    program per tile, no split-K) with the given operands and the config `cfg` gives over the forward's. Its
    Triton options carry the role: the Triton design plans backward.jinja's kernel for it (persistent, its own
    stores), not its forward kernel."""
    cfg = cfg or BackwardGemm()
    own = role_config(s, cfg)
    triton = s.triton.model_copy(update={  # type: ignore[attr-defined]
        "tma": True, "swap_ab": False, "flatten": False, "epilogue_subtile": False, **own.pop("triton")}).for_backward(label)
    pipeline = own.pop("pipeline")
    if label == "forward_pre":  # pre's epilogue subtiles beside out's (a TMA-storing design stages them in SMEM: pre's
        # one, or a gated pre's gate and up where they are halves, each a box of its own)
        stages = s.pipeline.epilogue_stages  # type: ignore[attr-defined]
        per = 3 if any(getattr(op, "layout", "") == "halves" for op in epilogue or []) else 2
        pipeline = pipeline.model_copy(update={"epilogue_stages": per * (DEFAULT_EPILOGUE_STAGES if stages == "auto" else stages)})
    derived = s.model_copy(update={  # type: ignore[attr-defined]
        "name": f"{s.name}_{label}", "a": a, "b": b, "out": Output(dtype=out), "epilogue": epilogue or [],  # type: ignore[attr-defined]
        "triton": triton, "pipeline": pipeline, **own,
        "schedule": Schedule(group_m=s.schedule.group_m), "training": None,  # type: ignore[attr-defined]
        "per_target": {}, "variants": []})
    derived._stores = stores
    return derived


def role_config(s: object, cfg: BackwardGemm) -> dict[str, object]:
    """A backward GEMM's config over the forward's (dense and grouped): the tile, stages and CuTe schedule `cfg` gives,
    the forward's where not, and `triton`: the Triton options' update (its warps). A role's own schedule replaces the
    forward's split of a tile between warpgroups (ping-pong: a whole tile each)."""
    cute = s.cute if cfg.schedule is None else s.cute.model_copy(update={  # type: ignore[attr-defined]
        "schedule": cfg.schedule, **({"mma_warpgroups": None} if cfg.schedule == "pingpong" else {})})
    return {"tile": cfg.tile or s.tile, "cute": cute,  # type: ignore[attr-defined]
            "pipeline": s.pipeline if cfg.ab_stages is None else Pipeline(ab_stages=cfg.ab_stages),  # type: ignore[attr-defined]
            "triton": {"num_warps": cfg.num_warps} if cfg.num_warps is not None else {}}


class SaveModes:
    """What a backward plan's `save` means for its kernels (a plan dataclass of each design that renders training
    has `save` and `act`): pre stored by the forward, or recomputed by the backward; neither without an activation."""

    save: str
    act: str

    @property
    def reads_pre(self) -> bool:
        """Whether the backward starts from pre: an activation's input, or (a plan of the other chains, with `chain`
        and `start`) the value before the first op whose backward reads one."""
        return getattr(self, "start", -1) >= 0 if getattr(self, "chain", None) else bool(self.act)

    @property
    def stores_pre(self) -> bool:
        return self.reads_pre and self.save == "preact"

    @property
    def recomputes(self) -> bool:
        return self.reads_pre and self.save == "recompute"
