"""The `training` section (specgen/kinds/gemm/training.py): absent by default (a spec dumps and hashes as before),
validated with errors that name the field and what has a backward, its backward GEMMs resolved as companions
that the same rules check (findings labelled and pointing into `training`), TRN001 off the Triton design,
and the derivative table against torch's float64 autograd (the formulas the backward kernels render)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from kernels import MINIMAL_SPEC

from specgen.check import check_specs
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import ACTIVATIONS
from specgen.kinds.gemm.training import chain_refusal
from specgen.spec.formulas import DERIVATIVE_PRIMITIVES, DERIVATIVES, FORMULAS
from specgen.spec.load import SpecError, load_text


def spec(**changes: object) -> dict:
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update({"epilogue": [{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}], "training": {"save": "preact"}})
    d.update(changes)
    return d


def load(d: dict):
    (loaded,) = load_text(json.dumps({"kernels": [d]}), "<test>", ".json")
    return loaded


def refusal(d: dict) -> str:
    with pytest.raises(SpecError) as info:
        load(d)
    return str(info.value)


def test_absent_training_dumps_as_before() -> None:
    d = copy.deepcopy(MINIMAL_SPEC)
    assert "training" not in GemmSpec.model_validate(d).model_dump(mode="json")
    assert GemmSpec.model_validate(d).companions() == ()


@pytest.mark.parametrize(("changes", "fragments"), [
    ({"training": {"save": "later"}}, ["training.save", "preact", "recompute"]),
    ({"training": {}}, ["training.save", "Field required"]),
    ({"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "bf16"}}, ["a.dtype = fp8_e5m2", "or fp8 beside a 16- or 32-bit operand"]),
    ({"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e5m2"}},
     ["a.dtype = fp8_e5m2 with epilogue ['bias', 'activation']", "epilogue[0] = { op = \"scale\", by = \"rowcol\" }"]),
    ({"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "i32"}, ["a.dtype = int8", "no backward"]),
    ({"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3"}},
     ["a.dtype = fp8_e4m3 with epilogue ['bias', 'activation']", "epilogue[0] = { op = \"scale\", by = \"rowcol\" }"]),
    ({"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3"}, "out": {"dtype": "f32"},
      "epilogue": [{"op": "scale", "by": "rowcol"}]}, ["out.dtype = f32 with fp8_e4m3 operands"]),
    ({"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e5m2"}, "out": {"dtype": "f32"},
      "epilogue": [{"op": "scale", "by": "rowcol"}]}, ["out.dtype = f32 with fp8_e4m3 x fp8_e5m2 operands"]),
    ({"epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "activation", "fn": "relu"}]},
     ["epilogue ['gated', 'activation']: training with a gated op has a backward for [gated] and [gated, bias]"]),
    ({"epilogue": [{"op": "gated", "fn": "gelu", "layout": "interleaved"}, {"op": "bias", "along": "m"}]},
     ["epilogue[1] (bias along m) has no backward after a gated op"]),
    ({"training": {"save": "preact", "dgrad": {"num_warps": 0}}}, ["training.dgrad.num_warps"]),
])
def test_what_has_no_backward_is_refused_naming_the_field(changes: dict, fragments: list[str]) -> None:
    text = refusal(spec(**changes))
    for f in fragments:
        assert f in text, text
    assert "<test>:" in text  # a position, not a traceback


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_companions_are_the_backward_gemms(save: str) -> None:
    s = GemmSpec.model_validate(spec(training={"save": save, "dgrad": {"tile": {"m": 64, "n": 64, "k": 32}}}))
    labels = [label for label, _, _ in s.companions()]
    assert labels == ["forward_pre" if save == "preact" else "recompute", "dgrad", "wgrad"]
    comp = {label: c for label, c, _ in s.companions()}
    # dgrad: G (M, N) K-major @ B^T, B k-major -> B^T mn-major; wgrad: A^T (A k-major -> mn) @ G (mn)
    assert (comp["dgrad"].a.major, comp["dgrad"].b.major, comp["dgrad"].tile.m) == ("k", "mn", 64)
    assert (comp["wgrad"].a.major, comp["wgrad"].b.major, comp["wgrad"].tile.m) == ("mn", "mn", 128)
    assert all(c.triton.tma and c.training is None for c in comp.values())
    assert not comp["dgrad"].epilogue and not comp["wgrad"].epilogue
    # the pre GEMM carries the epilogue its kernel runs: forward_pre the forward's chain, storing pre beside out;
    # recompute the bias and the activation (its derivative) with dOut read as a residual of the output's shape
    pre = comp["forward_pre" if save == "preact" else "recompute"]
    ops = [(op.op, getattr(op, "name", "")) for op in pre.epilogue]
    assert ops == [("bias", "bias"), ("activation", "")] + ([] if save == "preact" else [("residual", "dout")])
    assert pre.stores == (save == "preact")
    assert save == "preact" or pre.epilogue[-1].dtype == s.out.dtype  # dOut: the output's dtype
    plain = GemmSpec.model_validate(spec(epilogue=[{"op": "bias"}]))
    assert [label for label, _, _ in plain.companions()] == ["dgrad", "wgrad"]  # nothing to save or recompute


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_a_gated_forward_has_a_backward_checked_as_the_gated_gemm(layout: str) -> None:
    """[gated] and [gated, bias] load; the GEMM that computes pre is checked as the gated GEMM it is (B's 2N columns
    a stage: an interleaved box of 2 tile.n), dgrad and wgrad as the plain ones; the Triton target passes."""
    gated = {"op": "gated", "fn": "silu", "layout": layout}
    for chain in ([gated], [gated, {"op": "bias"}]):
        s = GemmSpec.model_validate(spec(epilogue=chain, training={"save": "recompute"}))
        comp = {label: c for label, c, _ in s.companions()}
        assert list(comp) == ["recompute", "dgrad", "wgrad"]
        # recompute: the gated op (no bias: G does not read it) and dOut, G's up half stored beside its gate half
        assert comp["recompute"].epilogue[0] == s.epilogue[0] and not comp["dgrad"].epilogue and not comp["wgrad"].epilogue
        assert [op.op for op in comp["recompute"].epilogue] == ["gated", "residual"] and comp["recompute"].stores == 1
    report = check_specs([load(spec(epilogue=[gated, {"op": "bias"}], tile={"m": 128, "n": 128, "k": 64}))])
    assert not [d for d in report.diagnostics if d.severity == "error"], [str(d) for d in report.diagnostics]
    # the pre GEMM's stages hold a gate and an up box of B: 5 x (128 x 64 + 2 x 128 x 64) x 2 B = 240 KiB, past
    # sm_90's SMEM; dgrad with the same tile and stages (one B box: 160 KiB) passes
    cfg = {"tile": {"m": 128, "n": 128, "k": 64}, "ab_stages": 5}
    d = spec(epilogue=[gated], training={"save": "preact", "pre": cfg, "dgrad": cfg})
    errors = [x for x in check_specs([load(d)]).diagnostics if x.severity == "error"]
    assert errors and {x.variant for x in errors} == {"backward forward_pre"}, [str(x) for x in errors]
    assert {x.rule for x in errors} == {"SMEM001"} and "A/B 5 x 49152 = 245760" in str(errors[0]), str(errors[0])


def test_a_backward_gemm_is_checked_by_the_same_rules_at_its_field() -> None:
    """A dgrad tile past SMEM is SMEM001 on the backward dgrad, at training.dgrad; the forward passes."""
    text = json.dumps({"kernels": [spec(training={"save": "recompute", "dgrad": {"tile": {"m": 256, "n": 256, "k": 256}}})]})
    (loaded,) = load_text(text.replace('"dgrad"', '\n"dgrad"'), "<test>", ".json")
    report = check_specs([loaded])
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert errors and all(d.variant == "backward dgrad" for d in errors), [str(d) for d in errors]
    assert {d.rule for d in errors} >= {"SMEM001"} and all(d.line == 2 for d in errors)
    assert "backward dgrad" in str(errors[0])


CHAINS = [
    [{"op": "residual", "dtype": "bf16"}], [{"op": "bias", "along": "m"}], [{"op": "activation", "fn": "relu"}, {"op": "bias"}],
    [{"op": "scale", "by": "rowcol"}, {"op": "clamp", "min": 0.0}, {"op": "cast", "dtype": "f16"}],
    [{"op": "scale", "by": "scalar"}, {"op": "activation", "fn": "gelu"}, {"op": "scale", "by": "col"}],
]


@pytest.mark.parametrize("chain", CHAINS, ids=["residual", "bias_m", "relu_bias", "rowcol_clamp_cast", "alpha_gelu_col"])
def test_the_other_chains_load_and_pass_on_the_triton_and_cute_sm90_designs(chain: list) -> None:
    """scale, residual, clamp, cast, bias along m, in any order: the section accepts them; the Triton target renders
    their backward (its companions: the pre GEMM where an op reads a value), and since session 33 the dense CuTe sm90
    and sm100 designs' chain pass (16-bit operands, the sm90 one's batched too since session 33:
    `renders_batched_training`) and the Pallas design's (TPU and Mosaic GPU, unbatched): no TRN001 on any of them;
    chain_refusal's message (TRN001's on a design that renders training but not these chains) unchanged."""
    d = spec(epilogue=chain, targets=["triton:sm90", "cute:sm90", "cute:sm100", "pallas:tpu_v6e", "pallas:gpu_sm90"],
             out={"dtype": "bf16"}, tile={"m": 128, "n": 128, "k": 64},
             per_target={"cute:sm90": {"cute": {"mma_warpgroups": 2}}})
    report = check_specs([load(d)])
    trn = [x for x in report.diagnostics if x.rule == "TRN001"]
    assert not trn, [str(x) for x in trn]
    errors = [str(x) for x in report.diagnostics if x.severity == "error" and not x.target.startswith("pallas")]
    assert not errors, errors
    assert chain_refusal(GemmSpec.model_validate(d)).startswith("training with epilogue [")  # elsewhere: as before
    assert not chain_refusal(GemmSpec.model_validate(d), chains=True)
    # batched: the CuTe sm90 and Pallas designs (session 33) and the CuTe sm100 design (session 34) render it too
    # (`renders_batched_training`): no TRN001 on a CuTe target
    trn = [x for x in check_specs([load({**d, "batch": True})]).diagnostics if x.rule == "TRN001" and x.target.startswith("cute")]
    assert not trn, [str(x) for x in trn]
    assert not chain_refusal(GemmSpec.model_validate({**d, "batch": True}), chains=True, batch=True)
    assert chain_refusal(GemmSpec.model_validate({**d, "batch": True}), chains=True).startswith("training with batch = true")
    labels = [label for label, _, _ in GemmSpec.model_validate(d).companions()]
    reads = any(op["op"] in ("activation", "clamp") or (op["op"] == "scale" and op["by"] != "scalar") for op in chain)
    assert labels == (["forward_pre"] if reads else []) + ["dgrad", "wgrad"]


@pytest.mark.parametrize(("a_dtype", "b_dtype", "named"), [("fp8_e4m3", "fp8_e4m3", "fp8_e4m3"),
                                                           ("fp8_e5m2", "fp8_e5m2", "fp8_e5m2"),
                                                           ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3 x fp8_e5m2")])
def test_an_fp8_forward_has_a_16_bit_backward(a_dtype: str, b_dtype: str, named: str) -> None:
    """fp8 A and B (e4m3, e5m2 or one of each) with rowwise scales first: loads; dgrad and wgrad are checked as GEMMs
    of the output's dtype (G times the fp8 operand converted exactly), both operands bf16; TRN001 off the Triton,
    dense CuTe sm90 and (session 32) Pallas designs (TPU and Mosaic GPU); `chain_refusal` (TRN001's message on a
    design that renders no fp8 backward: none of the shipped ones that render training) names the fp8 dtypes."""
    d = spec(a={"dtype": a_dtype, "major": "k"}, b={"dtype": b_dtype, "major": "k"}, out={"dtype": "bf16"},
             epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}],
             tile={"m": 128, "n": 128, "k": 128}, targets=["triton:sm90", "cute:sm90", "pallas:tpu_v7x", "pallas:gpu_sm90"])
    comp = {label: c for label, c, _ in GemmSpec.model_validate(d).companions()}
    assert list(comp) == ["dgrad", "wgrad"]  # the dequantization reads no value: no pre
    assert {c.a.dtype.value for c in comp.values()} == {c.b.dtype.value for c in comp.values()} == {"bf16"}
    trn = [x for x in check_specs([load(d)]).diagnostics if x.rule == "TRN001"]
    assert not trn, [str(x) for x in trn]
    assert chain_refusal(GemmSpec.model_validate(d)).startswith(f"training with {named} operands (a bf16 backward")
    with pytest.raises(SpecError, match=r"epilogue\[1\] \(scale by rowcol\)"):
        load(spec(a={"dtype": "fp8_e4m3"}, b={"dtype": "fp8_e4m3"}, out={"dtype": "bf16"},
                  epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "scale", "by": "rowcol"}]))


@pytest.mark.parametrize(("changes", "says"), [
    ({"epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "gelu"}, {"op": "clamp", "max": 4.0}]},
     "training with fp8_e4m3 operands and epilogue ['scale', 'activation', 'clamp'] (an fp8 forward's backward here: "
     "its rowwise scales, then [bias], [activation] or [bias, activation])"),
    ({"epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "along": "m"}]},
     "training with fp8_e4m3 operands and epilogue ['scale', 'bias along m']"),
    ({"epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "along": "m"}], "batch": True},
     "training with fp8_e4m3 operands and epilogue ['scale', 'bias along m']"),
], ids=["clamp", "bias_m", "batch_bias_m"])
def test_the_cute_sm90_fp8_backward_refuses_the_rest(changes: dict, says: str) -> None:
    """cute:sm90 renders an fp8 forward's backward with its rowwise scales, then [bias], [activation] or both (bias
    along n), batched too since session 34: TRN001 there names any other chain (batched or not), with the Triton design
    that renders them."""
    d = spec(a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
             epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}],
             tile={"m": 128, "n": 128, "k": 128}, targets=["triton:sm90", "cute:sm90"])
    (trn,) = [x for x in check_specs([load({**d, **changes})]).diagnostics if x.rule == "TRN001"]
    assert trn.target == "cute:sm90" and says in trn.message and "(the Triton design does)" in trn.message, str(trn)


@pytest.mark.parametrize("epilogue", [[{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}],
                                      [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias"}]],
                         ids=["bias_gelu_tanh", "gated"])
def test_a_batched_forward_has_a_backward_on_the_triton_cute_and_pallas_designs(epilogue: list) -> None:
    """batch = true loads (it was refused: "batch = true: a batched GEMM has no backward yet"); the Triton and (session
    33: `renders_batched_training`) dense CuTe sm90 and Pallas (Mosaic GPU here) targets and (session 34) the dense CuTe
    sm100 one check its backward GEMMs as GEMMs of their own (the companions keep the batch): no TRN001, no error."""
    d = spec(epilogue=epilogue, batch=True, targets=["triton:sm90", "triton:sm100", "cute:sm90", "cute:sm100", "pallas:gpu_sm90"],
             tile={"m": 128, "n": 128, "k": 64}, per_target={"cute:sm90": {"cute": {"mma_warpgroups": 2}}})
    loaded = load(d)
    assert all(c.batch for _, c, _ in loaded.spec.companions())
    report = check_specs([loaded])
    trn = [x for x in report.diagnostics if x.rule == "TRN001"]
    assert not trn, [str(x) for x in trn]
    errors = [x for x in report.diagnostics if x.severity == "error"]
    assert not errors, [str(x) for x in errors]


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_a_batched_fp8_forward_has_a_backward_on_the_cute_sm90_and_pallas_designs(save: str) -> None:
    """batch = true with an fp8 forward (its rowwise scales shared by the batches; session 34:
    `renders_batched_fp8_training`): no TRN001 on the Triton, dense CuTe sm90 and Pallas targets (Mosaic GPU here; the TPU:
    tests/backends/pallas/test_training_tpu_batch_fp8.py), the companions keeping the batch; `chain_refusal` refuses it only to a design that renders a batched and an fp8 backward but not the two
    together (TRN001's message, naming the designs that render it)."""
    d = spec(a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
             epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
             tile={"m": 128, "n": 128, "k": 128}, batch=True, training={"save": save},
             targets=["triton:sm90", "cute:sm90", "pallas:gpu_sm90"], per_target={"cute:sm90": {"cute": {"mma_warpgroups": 2}}})
    loaded = load(d)
    assert all(c.batch for _, c, _ in loaded.spec.companions())
    errors = [str(x) for x in check_specs([loaded]).diagnostics if x.severity == "error"]
    assert not errors, errors
    s = GemmSpec.model_validate(d)
    assert not chain_refusal(s, fp8=True, chains=True, batch=True, batch_fp8=True)
    assert chain_refusal(s, fp8=True, chains=True, batch=True).startswith(
        "training with batch = true and fp8_e4m3 operands (a batched fp8 forward's backward: this design renders an fp8 "
        "forward's backward unbatched only)")
    trn = [x for x in check_specs([load({**d, "targets": ["cute:sm100"], "per_target": {}})]).diagnostics if x.rule == "TRN001"]
    assert len(trn) == 1 and trn[0].message.startswith("training with batch = true"), [str(x) for x in trn]
    assert "(the CuTe sm90, Pallas (TPU, Mosaic GPU) and Triton designs do)" in trn[0].message, trn[0].message


def test_trn001_off_the_triton_design() -> None:
    """The CuTe designs render a 16-bit backward on sm90 and (session 33: designs/cute_sm100/training.py) sm100: no
    TRN001 on either; the sm100 target resolves and rules its companions as GEMMs of their own (2-CTA too)."""
    d = spec(targets=["triton:sm90", "cute:sm90", "cute:sm100"],
             per_target={"cute:sm100": {"cute": {"two_cta": True}, "cluster": {"m": 2, "n": 1}}})
    report = check_specs([load(d)])
    assert not [x for x in report.diagnostics if x.rule == "TRN001" or x.severity == "error"], [str(x) for x in report.diagnostics]
    from specgen.resolve import resolve
    from specgen.spec.models import parse_target

    r = resolve(load(d).spec, parse_target("cute:sm100"))
    assert [c.companion for c in r.companions] == ["forward_pre", "dgrad", "wgrad"]
    assert all(c.spec.cute.two_cta and c.budget.fits for c in r.companions)
    # a gated epilogue's backward: both layouts on both (interleaved on cute:sm100 since session 33)
    for layout in ("halves", "interleaved"):
        gated = spec(targets=["cute:sm90", "cute:sm100"], epilogue=[{"op": "gated", "fn": "silu", "layout": layout}])
        assert not [x for x in check_specs([load(gated)]).diagnostics if x.rule == "TRN001"], layout


def test_the_cute_sm90_backward_takes_16_bit_operands_with_an_output_of_their_dtype() -> None:
    """TRN001 on cute:sm90 (designs/cute_sm90/training.py): an f32 output refused, naming the dtypes."""
    report = check_specs([load(spec(targets=["cute:sm90"], out={"dtype": "f32"}))])
    (trn,) = [d for d in report.diagnostics if d.rule == "TRN001"]
    assert "out.dtype = f32" in trn.message and "f16 or bf16 operands" in trn.message


@pytest.mark.parametrize("fn", list(ACTIVATIONS))
def test_derivative_equals_torch_autograd_in_float64(fn: str) -> None:
    from test_formulas import evaluate  # the table's evaluator (primitives as torch ops)

    x = torch.cat([torch.linspace(-12, 12, 2001, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, float("nan"), 1e-30, -1e-30], dtype=torch.float64)]).requires_grad_()
    (want,) = torch.autograd.grad(ACTIVATIONS[fn](x).sum(), x)
    got = evaluate(DERIVATIVES[fn].expr, x.detach())
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.allclose(got.nan_to_num(0), want.nan_to_num(0), rtol=1e-12, atol=1e-14)
    assert DERIVATIVES[fn].expr.kinds() <= set(DERIVATIVE_PRIMITIVES)
    assert set(DERIVATIVES) <= set(FORMULAS)
