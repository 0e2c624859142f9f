"""The spec model, the loader's error reporting, source positions and the spec hash."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from kernels import MINIMAL_SPEC
from pydantic import ValidationError

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import Bias, Cast, Clamp, Residual, Scale
from specgen.spec.file import SpecFile
from specgen.spec.load import (
    SpecError,
    SpecIssue,
    format_path,
    load_file,
    load_paths,
    load_text,
    spec_files,
    spec_hash,
)
from specgen.spec.models import Target, parse_target
from specgen.spec.positions import toml_positions, yaml_positions
from specgen.spec.targets import ALL_TARGETS, Backend

ROOT = Path(__file__).resolve().parents[1]



def spec_dict(**overrides: object) -> dict:
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update(copy.deepcopy(overrides))
    return d


def gemm(**overrides: object) -> GemmSpec:
    return GemmSpec.model_validate(spec_dict(**overrides))


def errors_of(**overrides: object) -> list[dict]:
    with pytest.raises(ValidationError) as info:
        gemm(**overrides)
    return info.value.errors()


def issues(text: str, suffix: str, file: str | None = None) -> list[SpecIssue]:
    with pytest.raises(SpecError) as info:
        load_text(text, file or f"spec{suffix}", suffix)
    return info.value.issues


# --- the model -----------------------------------------------------------------------------------------
def test_minimal_spec_gets_documented_defaults():
    s = gemm()
    assert s.accumulator is DType.f32
    assert s.batch is False and s.epilogue == [] and s.description == ""
    assert (s.cluster.m, s.cluster.n, s.cluster.size) == (1, 1, 1)
    assert (s.pipeline.ab_stages, s.pipeline.acc_stages, s.pipeline.epilogue_stages) == ("auto", "auto", "auto")
    assert (s.schedule.persistent, s.schedule.raster, s.schedule.group_m) == (False, "along_m", 8)
    assert (s.triton.num_warps, s.triton.tma, s.triton.epilogue_subtile) == (8, True, False)
    assert (s.cute.two_cta, s.cute.mma_warpgroups, s.cute.tma_store) == (False, None, True)
    assert s.pallas.vmem_limit_bytes is None
    assert s.a.major == "k" and gemm(a={"dtype": "f16"}).a.major == "k"


@pytest.mark.parametrize(
    ("overrides", "loc"),
    [
        ({"colour": "red"}, ("colour",)),
        ({"tile": {"m": 128, "n": 128, "k": 64, "q": 1}}, ("tile", "q")),
        ({"a": {"dtype": "bf16", "layout": "row"}}, ("a", "layout")),
        ({"out": {"dtype": "bf16", "major": "k"}}, ("out", "major")),
        ({"cluster": {"m": 1, "z": 1}}, ("cluster", "z")),
        ({"pipeline": {"stages": 3}}, ("pipeline", "stages")),
        ({"schedule": {"persistant": True}}, ("schedule", "persistant")),
        ({"triton": {"num_stages": 3}}, ("triton", "num_stages")),
        ({"cute": {"two_CTA": True}}, ("cute", "two_CTA")),
        ({"pallas": {"vmem": 1}}, ("pallas", "vmem")),
        ({"epilogue": [{"op": "bias", "axis": "n"}]}, ("epilogue", 0, "bias", "axis")),
    ],
)
def test_unknown_fields_are_errors(overrides, loc):
    errs = errors_of(**overrides)
    assert [(e["type"], e["loc"]) for e in errs] == [("extra_forbidden", loc)]


def test_spec_file_rejects_unknown_top_level_keys_and_empty_kernel_lists():
    with pytest.raises(ValidationError) as info:
        SpecFile.model_validate({"kernels": [spec_dict()], "version": 2})
    assert [e["type"] for e in info.value.errors()] == ["extra_forbidden"]
    with pytest.raises(ValidationError) as info:
        SpecFile.model_validate({"kernels": []})
    assert info.value.errors()[0]["type"] == "too_short"


def test_models_are_frozen():
    s = gemm()
    with pytest.raises(ValidationError):
        s.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.tile.m = 64  # type: ignore[misc]


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": "1starts_with_digit"},
        {"name": "has-dash"},
        {"name": "x" * 65},
        {"kind": "conv"},
        {"a": {"dtype": "bf17"}},
        {"a": {"dtype": "bf16", "major": "row"}},
        {"accumulator": "f64"},
        {"tile": {"m": 0, "n": 128, "k": 64}},
        {"tile": {"m": -128, "n": 128, "k": 64}},
        {"tile": {"m": 128.5, "n": 128, "k": 64}},
        {"pipeline": {"ab_stages": 0}},
        {"pipeline": {"ab_stages": "deep"}},
        {"schedule": {"raster": "diagonal"}},
        {"targets": []},
        {"epilogue": [{"op": "activation", "fn": "tanh"}]},
        {"epilogue": [{"op": "nope"}]},
        {"epilogue": [{"by": "row"}]},
        {"description": 'ends the docstring """ early'},
        {"description": "a backslash \\N{BULLET} escape"},
        {"description": "NUL \x00 byte"},
    ],
)
def test_invalid_values_are_rejected(overrides):
    errors_of(**overrides)


