"""Values in specs (issue 5): strict numbers that the loader and the JSON Schema agree on, finite
float32 constants, bounded integers and text, and backend options checked against each target."""

from __future__ import annotations

import copy
import json

import pytest
from kernels import MINIMAL_SPEC

from specgen.check import check_spec
from specgen.spec.epilogue import F32_MAX
from specgen.spec.file import SpecFile
from specgen.spec.load import SpecError, load_text
from specgen.spec.models import MAX_DESCRIPTION


def spec(**overrides: object) -> dict:
    d = copy.deepcopy(MINIMAL_SPEC)
    d["name"] = "kern"
    d.update(copy.deepcopy(overrides))
    return d


def load(text: str, suffix: str = ".json"):
    return load_text(text, f"spec{suffix}", suffix)


def issues_of(suffix: str = ".json", text: str | None = None, **overrides: object):
    with pytest.raises(SpecError) as info:
        load(text if text is not None else json.dumps({"kernels": [spec(**overrides)]}), suffix)
    return info.value.issues


def toml_with(line: str) -> str:
    return f"""[[kernels]]
name = "kern"
kind = "gemm"
a = {{ dtype = "bf16" }}
b = {{ dtype = "bf16" }}
out = {{ dtype = "bf16" }}
tile = {{ m = 128, n = 128, k = 64 }}
targets = ["triton:sm90"]
{line}
"""


# --- strict: what the schema says is what loads ---------------------------------------------------------
@pytest.mark.parametrize(("overrides", "path", "fragment"), [
    ({"tile": {"m": "128", "n": 128, "k": 64}}, "kernels[0].tile.m", "valid integer (got '128')"),
    ({"tile": {"m": 128.0, "n": 128, "k": 64}}, "kernels[0].tile.m", "valid integer (got 128.0)"),
    ({"tile": {"m": True, "n": 128, "k": 64}}, "kernels[0].tile.m", "valid integer (got True)"),
    ({"triton": {"num_warps": True}}, "kernels[0].triton.num_warps", "valid integer (got True)"),
    ({"batch": "yes"}, "kernels[0].batch", "valid boolean (got 'yes')"),
    ({"batch": 1}, "kernels[0].batch", "valid boolean (got 1)"),
    ({"triton": {"tma": "true"}}, "kernels[0].triton.tma", "valid boolean"),
    ({"pipeline": {"ab_stages": "3"}}, "kernels[0].pipeline.ab_stages", ""),
    ({"epilogue": [{"op": "residual", "dtype": "f16", "beta": True}]}, "kernels[0].epilogue[0].beta",
     "valid number (got True)"),
    ({"epilogue": [{"op": "scale", "by": "scalar", "value": "2.0"}]}, "kernels[0].epilogue[0].value",
     "valid number (got '2.0')"),
])
def test_numbers_and_booleans_are_strict(overrides, path, fragment):
    found = issues_of(**overrides)
    assert any(i.path == path and fragment in i.message for i in found), [str(i) for i in found]


def test_integers_are_fine_where_numbers_are_expected():
    (ls,) = load(json.dumps({"kernels": [spec(epilogue=[{"op": "scale", "by": "scalar", "value": 2},
                                                         {"op": "clamp", "min": -1, "max": 6}])]}))
    assert ls.spec.epilogue[0].value == 2.0 and ls.spec.epilogue[1].max == 6.0


# --- finite constants --------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "path"), [
    ('epilogue = [{ op = "scale", by = "scalar", value = nan }]', "kernels[0].epilogue[0].value"),
    ('epilogue = [{ op = "scale", by = "scalar", value = -inf }]', "kernels[0].epilogue[0].value"),
    ('epilogue = [{ op = "clamp", min = -1.0, max = inf }]', "kernels[0].epilogue[0].max"),
    ('epilogue = [{ op = "residual", dtype = "f16", beta = nan }]', "kernels[0].epilogue[0].beta"),
    ('epilogue = [{ op = "residual", dtype = "f16", beta = 1e39 }]', "kernels[0].epilogue[0].beta"),
    ('epilogue = [{ op = "scale", by = "scalar", value = "1e400" }]', "kernels[0].epilogue[0].value"),
])
def test_non_finite_constants_are_refused(line, path):
    (issue,) = issues_of(".toml", toml_with(line))
    assert issue.path == path and issue.line == 9


@pytest.mark.parametrize("text", ["1e400", "-1e400", "NaN", "Infinity"])
def test_non_finite_json_numbers_are_refused(text):
    raw = json.dumps({"kernels": [spec(epilogue=[{"op": "scale", "by": "scalar", "value": 1.5}])]})
    (issue,) = issues_of(".json", raw.replace("1.5", text))
    assert issue.path == "kernels[0].epilogue[0].value"


def test_float32_extremes_load():
    (ls,) = load(json.dumps({"kernels": [spec(epilogue=[{"op": "clamp", "min": -F32_MAX, "max": F32_MAX}])]}))
    assert ls.spec.epilogue[0].max == F32_MAX


