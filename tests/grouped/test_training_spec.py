"""The grouped kind's `training` section (specgen/kinds/grouped/training.py, the dense kind's model and checks):
absent by default (a grouped spec dumps and hashes as before), refused where the grouped kind has no backward (a
ragged-K forward, a gated op, fp8, an op other than bias and activation), naming the field; its backward GEMMs are
grouped specs (the ragged-M GEMM that stores pre, dgrad ragged M with the tail zeroed and B's major flipped, wgrad
ragged K) resolved as companions the same rules check at `training.*`; TRN001 off the grouped Triton design."""

from __future__ import annotations

import copy
import json

import pytest

from specgen.check import check_specs
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.spec.load import SpecError, load_text

BASE: dict = {
    "name": "g", "kind": "grouped",
    "a": {"dtype": "bf16"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"},
    "epilogue": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
    "training": {"save": "preact"},
    "tile": {"m": 128, "n": 128, "k": 64}, "targets": ["triton:sm90"],
}


def spec(**changes: object) -> dict:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def load(d: dict, text: str | None = None):
    (loaded,) = load_text(text or json.dumps({"kernels": [d]}), "<test>", ".json")
    return loaded


def refusal(d: dict) -> str:
    with pytest.raises(SpecError) as info:
        load(d)
    return str(info.value)


def test_absent_training_dumps_as_before() -> None:
    d = spec()
    del d["training"]
    assert "training" not in GroupedSpec.model_validate(d).model_dump(mode="json")
    assert GroupedSpec.model_validate(d).companions() == ()


@pytest.mark.parametrize(("changes", "fragments"), [
    ({"groups": {"ragged": "k"}, "epilogue": []}, ["groups.ragged = 'k' with `training`", "ragged-M forward"]),
    ({"epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "activation", "fn": "relu"}]},
     ["epilogue ['gated', 'activation']: training with a gated op has a backward for [gated] and [gated, bias]"]),
    # an fp8 forward: its rowwise scales first, then [bias], [activation] or [bias, activation]; fp8 beside bf16: none
    ({"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3", "major": "k"}, "epilogue": []},
     ["a.dtype = fp8_e4m3 with epilogue []", "needs the rowwise scales first"]),
    ({"a": {"dtype": "bf16"}, "b": {"dtype": "fp8_e5m2", "major": "k"}, "epilogue": []},
     ["b.dtype = fp8_e5m2: training has a backward for f16, bf16 and f32 operands, or fp8 A and B",
      "fp8 beside a 16- or 32-bit operand has none"]),
    ({"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e5m2", "major": "k"},
      "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "clamp", "max": 1.0}]}, ["epilogue[1] (clamp) has no backward"]),
    ({"a": {"dtype": "fp8_e5m2"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
      "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "relu"}, {"op": "bias"}]},
     ["epilogue[1:] ['activation', 'bias']", "in that order"]),
    ({"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
      "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]}, ["a gated epilogue with fp8 operands"]),
    ({"epilogue": [{"op": "scale", "by": "row"}]}, ["epilogue[0] (scale) has no backward yet"]),
    ({"epilogue": [{"op": "activation", "fn": "relu"}, {"op": "bias"}]}, ["in that order"]),
    ({"training": {"save": "later"}}, ["training.save", "preact", "recompute"]),
])
def test_what_has_no_backward_is_refused_naming_the_field(changes: dict, fragments: list[str]) -> None:
    text = refusal(spec(**changes))
    for f in fragments:
        assert f in text, text
    assert "<test>:" in text  # a position, not a traceback


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"), ("fp8_e4m3", "fp8_e5m2")])
def test_an_fp8_forward_loads_with_a_16_bit_backward(a_dtype: str, b_dtype: str) -> None:
    """fp8 A and B (e4m3, e5m2, one of each) with the rowwise scales first: loads; pre's GEMM keeps the scales and
    the bias, dgrad and wgrad are grouped GEMMs of the output's dtype (the fp8 operand converted in registers)."""
    s = GroupedSpec.model_validate(spec(a={"dtype": a_dtype, "major": "k"}, b={"dtype": b_dtype, "major": "k"},
                                        out={"dtype": "bf16"}, tile={"m": 64, "n": 64, "k": 64},
                                        epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias"},
                                                  {"op": "activation", "fn": "gelu"}]))
    comp = {label: c for label, c, _ in s.companions()}
    assert [op.op for op in comp["forward_pre"].epilogue] == ["scale", "bias"]
    for label in ("dgrad", "wgrad"):
        assert (comp[label].a.dtype.value, comp[label].b.dtype.value, comp[label].out.dtype.value) == ("bf16",) * 3


@pytest.mark.parametrize("chain", [[], [{"op": "bias"}], [{"op": "activation", "fn": "silu"}],
                                   [{"op": "bias"}, {"op": "activation", "fn": "relu"}]])
def test_the_covered_chains_load_with_either_index_and_tail(chain: list) -> None:
    for groups in ({"index": "offs", "tail": "untouched"}, {"index": "sizes", "tail": "zero"}):
        s = GroupedSpec.model_validate(spec(epilogue=chain, groups=groups))
        assert s.training is not None and s.training.save == "preact"


@pytest.mark.parametrize(("save", "b_major"), [("preact", "k"), ("recompute", "mn")])
def test_companions_are_grouped_gemms(save: str, b_major: str) -> None:
    s = GroupedSpec.model_validate(spec(b={"dtype": "bf16", "major": b_major}, groups={"index": "sizes"},
                                        training={"save": save, "dgrad": {"tile": {"m": 64, "n": 64, "k": 32}}}))
    comp = {label: c for label, c, _ in s.companions()}
    pre = "forward_pre" if save == "preact" else "recompute"
    assert list(comp) == [pre, "dgrad", "wgrad"]
    # pre: the forward's GEMM with the bias and no activation, in out's dtype (preact) or f32 (recompute)
    assert [op.op for op in comp[pre].epilogue] == ["bias"] and comp[pre].out.dtype.value == ("bf16" if save == "preact" else "f32")
    # dgrad: G (rows, N) @ B[g]^T, ragged M, B's major flipped, rows past the last group zeroed
    d = comp["dgrad"]
    assert (d.groups.ragged, d.groups.tail, d.groups.index, d.a.major, d.b.major, d.tile.m) == (
        "m", "zero", "sizes", "k", {"k": "mn", "mn": "k"}[b_major], 64)
    # wgrad: ragged K, both operands with their own rows contiguous (A^T or G^T, A or G), no epilogue
    w = comp["wgrad"]
    assert (w.groups.ragged, w.a.major, w.b.major, w.tile.m, w.epilogue) == ("k", "mn", "mn", 128, [])
    # TMA loads where the forward has them: on ragged M (pre, dgrad) and on ragged K (wgrad: whole K tiles, GRP103)
    assert [comp[label].triton.tma for label in (pre, "dgrad", "wgrad")] == [True, True, True]
    assert all(c.training is None for c in comp.values())
    untma = GroupedSpec.model_validate(spec(training={"save": save}, triton={"tma": False}))
    assert not any(c.triton.tma for _, c, _ in untma.companions())
    plain = GroupedSpec.model_validate(spec(epilogue=[{"op": "bias"}]))
    assert [label for label, _, _ in plain.companions()] == ["dgrad", "wgrad"]  # nothing to save or recompute


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_the_pre_gemm_is_the_unfused_form_of_the_dense_kinds(save: str) -> None:
    """The grouped pre kernel stores pre and nothing else (act_rows / grad_cols beside it), where the dense kind's
    fuses the chain (forward_pre) or G from dOut (recompute): one rule, `pre_gemm`'s `fused`. An fp8 forward's
    recompute is unfused in both kinds: the same chain and dtype. A role's ping-pong drops the forward's warpgroup
    split in both (then GRP302 on grouped cute:sm90)."""
    from specgen.kinds.gemm.spec import GemmSpec

    chain = BASE["epilogue"]
    dense = GemmSpec.model_validate({**spec(), "kind": "gemm", "epilogue": chain, "training": {"save": save}})
    dense_pre, grouped_pre = (next(c for _, c, f in s.companions() if f == ("training", "pre")) for s in (
        dense, GroupedSpec.model_validate(spec(training={"save": save}))))
    fused = {"preact": ["bias", "activation"], "recompute": ["bias", "activation", "residual"]}[save]
    assert [op.op for op in dense_pre.epilogue] == fused and [op.op for op in grouped_pre.epilogue] == ["bias"]
    assert grouped_pre.out.dtype.value == ("bf16" if save == "preact" else "f32")
    fp8 = {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
           "epilogue": [{"op": "scale", "by": "rowcol"}, *chain], "training": {"save": "recompute"}}
    d8, g8 = (next(c for _, c, f in s.companions() if f == ("training", "pre")) for s in (
        GemmSpec.model_validate({**spec(**fp8), "kind": "gemm"}), GroupedSpec.model_validate(spec(**fp8))))
    assert [op.op for op in d8.epilogue] == [op.op for op in g8.epilogue] == ["scale", "bias"]
    assert d8.out.dtype == g8.out.dtype and g8.out.dtype.value == "f32"
    pp = GroupedSpec.model_validate(spec(cute={"mma_warpgroups": 2}, training={"save": save, "dgrad": {"schedule": "pingpong"}}))
    (dgrad,) = [c for label, c, _ in pp.companions() if label == "dgrad"]
    assert (dgrad.cute.schedule, dgrad.cute.mma_warpgroups, pp.cute.mma_warpgroups) == ("pingpong", None, 2)


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_a_gated_forward_has_a_backward_over_2n(layout: str) -> None:
    """[gated] and [gated, bias] load; the GEMM that computes pre is the plain ragged-M GEMM over B's 2N columns
    (no epilogue: gate and up stored as they come, the bias being after the gate), dgrad and wgrad the plain ones;
    check passes on the Triton target (TRN001 does not fire: the grouped Triton design renders the gated backward)."""
    gated = {"op": "gated", "fn": "silu", "layout": layout}
    for chain in ([gated], [gated, {"op": "bias", "dtype": "bf16"}]):
        s = GroupedSpec.model_validate(spec(epilogue=chain, training={"save": "recompute"}))
        comp = {label: c for label, c, _ in s.companions()}
        assert list(comp) == ["recompute", "dgrad", "wgrad"] and not any(c.epilogue for c in comp.values())
        report = check_specs([load(spec(epilogue=chain))])
        assert not [d for d in report.diagnostics if d.severity == "error"], [str(d) for d in report.diagnostics]


def test_a_backward_gemm_is_checked_by_the_same_rules_at_its_field() -> None:
    """A dgrad tile past SMEM is SMEM001 on the backward dgrad, at training.dgrad; the forward and the default
    backward pass."""
    assert not [d for d in check_specs([load(spec())]).diagnostics if d.severity == "error"]
    d = spec(training={"save": "recompute", "dgrad": {"tile": {"m": 256, "n": 256, "k": 256}}})
    report = check_specs([load(d, json.dumps({"kernels": [d]}).replace('"dgrad"', '\n"dgrad"'))])
    errors = [x for x in report.diagnostics if x.severity == "error"]
    assert errors and all(x.variant == "backward dgrad" for x in errors), [str(x) for x in errors]
    assert {x.rule for x in errors} >= {"SMEM001"} and all(x.line == 2 for x in errors)


def test_trn001_off_the_designs_that_render_the_backward() -> None:
    """(cute:sm90 renders it since session 28: tests/grouped/test_cute_sm90_training.py.)"""
    report = check_specs([load(spec(targets=["triton:sm90", "cute:sm100"]))])
    trn = [d for d in report.diagnostics if d.rule == "TRN001"]
    assert [d.target for d in trn] == ["cute:sm100"], [str(d) for d in trn]
    assert "grouped design renders no backward for cute:sm100" in trn[0].message
    assert ("(the CuTe sm90 grouped, Pallas Mosaic GPU grouped, Pallas TPU grouped and Triton grouped designs do)"
            in trn[0].message), trn[0].message
    assert not [d for d in report.diagnostics if d.target == "cute:sm100" and d.variant.startswith("backward")]
    forward_only = spec(targets=["triton:sm90", "cute:sm100"])
    del forward_only["training"]
    assert not [d for d in check_specs([load(forward_only)]).diagnostics if d.rule == "TRN001"]


def test_a_roles_schedule_reaches_its_companions_rules() -> None:
    # the grouped cute:sm90 kernel renders no ping-pong (GRP302): a backward GEMM's `schedule` is refused at its field
    d = spec(targets=["cute:sm90"], training={"save": "preact", "dgrad": {"schedule": "pingpong"}})
    errors = [x for x in check_specs([load(d)]).diagnostics if x.severity == "error"]
    assert [(x.rule, x.variant) for x in errors] == [("GRP302", "backward dgrad")]