def test_name_limits_are_inclusive():
    assert gemm(name="x" * 64).name == "x" * 64
    assert gemm(name="_private9").name == "_private9"


# --- targets -------------------------------------------------------------------------------------------
def test_every_known_target_parses_and_round_trips():
    for name in ALL_TARGETS:
        t = parse_target(name)
        assert isinstance(t, Target) and str(t) == name
    s = gemm(targets=list(ALL_TARGETS))
    assert [str(t) for t in s.targets] == list(ALL_TARGETS)
    assert s.model_dump(mode="json")["targets"] == list(ALL_TARGETS)
    assert s.targets[0].backend is Backend.triton and s.targets[0].arch == "sm90"


@pytest.mark.parametrize(
    ("target", "expect"),
    [
        ("triton", "is not backend:arch"),
        ("tritonsm90", "is not backend:arch"),
        ("cuda:sm90", "is not backend:arch"),
        ("triton:sm80", "triton has no arch 'sm80'"),
        ("cute:tpu_v5e", "cute has no arch 'tpu_v5e'"),
        ("pallas:sm90", "pallas has no arch 'sm90'"),
        (5, "a target is a string 'backend:arch'"),
        ({"backend": "triton", "arch": "sm80"}, "a target is a string 'backend:arch'"),
    ],
)
def test_bad_targets_name_the_known_ones(target, expect):
    (err,) = errors_of(targets=[target])
    assert err["loc"] == ("targets", 0)
    assert expect in err["msg"]
    assert "known targets: " + ", ".join(ALL_TARGETS) in err["msg"]


def test_a_hand_built_target_is_rechecked():
    assert str(parse_target(Target(backend=Backend.cute, arch="sm100"))) == "cute:sm100"
    with pytest.raises(ValueError, match="no arch 'sm80'"):
        parse_target(Target(backend=Backend.cute, arch="sm80"))


def test_duplicate_targets_are_errors():
    (err,) = errors_of(targets=["triton:sm90", "cute:sm90", "triton:sm90"])
    assert "target 'triton:sm90' is listed twice" in err["msg"]


# --- epilogue ops --------------------------------------------------------------------------------------
def test_scale_variants_and_their_runtime_args():
    assert Scale(op="scale", by="scalar", value=2.0).runtime_args() == []
    (alpha,) = Scale(op="scale", by="scalar").runtime_args()
    assert (alpha.name, alpha.shape, alpha.dtype) == ("alpha", "scalar", DType.f32)
    assert Scale(op="scale", by="scalar", name="gain").runtime_args()[0].name == "gain"
    assert [(a.name, a.shape) for a in Scale(op="scale", by="row").runtime_args()] == [("row_scale", "vec_m")]
    assert [(a.name, a.shape) for a in Scale(op="scale", by="col").runtime_args()] == [("col_scale", "vec_n")]
    assert [(a.name, a.shape) for a in Scale(op="scale", by="col", name="s").runtime_args()] == [("s", "vec_n")]
    assert [(a.name, a.shape) for a in Scale(op="scale", by="rowcol").runtime_args()] == [
        ("scale_a", "vec_m"), ("scale_b", "vec_n"),
    ]


@pytest.mark.parametrize("by", ["row", "col", "rowcol"])
def test_scale_value_is_only_for_scalars(by):
    with pytest.raises(ValidationError, match=f"`value` is only for by = 'scalar' \\(got by = '{by}'\\)"):
        Scale(op="scale", by=by, value=2.0)


def test_scale_rowcol_takes_no_name():
    with pytest.raises(ValidationError, match="scale_a and scale_b; drop `name`"):
        Scale(op="scale", by="rowcol", name="s")
    assert Scale(op="scale", by="row", name="s").name == "s"


def test_scale_name_is_an_identifier():
    with pytest.raises(ValidationError):
        Scale(op="scale", by="row", name="not an identifier")


def test_clamp_bounds():
    assert Clamp(op="clamp", min=0.0).max is None
    assert Clamp(op="clamp", max=6.0).min is None
    assert (Clamp(op="clamp", min=1.0, max=1.0).min, Clamp(op="clamp", min=1.0, max=1.0).max) == (1.0, 1.0)
    with pytest.raises(ValidationError, match="clamp needs `min`, `max` or both"):
        Clamp(op="clamp")
    with pytest.raises(ValidationError, match="clamp min 2.0 > max 1.0"):
        Clamp(op="clamp", min=2.0, max=1.0)