# --- bounds ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "path", "ok"), [
    ({"schedule": {"group_m": 256}}, "kernels[0].schedule.group_m", True),
    ({"schedule": {"group_m": 257}}, "kernels[0].schedule.group_m", False),
    ({"schedule": {"group_m": 10**18}}, "kernels[0].schedule.group_m", False),
    ({"tile": {"m": 65536, "n": 16, "k": 16}}, "kernels[0].tile.m", True),
    ({"tile": {"m": 65537, "n": 16, "k": 16}}, "kernels[0].tile.m", False),
    ({"tile": {"m": 2**31, "n": 16, "k": 16}}, "kernels[0].tile.m", False),
    ({"cluster": {"m": 64}}, "kernels[0].cluster.m", True),
    ({"cluster": {"m": 65}}, "kernels[0].cluster.m", False),
    ({"pipeline": {"ab_stages": 64}}, "kernels[0].pipeline.ab_stages", True),
    ({"pipeline": {"ab_stages": 65}}, "kernels[0].pipeline.ab_stages", False),
    ({"triton": {"num_warps": 64}}, "kernels[0].triton.num_warps", True),
    ({"triton": {"num_warps": 65}}, "kernels[0].triton.num_warps", False),
    ({"cute": {"mma_warpgroups": 2}}, "kernels[0].cute.mma_warpgroups", True),
    ({"cute": {"mma_warpgroups": 3}}, "kernels[0].cute.mma_warpgroups", False),
    ({"pallas": {"vmem_limit_bytes": 1 << 30}}, "kernels[0].pallas.vmem_limit_bytes", True),
    ({"pallas": {"vmem_limit_bytes": (1 << 30) + 1}}, "kernels[0].pallas.vmem_limit_bytes", False),
    ({"description": "d" * MAX_DESCRIPTION}, "kernels[0].description", True),
    ({"description": "d" * (MAX_DESCRIPTION + 1)}, "kernels[0].description", False),
])
def test_integer_and_text_bounds_are_inclusive(overrides, path, ok):
    text = json.dumps({"kernels": [spec(**overrides)]})
    if ok:
        load(text)
        return
    (issue,) = issues_of(".json", text)
    assert issue.path == path
    assert len(str(issue)) < 300, "a huge value is quoted in full"


@pytest.mark.parametrize("bad", ["\x1b[2J", "\r", "\x7f", "\x85", "\x08"])
def test_descriptions_refuse_control_characters(bad):
    (issue,) = issues_of(description=f"fine{bad}text")
    assert issue.path == "kernels[0].description" and "control characters" in issue.message
    assert "\x1b" not in str(issue) and "\r" not in str(issue)


def test_schema_shows_the_bounds():
    defs = SpecFile.model_json_schema()["$defs"]
    assert defs["Schedule"]["properties"]["group_m"]["maximum"] == 256
    assert defs["Tile"]["properties"]["m"] == {"maximum": 65536, "minimum": 1, "title": "M", "type": "integer"}
    assert defs["GemmSpec"]["properties"]["description"]["maxLength"] == MAX_DESCRIPTION
    assert defs["GemmSpec"]["properties"]["name"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$"
    beta = defs["Residual"]["properties"]["beta"]
    assert beta["type"] == "number" and beta["maximum"] == F32_MAX and beta["minimum"] == -F32_MAX


# --- backend options against each target (OPT001) --------------------------------------------------------
@pytest.mark.parametrize(("overrides", "targets", "expect"), [
    ({"cute": {"two_cta": True}, "cluster": {"m": 2}}, ["cute:sm90"], ("error", "cute:sm90")),
    ({"cute": {"two_cta": True}, "cluster": {"m": 2}}, ["cute:sm100"], None),
    ({"cute": {"two_cta": True}}, ["triton:sm90"], None),  # inert: no CuTe target listed
    ({"cute": {"mma_warpgroups": 1}}, ["cute:sm100"], ("error", "cute:sm100")),
    ({"pallas": {"vmem_limit_bytes": 1 << 26}}, ["pallas:gpu_sm90"], ("error", "pallas:gpu_sm90")),
    ({"triton": {"flatten": True}}, ["triton:sm90"], ("warning", "triton:sm90")),
])
def test_backend_options_are_checked_per_target(overrides, targets, expect):
    text = json.dumps({"kernels": [spec(targets=targets, **overrides)]})
    (ls,) = load(text)
    found = [(d.severity, d.target) for d in check_spec(ls) if d.rule == "OPT001" and d.severity != "note"]
    assert found == ([expect] if expect else [])


# --- the loader and the published schema agree -----------------------------------------------------------
@pytest.mark.parametrize("overrides", [
    {}, {"tile": {"m": "128", "n": 128, "k": 64}}, {"tile": {"m": True, "n": 128, "k": 64}},
    {"batch": "yes"}, {"batch": 1}, {"batch": True}, {"schedule": {"group_m": 10**18}},
    {"schedule": {"group_m": 256}}, {"triton": {"num_warps": 0}}, {"description": "d" * (MAX_DESCRIPTION + 1)},
    {"epilogue": [{"op": "residual", "dtype": "f16", "beta": 3.5e38}]},
    {"epilogue": [{"op": "residual", "dtype": "f16", "beta": "1"}]},
    {"epilogue": [{"op": "clamp", "min": False}]}, {"name": "9lives"}, {"name": "n" * 65},
])
def test_loader_and_json_schema_agree(overrides):
    """Strict models: whatever the schema refuses the loader refuses and the other way round (128.0 is the
    one exception: JSON Schema counts it as an integer, the loader refuses it as a float)."""
    import jsonschema

    doc = {"kernels": [spec(**overrides)]}
    schema_ok = jsonschema.Draft202012Validator(SpecFile.model_json_schema()).is_valid(doc)
    try:
        load(json.dumps(doc))
        loader_ok = True
    except SpecError:
        loader_ok = False
    assert schema_ok == loader_ok