def test_bias_residual_cast_defaults():
    (bias,) = Bias(op="bias").runtime_args()
    assert (bias.name, bias.shape, bias.dtype) == ("bias", "vec_n", DType.f32)
    assert Bias(op="bias", along="m", dtype="bf16").runtime_args()[0].shape == "vec_m"
    (c,) = Residual(op="residual", dtype="bf16").runtime_args()
    assert (c.name, c.shape, c.dtype) == ("c", "matrix", DType.bf16)
    assert Residual(op="residual", dtype="f16").beta == 1.0
    assert Cast(op="cast", dtype="f16").runtime_args() == []


def test_runtime_args_come_in_chain_order():
    s = gemm(epilogue=[
        {"op": "scale", "by": "scalar"},
        {"op": "bias", "along": "m"},
        {"op": "activation", "fn": "relu"},
        {"op": "residual", "dtype": "bf16", "name": "skip"},
        {"op": "scale", "by": "rowcol"},
    ])
    assert [a.name for a in s.runtime_args()] == ["alpha", "bias", "skip", "scale_a", "scale_b"]


@pytest.mark.parametrize(
    ("epilogue", "clash"),
    [
        ([{"op": "bias"}, {"op": "bias", "along": "m"}], "bias"),
        ([{"op": "scale", "by": "scalar"}, {"op": "scale", "by": "scalar"}], "alpha"),
        ([{"op": "scale", "by": "rowcol"}, {"op": "scale", "by": "rowcol"}], "scale_a"),
        ([{"op": "residual", "dtype": "bf16", "name": "a"}], "a"),
        ([{"op": "bias", "name": "out"}], "out"),
        ([{"op": "scale", "by": "row", "name": "b"}], "b"),
    ],
)
def test_duplicate_runtime_arg_names_are_errors(epilogue, clash):
    (err,) = errors_of(epilogue=epilogue)
    assert f"named '{clash}'; give one op a `name`" in err["msg"]


def test_renamed_runtime_args_do_not_clash():
    s = gemm(epilogue=[{"op": "bias"}, {"op": "bias", "along": "m", "name": "row_bias"}])
    assert [a.name for a in s.runtime_args()] == ["bias", "row_bias"]


# --- loader: where each error is ---------------------------------------------------------------------------
GOOD_TOML = """\
# a comment line
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "bf16", major = "k" }
b = { dtype = "bf16", major = "k" }
out = { dtype = "bf16" }
tile = { m = 128, n = 128, k = 64 }
targets = ["triton:sm90"]
"""

GOOD_YAML = """\
kernels:
  - name: k
    kind: gemm
    a: {dtype: bf16, major: k}
    b: {dtype: bf16, major: k}
    out: {dtype: bf16}
    tile: {m: 128, n: 128, k: 64}
    targets: [triton:sm90]
"""

GOOD_JSON = """\
{
  "kernels": [
    {
      "name": "k",
      "kind": "gemm",
      "a": {"dtype": "bf16", "major": "k"},
      "b": {"dtype": "bf16", "major": "k"},
      "out": {"dtype": "bf16"},
      "tile": {"m": 128, "n": 128, "k": 64},
      "targets": ["triton:sm90"]
    }
  ]
}
"""

GOOD = {".toml": GOOD_TOML, ".yaml": GOOD_YAML, ".json": GOOD_JSON}


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_the_three_formats_load_the_same_spec(suffix):
    (ls,) = load_text(GOOD[suffix], "f" + suffix, suffix)
    assert ls.spec == gemm()
    assert ls.file == "f" + suffix and ls.index == 0 and ls.name == "k"


def test_a_valid_spec_records_where_each_field_is():
    (t,) = load_text(GOOD_TOML, "f.toml", ".toml")
    assert t.line == 2
    assert t.where(("tile", "n")) == (8, 19)
    assert t.where(("tile", "nothing_there")) == (8, 1)  # nearest written ancestor
    assert t.where(("pipeline", "ab_stages")) == (2, 1)  # not written: the kernel itself
    (y,) = load_text(GOOD_YAML, "f.yaml", ".yaml")
    assert y.line == 2 and y.where(("tile", "n")) == (7, 20)
    (j,) = load_text(GOOD_JSON, "f.json", ".json")
    assert j.line == 3 and j.where(("tile", "n")) == (9, 26)


# (suffix, text with the error, line, column, path, message fragment)
def _bad(suffix: str, old: str, new: str) -> str:
    assert old in GOOD[suffix]
    return GOOD[suffix].replace(old, new)


BAD_DTYPE = [
    (".toml", _bad(".toml", 'a = { dtype = "bf16"', 'a = { dtype = "bf17"'), 5, 7),
    (".yaml", _bad(".yaml", "a: {dtype: bf16", "a: {dtype: bf17"), 4, 9),
    (".json", _bad(".json", '"a": {"dtype": "bf16"', '"a": {"dtype": "bf17"'), 6, 13),
]


@pytest.mark.parametrize(("suffix", "text", "line", "col"), BAD_DTYPE)
def test_bad_dtype_names_file_line_column_and_path(suffix, text, line, col):
    (issue,) = issues(text, suffix, file="specs/x" + suffix)
    assert (issue.file, issue.line, issue.column, issue.path) == ("specs/x" + suffix, line, col, "kernels[0].a.dtype")
    assert "'bf16'" in issue.message and "(got 'bf17')" in issue.message
    assert str(issue).startswith(f"specs/x{suffix}:{line}:{col}: kernels[0].a.dtype: ")


MISSING_TILE = [
    (".toml", _bad(".toml", "tile = { m = 128, n = 128, k = 64 }\n", ""), 2, 1),
    (".yaml", _bad(".yaml", "    tile: {m: 128, n: 128, k: 64}\n", ""), 2, 5),
    (".json", _bad(".json", '      "tile": {"m": 128, "n": 128, "k": 64},\n', ""), 3, 5),
]


@pytest.mark.parametrize(("suffix", "text", "line", "col"), MISSING_TILE)
def test_missing_field_points_at_its_kernel(suffix, text, line, col):
    (issue,) = issues(text, suffix)
    assert (issue.line, issue.column, issue.path, issue.message) == (line, col, "kernels[0].tile", "Field required")


EXTRA = [
    (".toml", GOOD_TOML + "colour = 'red'\n", 10, 1),
    (".yaml", GOOD_YAML + "    colour: red\n", 9, 5),
    (".json", _bad(".json", '"targets": ["triton:sm90"]', '"targets": ["triton:sm90"],\n      "colour": "red"'), 11, 7),
]


@pytest.mark.parametrize(("suffix", "text", "line", "col"), EXTRA)
def test_extra_field_names_itself(suffix, text, line, col):
    (issue,) = issues(text, suffix)
    assert (issue.line, issue.column, issue.path) == (line, col, "kernels[0].colour")
    assert issue.message == "Extra inputs are not permitted (got 'red')"


SCALE_ROW_VALUE = [
    (".toml", GOOD_TOML + 'epilogue = [{op="scale", by="row", value=2.0}]\n', 10, 13),
    (".yaml", GOOD_YAML + "    epilogue:\n      - {op: scale, by: row, value: 2.0}\n", 10, 9),
    (".json", _bad(".json", '"targets": ["triton:sm90"]',
                   '"targets": ["triton:sm90"],\n      "epilogue": [{"op": "scale", "by": "row", "value": 2.0}]'), 11, 20),
]


@pytest.mark.parametrize(("suffix", "text", "line", "col"), SCALE_ROW_VALUE)
def test_tagged_union_op_error_points_at_the_op(suffix, text, line, col):
    (issue,) = issues(text, suffix)
    assert (issue.line, issue.column, issue.path) == (line, col, "kernels[0].epilogue[0]")
    assert issue.message == "`value` is only for by = 'scalar' (got by = 'row')"


def test_op_errors_keep_their_field_paths():
    text = GOOD_TOML + (
        'epilogue = [{op="scale", scale=2.0}, {op="nope"}, {op="bias", along="q"}, {op="clamp"}, '
        '{op="clamp", clamp=1}]\n'
    )
    got = [(i.path, i.column) for i in issues(text, ".toml")]
    assert got == [
        ("kernels[0].epilogue[0].by", 13),  # missing: at the op
        ("kernels[0].epilogue[0].scale", 26),  # an extra key named like the op's tag
        ("kernels[0].epilogue[1]", 38),
        ("kernels[0].epilogue[2].along", 63),
        ("kernels[0].epilogue[3]", 75),
        ("kernels[0].epilogue[4].clamp", 102),
    ]


def test_an_extra_key_named_like_the_kind_does_not_derail_other_paths():
    text = GOOD_TOML.replace("m = 128,", "m = 0,") + "gemm = 1\n"
    got = sorted((i.path, i.line) for i in issues(text, ".toml"))
    assert got == [("kernels[0].gemm", 10), ("kernels[0].tile.m", 8)]


def test_every_issue_of_a_file_is_reported():
    text = GOOD_TOML.replace('"bf16", major', '"bf17", major').replace("m = 128", "m = -1") + "x = 1\n"
    paths = sorted(i.path for i in issues(text, ".toml"))
    assert paths == ["kernels[0].a.dtype", "kernels[0].b.dtype", "kernels[0].tile.m", "kernels[0].x"]


def test_second_kernel_errors_name_its_index_and_line():
    text = GOOD_TOML + GOOD_TOML.split("\n", 1)[1].replace('name = "k"', 'name = "k2"').replace("k = 64", "k = 'x'")
    (issue,) = issues(text, ".toml")
    assert (issue.path, issue.line) == ("kernels[1].tile.k", 16)


def test_target_errors_point_at_the_list_item():
    text = GOOD_TOML.replace('targets = ["triton:sm90"]', 'targets = ["triton:sm90", "cute:sm80"]')
    (issue,) = issues(text, ".toml")
    assert (issue.line, issue.column, issue.path) == (9, 27, "kernels[0].targets[1]")
    assert "cute has no arch 'sm80'" in issue.message


def test_a_lone_kernel_is_told_to_wrap_itself():
    (issue,) = issues(GOOD_TOML.replace("[[kernels]]\n", ""), ".toml")
    assert "wrap this kernel in it" in issue.message


@pytest.mark.parametrize(
    ("suffix", "text", "line", "col", "fragment"),
    [
        (".toml", 'x = 1\ny = "unterminated\n', 2, 18, "TOML syntax"),
        (".toml", "x = 1\n[[kernels]\n", 2, 10, "TOML syntax"),
        (".toml", "x = 1\ny = [1,\n", 3, 1, "TOML syntax"),  # at the end of the document
        (".yaml", "kernels:\n  - name: k\n   bad: [1, 2\n", 3, 4, "YAML syntax"),
        (".yaml", "kernels:\n\t- x\n", 2, 1, "YAML syntax"),
        (".yaml", "a: 1\nb: \x07\n", 2, 4, "YAML syntax: special characters are not allowed"),
        (".json", '{\n  "kernels": [\n    {"name": "k",}\n  ]\n}\n', 3, 18, "JSON syntax"),
        (".json", '{"kernels": [}', 1, 14, "JSON syntax"),
    ],
)
def test_syntax_errors_name_file_line_and_column(suffix, text, line, col, fragment):
    (issue,) = issues(text, suffix, file="dir/f" + suffix)
    assert (issue.file, issue.line, issue.column) == ("dir/f" + suffix, line, col)
    assert issue.message.startswith(fragment) and issue.path == ""


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_pathological_documents_are_spec_errors(suffix):
    deep = {".toml": "x = " + "[" * 5000 + "]" * 5000, ".yaml": "[" * 5000 + "]" * 5000, ".json": "[" * 50000}
    huge = {".toml": "x = " + "9" * 5000, ".yaml": "x: " + "9" * 5000, ".json": "9" * 5000}
    for text in (deep[suffix], huge[suffix]):
        (issue,) = issues(text, suffix)
        assert issue.message.startswith("cannot parse")


def test_cyclic_yaml_alias_is_a_spec_error():
    # aliases are refused outright (issue 5: billion laughs), a cyclic one included, where it is written
    (issue,) = issues("kernels: &k [*k]\n", ".yaml")
    assert (issue.line, issue.column) == (1, 14) and "YAML aliases (*name) are not allowed" in issue.message


@pytest.mark.parametrize(("text", "suffix"), [("", ".toml"), ("", ".yaml"), ("null", ".json"), ("[1, 2]", ".json")])
def test_empty_or_non_table_documents(text, suffix):
    (issue,) = issues(text, suffix)
    assert (issue.line, issue.column) == (1, 1)


def test_load_file_rejects_unknown_suffix_and_unreadable_files(tmp_path):
    odd = tmp_path / "spec.txt"
    odd.write_text(GOOD_TOML)
    with pytest.raises(SpecError, match="unknown spec file type"):
        load_file(odd)
    with pytest.raises(SpecError, match="cannot read"):
        load_file(tmp_path / "missing.toml")
    ok = tmp_path / "spec.yml"
    ok.write_text(GOOD_YAML)
    assert load_file(ok)[0].file == str(ok)


def test_spec_files_expand_folders_sorted(tmp_path):
    (tmp_path / "b").mkdir()
    for rel in ("b/z.json", "a.toml", "b/y.yaml", "notes.md", "c.yml"):
        (tmp_path / rel).write_text("")
    got = [p.relative_to(tmp_path).as_posix() for p in spec_files([tmp_path])]
    assert got == ["a.toml", "b/y.yaml", "b/z.json", "c.yml"]


def test_load_paths_rejects_duplicate_names_across_files(tmp_path):
    (tmp_path / "one.toml").write_text(GOOD_TOML)
    (tmp_path / "two.yaml").write_text(GOOD_YAML)
    with pytest.raises(SpecError) as info:
        load_paths([tmp_path])
    (issue,) = info.value.issues
    assert issue.file == str(tmp_path / "two.yaml")
    assert (issue.line, issue.column, issue.path) == (2, 5, "kernels[0].name")
    assert f"kernel name 'k' is already used at {tmp_path / 'one.toml'}:3" in issue.message


def test_load_paths_rejects_duplicate_names_within_a_file(tmp_path):
    (tmp_path / "one.toml").write_text(GOOD_TOML + GOOD_TOML.split("\n", 1)[1])
    with pytest.raises(SpecError) as info:
        load_paths([tmp_path / "one.toml"])
    (issue,) = info.value.issues
    assert (issue.line, issue.path) == (11, "kernels[1].name")


def test_load_paths_collects_every_files_issues(tmp_path):
    (tmp_path / "a.toml").write_text("x = [")
    (tmp_path / "b.json").write_text("{")
    (tmp_path / "c.yaml").write_text(GOOD_YAML)
    with pytest.raises(SpecError) as info:
        load_paths([tmp_path])
    assert [Path(i.file).name for i in info.value.issues] == ["a.toml", "b.json"]


def test_load_paths_loads_the_shipped_catalogue():
    loaded = load_paths([ROOT / "specs"])
    assert len({ls.name for ls in loaded}) == len(loaded) >= 6


def test_format_path():
    assert format_path(["kernels", 0, "tile", "m"]) == "kernels[0].tile.m"
    assert format_path([]) == ""
    assert format_path([0, "x"]) == "[0].x"


# --- positions -----------------------------------------------------------------------------------------
POS_TOML = """\
# top comment with [brackets] and = signs
title = "x # not a comment = [y]"  # trailing comment

[tool]
name = 'lit # ] ='
nested.deep.key = 3
"quoted key" = { a = 1, b = "} ]" }

[[kernels]]
name = "k0"
epilogue = [
  { op = "bias", along = "n" },  # comment, with [brackets] = x
  # a whole-line comment { op = "fake" }
  { op = "activation", fn = "relu" },
]

[kernels.tile]
m = 128

[[kernels]]
name = "k1"
arr = [[1, 2], [3]]
ml = \"\"\"multi
line # with = and [ ]
\"\"\"
esc = \"\"\"ends in a backslash \\\\\"\"\"
q = "a \\" quote [ # ="
after = 1
"""


def test_toml_positions_cover_tables_arrays_keys_and_strings():
    tomllib.loads(POS_TOML)  # the fixture is valid TOML
    p = toml_positions(POS_TOML)
    assert p[("title",)] == (2, 1)
    assert p[("tool",)] == (4, 2)
    assert p[("tool", "name")] == (5, 1)
    assert p[("tool", "nested")] == (6, 1)
    assert p[("tool", "nested", "deep")] == (6, 8)
    assert p[("tool", "nested", "deep", "key")] == (6, 13)
    assert p[("tool", "quoted key")] == (7, 1)
    assert p[("tool", "quoted key", "a")] == (7, 18)
    assert p[("tool", "quoted key", "b")] == (7, 25)
    assert p[("kernels", 0)] == (9, 1)
    assert p[("kernels", 0, "name")] == (10, 1)
    assert p[("kernels", 0, "epilogue")] == (11, 1)
    assert p[("kernels", 0, "epilogue", 0)] == (12, 3)
    assert p[("kernels", 0, "epilogue", 0, "along")] == (12, 18)
    assert p[("kernels", 0, "epilogue", 1)] == (14, 3)
    assert p[("kernels", 0, "epilogue", 1, "fn")] == (14, 24)
    assert ("kernels", 0, "epilogue", 2) not in p  # the commented-out op is not an element
    assert p[("kernels", 0, "tile")] == (17, 10)
    assert p[("kernels", 0, "tile", "m")] == (18, 1)
    assert p[("kernels", 1)] == (20, 1)
    assert p[("kernels", 1, "name")] == (21, 1)
    assert p[("kernels", 1, "arr", 0)] == (22, 8)
    assert p[("kernels", 1, "arr", 0, 1)] == (22, 12)
    assert p[("kernels", 1, "arr", 1, 0)] == (22, 17)
    assert p[("kernels", 1, "ml")] == (23, 1)
    assert p[("kernels", 1, "esc")] == (26, 1)
    assert p[("kernels", 1, "q")] == (27, 1)
    assert p[("kernels", 1, "after")] == (28, 1)


def test_toml_positions_of_quoted_dotted_and_spaced_keys():
    text = '[ a . "b.c" ]\nx . y = 1\n[[ list ]]\n\'lit\' = 2\n'
    tomllib.loads(text)
    p = toml_positions(text)
    assert p[("a", "b.c", "x", "y")] == (2, 5)
    assert p[("list", 0)] == (3, 1)
    assert p[("list", 0, "lit")] == (4, 1)


def test_toml_positions_never_read_a_value_inside_a_comment():
    """A comment after an array's element or an inline table's pair, holding what looks like a value and its
    separator (`# x, y`), is skipped whole: the one-match ways of reading plain lines and items (positions.py)
    never stop inside it."""
    text = 'arr = [ "a",  # x, y\n  "b"  # ], z\n]\nt = { a = 1, b = 2 }  # c, }\nlast = 3  # w, ]\n'
    tomllib.loads(text)
    p = toml_positions(text)
    assert p[("arr", 0)] == (1, 9) and p[("arr", 1)] == (2, 3) and ("arr", 2) not in p
    assert p[("t", "b")] == (4, 14) and p[("last",)] == (5, 1)


def test_toml_positions_name_where_each_key_is_written():
    for f in sorted((ROOT / "specs").glob("*.toml")):
        text = f.read_text()
        lines = text.splitlines()
        for path, (line, col) in toml_positions(text).items():
            if isinstance(path[-1], str) and path[-1] != "kernels":
                at = lines[line - 1][col - 1:]
                assert at.startswith((path[-1], f'"{path[-1]}"')), (f.name, path, at)


def test_toml_positions_with_crlf_line_endings():
    text = GOOD_TOML.replace("\n", "\r\n")
    assert toml_positions(text)[("kernels", 0, "tile", "n")] == (8, 19)


def test_toml_positions_never_raise():
    assert toml_positions("[[unterminated")[("unterminated", 0)] == (1, 1)  # what was read stands
    assert toml_positions('x = "never closed') == {}
    assert toml_positions("x = [1, 2") == {}


def test_yaml_positions_for_block_and_flow_styles():
    p = yaml_positions(GOOD_YAML)
    assert p[("kernels",)] == (1, 1)
    assert p[("kernels", 0)] == (2, 5)
    assert p[("kernels", 0, "tile", "k")] == (7, 28)
    assert p[("kernels", 0, "targets", 0)] == (8, 15)
    j = yaml_positions(GOOD_JSON)
    assert j[("kernels", 0, "targets", 0)] == (10, 19)


def test_errors_in_multi_line_arrays_of_inline_tables_point_at_the_element():
    text = GOOD_TOML + 'epilogue = [\n  { op = "bias" },  # a [comment] = x\n  { op = "activation", fn = "tanh" },\n]\n'
    (issue,) = issues(text, ".toml")
    assert (issue.line, issue.column, issue.path) == (12, 24, "kernels[0].epilogue[1].fn")


# --- the spec hash -------------------------------------------------------------------------------------
def _hash_of(text: str, suffix: str) -> str:
    return load_text(text, "f" + suffix, suffix)[0].spec_hash


def test_spec_hash_ignores_format_key_order_and_written_defaults():
    h = _hash_of(GOOD_TOML, ".toml")
    assert len(h) == 16 and int(h, 16) >= 0
    assert _hash_of(GOOD_YAML, ".yaml") == h == _hash_of(GOOD_JSON, ".json")
    shuffled = {"kernels": [dict(reversed(list(json.loads(GOOD_JSON)["kernels"][0].items())))]}
    assert _hash_of(json.dumps(shuffled), ".json") == h
    explicit = GOOD_TOML + 'pipeline = { ab_stages = "auto" }\ntriton = { num_warps = 8 }\naccumulator = "f32"\n'
    assert _hash_of(explicit, ".toml") == h
    assert spec_hash(gemm()) == h


@pytest.mark.parametrize(
    "overrides",
    [{"name": "k2"}, {"description": "x"}, {"tile": {"m": 64, "n": 128, "k": 64}}, {"targets": ["triton:sm100"]},
     {"epilogue": [{"op": "activation", "fn": "relu"}]}, {"triton": {"num_warps": 4}}],
)
def test_spec_hash_changes_with_the_spec(overrides):
    assert spec_hash(gemm(**overrides)) != spec_hash(gemm())


def test_spec_hash_is_stable_across_processes():
    code = (
        "from pathlib import Path; from specgen.spec.load import load_paths; "
        "print(','.join(f'{s.name}={s.spec_hash}' for s in load_paths([Path('specs')])))"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        outs.add(r.stdout.strip())
    expected = ",".join(f"{s.name}={s.spec_hash}" for s in load_paths([ROOT / "specs"]))
    assert outs == {expected}


def test_yaml_and_json_round_trips_of_the_catalogue_keep_hashes():
    for ls in load_paths([ROOT / "specs"]):
        data = {"kernels": [ls.spec.model_dump(mode="json", exclude_none=True)]}
        (y,) = load_text(yaml.safe_dump(data), "r.yaml", ".yaml")
        (j,) = load_text(json.dumps(data), "r.json", ".json")
        assert y.spec_hash == j.spec_hash == ls.spec_hash


def test_json_positions_track_keys_elements_and_escapes() -> None:
    from specgen.spec.positions import json_positions

    text = '{"kernels": [{"name": "a",\n "tile": {"m": 1, "n": [1, 2]}, "e\\"x": true}]}'
    pos = json_positions(text)
    assert pos[("kernels", 0, "tile", "m")] == (2, 11)
    assert pos[("kernels", 0, "tile", "n", 1)] == (2, 28)
    assert pos[("kernels", 0, 'e"x')] == (2, 33)


def test_pyyaml_is_optional(tmp_path: Path) -> None:
    """The tool installs with pydantic, jinja2 and typer only: TOML and JSON specs load without PyYAML,
    and a YAML spec says what to install."""
    import subprocess
    import sys

    (tmp_path / "k.yaml").write_text("kernels: []\n")
    script = f"""
import sys
sys.modules["yaml"] = None  # as if PyYAML were not installed
from pathlib import Path
from specgen.spec.load import SpecError, load_file, load_paths
specs = load_paths([Path({str(ROOT / "specs")!r})])
assert len(specs) >= 6, specs
bad = Path({str(tmp_path)!r}) / "bad.json"
bad.write_text('{{"kernels": [{{"name": "x", "kind": "gemm"}}]}}')
try:
    load_file(bad)
except SpecError as e:
    assert "bad.json:1:" in str(e), str(e)
try:
    load_file(Path({str(tmp_path / "k.yaml")!r}))
except SpecError as e:
    assert "pip install 'specgen[yaml]'" in str(e), str(e)
    print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


# --- where the configuration sections live ---------------------------------------------------------------


def test_the_core_models_declare_no_backend_option_section() -> None:
    """The designs own their option sections (designs/<design>/options.py) and a kind's model lists them
    (CONFIG_SECTIONS, BACKEND_SECTIONS): the core's spec/models.py declares none, and its code (docstrings
    and comments aside) names no backend."""
    import ast
    import re

    from specgen.spec import models

    tree = ast.parse(Path(models.__file__).read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    words = [(node.lineno, w) for node in ast.walk(tree) for w in (
        [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        else [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute)
        else [node.arg] if isinstance(node, ast.arg) else [node.name] if isinstance(node, ast.ClassDef | ast.FunctionDef)
        else [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [])]
    backend = re.compile("triton|cute|pallas", re.IGNORECASE)
    assert [f"spec/models.py:{n} {w!r}" for n, w in words if backend.search(w)] == []
    options = [n for n, v in vars(models).items() if isinstance(v, type) and n.endswith("Options")]
    assert options == []
    assert set(models.ConfigLayer.model_fields) == set()  # the kind declares its layers' sections
    assert models.LayeredSpec.CONFIG_SECTIONS == () and models.LayeredSpec.BACKEND_SECTIONS == {}


def test_the_gemm_kind_assembles_its_sections_from_its_designs_options() -> None:
    import ast

    from specgen.kinds.gemm import spec as gemm_spec

    sections, backends = GemmSpec.CONFIG_SECTIONS, GemmSpec.BACKEND_SECTIONS
    assert sections == ("tile", "cluster", "pipeline", "schedule", "triton", "cute", "pallas")
    assert backends == {"triton": Backend.triton, "cute": Backend.cute, "pallas": Backend.pallas}
    for layer in (gemm_spec.TargetConfig, gemm_spec.Variant):
        assert layer.CONFIG_SECTIONS == GemmSpec.CONFIG_SECTIONS
        assert list(layer.model_fields)[:len(GemmSpec.CONFIG_SECTIONS)] == list(GemmSpec.CONFIG_SECTIONS)
    for opts in gemm_spec.DESIGN_OPTIONS:
        assert opts.__name__.startswith("specgen.kinds.gemm.designs.") and opts.__name__.endswith(".options")
        assert GemmSpec.BACKEND_SECTIONS[opts.SECTION] is opts.BACKEND
        assert GemmSpec.model_fields[opts.SECTION].annotation is opts.OPTIONS
        assert gemm_spec.TargetConfig.model_fields[opts.SECTION].annotation == opts.OPTIONS | None
        # spec validation imports the options modules: they import the spec models only, no design
        imported = {node.module for node in ast.walk(ast.parse(Path(opts.__file__).read_text()))
                    if isinstance(node, ast.ImportFrom)}
        assert all(m in ("__future__", "typing", "pydantic") or m.startswith("specgen.spec.") for m in imported), imported


def test_spec_validation_imports_no_design_module() -> None:
    script = f"""
import sys
from pathlib import Path
from specgen.spec.load import load_paths
from specgen.spec.file import SpecFile
assert len(load_paths([Path({str(ROOT / "specs")!r})])) >= 6
SpecFile.model_json_schema()
loaded = sorted(m for m in sys.modules if m.startswith("specgen.kinds.") and m.rsplit(".", 1)[-1] not in ("names", "options"))
designs = [m for m in loaded if ".designs." in m and m.count(".") > 4]
assert designs == [] and "jinja2" not in sys.modules, (designs, loaded)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
