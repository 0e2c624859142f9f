"""Fuzzing the loader and the checker: whatever a spec file holds, loading it either succeeds or raises
`SpecError` (never another exception), and `check` never crashes on a spec that loaded."""

from __future__ import annotations

import copy
import json
import keyword
import math
import re
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.check import check_spec
from specgen.render.catalogue import render_module
from specgen.spec.epilogue import F32_MAX
from specgen.spec.load import LoadedSpec, SpecError, load_paths, load_text
from specgen.spec.names import MODULE_NAMES, RESERVED
from specgen.spec.targets import ALL_TARGETS

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = [ls.spec.model_dump(mode="json", exclude_none=True) for ls in load_paths([ROOT / "specs"])]
CATALOGUE_TEXT = {p.suffix: p.read_text() for p in sorted((ROOT / "specs").glob("*.toml"))[:1]}
CATALOGUE_TEXT[".json"] = json.dumps({"kernels": CATALOGUE[:2]}, indent=1)
CATALOGUE_TEXT[".yaml"] = yaml.safe_dump({"kernels": CATALOGUE[:2]}, sort_keys=False)

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Words a spec uses, so random documents reach past the first "unknown field".
VOCAB = sorted({
    "kernels", "name", "kind", "gemm", "description", "a", "b", "out", "dtype", "major", "accumulator",
    "batch", "epilogue", "op", "bias", "along", "scale", "by", "value", "activation", "fn", "residual",
    "beta", "clamp", "min", "max", "cast", "tile", "m", "n", "k", "cluster", "pipeline", "ab_stages",
    "acc_stages", "epilogue_stages", "schedule", "persistent", "raster", "group_m", "targets", "triton",
    "num_warps", "tma", "epilogue_subtile", "cute", "two_cta", "mma_warpgroups", "tma_store", "pallas",
    "vmem_limit_bytes", "backend", "arch", "auto", "row", "col", "rowcol", "scalar", "relu", "gelu",
    "bf16", "f16", "f32", "tf32", "fp8_e4m3", "fp8_e5m2", "int8", "int32", "mn", "along_n", *ALL_TARGETS,
})

words = st.sampled_from(VOCAB)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-3, max_value=1 << 20),
    st.sampled_from([0, 1, 2, 8, 16, 64, 128, 256, 512, 10**30, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    words,
)
keys = st.one_of(words, st.text(max_size=8))
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


# --- serializers -----------------------------------------------------------------------------------------
def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON's escapes are TOML's (lone surrogates make TOML syntax errors)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items() if x is not None) + " }"
    raise TypeError(type(v))


def to_toml(doc: object) -> str:
    """Top-level keys; `kernels` as an array of tables (the shipped layout), everything else inline."""
    if not isinstance(doc, dict):
        return f"value = {_toml_value(doc)}\n" if doc is not None else ""
    lines, tables = [], []
    for k, v in doc.items():
        if v is None:
            continue
        if k == "kernels" and isinstance(v, list) and all(isinstance(x, dict) for x in v):
            tables.extend(v)
        else:
            lines.append(f"{json.dumps(str(k))} = {_toml_value(v)}")
    for table in tables:
        lines.append("\n[[kernels]]")
        lines.extend(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in table.items() if x is not None)
    return "\n".join(lines) + "\n"


def serializations(doc: object) -> list[tuple[str, str]]:
    return [(json.dumps(doc), ".json"), (yaml.safe_dump(doc), ".yaml"), (to_toml(doc), ".toml")]


def load_or_spec_error(text: str, suffix: str) -> list[LoadedSpec]:
    try:
        loaded = load_text(text, "fuzz" + suffix, suffix)
    except SpecError as e:
        assert e.issues, "a SpecError lists at least one issue"
        for issue in e.issues:
            assert issue.file == "fuzz" + suffix and issue.line >= 1 and issue.column >= 1
            assert str(issue)
        return []
    for ls in loaded:
        diags = check_spec(ls, notes=True)
        assert all(d.severity in ("error", "warning", "note") for d in diags)
        assert {d.target for d in diags if d.rule == "TARGET"} == set(ALL_TARGETS) - {str(t) for t in ls.spec.targets}
        assert len(ls.spec_hash) == 16
    return loaded


# --- random documents -----------------------------------------------------------------------------------
@FUZZ
@given(documents)
def test_random_documents_load_or_raise_spec_error(doc):
    for text, suffix in serializations(doc):
        load_or_spec_error(text, suffix)


@settings(FUZZ, max_examples=60)
@given(st.lists(st.dictionaries(keys, documents, max_size=8), min_size=1, max_size=2))
def test_random_kernel_lists_load_or_raise_spec_error(kernels):
    for text, suffix in serializations({"kernels": kernels}):
        load_or_spec_error(text, suffix)


# --- mutations of a valid spec ------------------------------------------------------------------------------
def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


@st.composite
def mutated_specs(draw) -> dict:
    spec = copy.deepcopy(draw(st.sampled_from(CATALOGUE)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(spec) if p]
        path = draw(st.sampled_from(paths))
        parent = spec
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = draw(st.sampled_from(["drop", "replace", "retype", "add", "string", "int"]))
        if action == "drop":
            del parent[last]
        elif action == "replace":
            parent[last] = draw(documents)
        elif action == "retype":
            old = parent[last]
            parent[last] = (
                [old] if not isinstance(old, list) else {"x": old} if draw(st.booleans()) else str(old)
            )
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(scalars)
        elif action == "add":
            parent.insert(last, draw(scalars))
        elif action == "string":
            parent[last] = draw(st.one_of(st.text(max_size=20), words))
        else:
            parent[last] = draw(st.one_of(st.integers(), st.integers(min_value=0, max_value=4096)))
    return spec


@FUZZ
@given(mutated_specs())
def test_mutated_catalogue_specs_load_or_raise_spec_error(spec):
    for text, suffix in serializations({"kernels": [spec]}):
        load_or_spec_error(text, suffix)


@settings(max_examples=60, deadline=None)
@given(mutated_specs())
def test_mutated_specs_that_pass_check_render_valid_python(spec):
    loaded = load_or_spec_error(json.dumps({"kernels": [spec]}), ".json")
    for ls in loaded:
        triton = [t for t in ls.spec.targets if t.backend.value == "triton"]
        if not triton or any(d.severity == "error" for d in check_spec(ls)):
            continue
        source = render_module(ls, triton)
        compile(source, f"{ls.name}.py", "exec")
        assert f'kernel "{ls.name}", spec {ls.spec_hash}' in source


# --- well-formed specs with values from anywhere in their domains -------------------------------------------
DTYPES = ["f32", "tf32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int32"]
sizes = st.one_of(st.integers(1, 512), st.sampled_from([8, 16, 32, 64, 128, 256, 1024, 1 << 20, 10**12]))
stages = st.one_of(st.just("auto"), st.integers(1, 12), st.just(10**9))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([F32_MAX, -F32_MAX, 3.5e38, 1e-45]))
# Argument names: mostly the usual ones, else random identifiers and the names the generated code uses.
arg_names = st.one_of(
    st.none(), st.none(),
    st.from_regex(re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,12}"), fullmatch=True),
    st.sampled_from(sorted(RESERVED | set(keyword.kwlist) | set(keyword.softkwlist))),
)


@st.composite
def epilogue_ops(draw) -> list[dict]:
    ops = []
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["bias", "scale", "activation", "residual", "clamp", "cast"]))
        if kind == "bias":
            ops.append({"op": "bias", "along": draw(st.sampled_from("mn")), "dtype": draw(st.sampled_from(DTYPES)),
                        "name": draw(arg_names) or f"bias{i}"})
        elif kind == "scale":
            by = draw(st.sampled_from(["scalar", "row", "col"]))
            op = {"op": "scale", "by": by, "name": draw(arg_names) or f"s{i}"}
            if by == "scalar" and draw(st.booleans()):
                op["value"] = draw(floats)
            ops.append(op)
        elif kind == "activation":
            ops.append({"op": "activation", "fn": draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]))})
        elif kind == "residual":
            ops.append({"op": "residual", "dtype": draw(st.sampled_from(DTYPES)), "beta": draw(floats),
                        "name": draw(arg_names) or f"c{i}"})
        elif kind == "clamp":
            lo, hi = draw(st.one_of(st.none(), floats)), draw(st.one_of(st.none(), floats))
            ops.append({"op": "clamp", **({"min": lo} if lo is not None else {}), **({"max": hi} if hi is not None else {})})
        else:
            ops.append({"op": "cast", "dtype": draw(st.sampled_from(DTYPES))})
    return ops


@st.composite
def well_formed_specs(draw) -> dict:
    dt = st.sampled_from(DTYPES)
    spec = {
        "name": draw(st.one_of(st.just("fuzzed"), arg_names.filter(bool))),
        "kind": "gemm",
        "description": draw(st.text(max_size=30)),
        "a": {"dtype": draw(dt), "major": draw(st.sampled_from(["k", "mn"]))},
        "b": {"dtype": draw(dt), "major": draw(st.sampled_from(["k", "mn"]))},
        "out": {"dtype": draw(dt)},
        "accumulator": draw(dt),
        "batch": draw(st.booleans()),
        "epilogue": draw(epilogue_ops()),
        "tile": {"m": draw(sizes), "n": draw(sizes), "k": draw(sizes)},
        "cluster": {"m": draw(st.integers(1, 20)), "n": draw(st.integers(1, 20))},
        "pipeline": {"ab_stages": draw(stages), "acc_stages": draw(stages), "epilogue_stages": draw(stages)},
        "schedule": {"persistent": draw(st.booleans()), "raster": draw(st.sampled_from(["along_m", "along_n"])),
                     "group_m": draw(st.integers(1, 64))},
        "targets": draw(st.lists(st.sampled_from(ALL_TARGETS), min_size=1, max_size=4, unique=True)),
        "triton": {"num_warps": draw(st.integers(1, 64)), "tma": draw(st.booleans()),
                   "epilogue_subtile": draw(st.booleans())},
        "cute": {"two_cta": draw(st.booleans()), "tma_store": draw(st.booleans()),
                 **({"mma_warpgroups": draw(st.integers(1, 4))} if draw(st.booleans()) else {})},
        "pallas": {"vmem_limit_bytes": draw(st.integers(1, 1 << 40))} if draw(st.booleans()) else {},
    }
    if draw(st.booleans()):  # half of them close to what Triton serves, so that check passes and render runs
        operand = draw(st.sampled_from(["f16", "bf16", "fp8_e4m3", "f32", "tf32"]))
        pow2 = st.sampled_from([16, 32, 64, 128])
        spec.update(
            a={"dtype": operand, "major": draw(st.sampled_from(["k", "mn"]))},
            b={"dtype": operand, "major": draw(st.sampled_from(["k", "mn"]))},
            accumulator="f32", cluster={}, pipeline={},
            tile={"m": draw(st.sampled_from([64, 128])), "n": draw(pow2), "k": draw(st.sampled_from([32, 64]))},
            targets=draw(st.lists(st.sampled_from(["triton:sm90", "triton:sm100"]), min_size=1, unique=True)),
            triton={**spec["triton"], "num_warps": draw(st.sampled_from([4, 8]))},
        )
    return spec


def constants(spec: dict) -> list[float]:
    return [op[k] for op in spec["epilogue"] for k in ("value", "beta", "min", "max") if isinstance(op.get(k), float)]


@settings(max_examples=150, deadline=None)
@given(well_formed_specs())
def test_well_formed_specs_check_and_render(spec):
    for text, suffix in serializations({"kernels": [spec]}):
        loaded = load_or_spec_error(text, suffix)
        if loaded and suffix == ".json":  # names and constants that load are ones that render correctly
            assert all(math.isfinite(v) and abs(v) <= F32_MAX for v in constants(spec))
            assert not {ls.spec.name for ls in loaded} & MODULE_NAMES
            assert not {a.name for ls in loaded for a in ls.spec.runtime_args()} & (RESERVED - {"a", "b", "out"})
        for ls in loaded:
            triton = [t for t in ls.spec.targets if t.backend.value == "triton"]
            if suffix != ".json" or not triton or any(d.severity == "error" for d in check_spec(ls)):
                continue
            source = render_module(ls, triton)
            compile(source, "fuzzed.py", "exec")
            for v in constants(spec):  # every constant lands as the same float literal
                assert repr(float(v)) in source


# --- character-level edits of spec text -------------------------------------------------------------------
@st.composite
def edited_texts(draw) -> tuple[str, str]:
    suffix = draw(st.sampled_from(sorted(CATALOGUE_TEXT)))
    text = CATALOGUE_TEXT[suffix]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["delete", "insert", "replace"]))
        piece = draw(st.one_of(st.sampled_from(list("[]{}\"'#=,.:\n\t\\ -0123456789x")), st.text(max_size=3)))
        if action == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif action == "insert":
            text = text[:i] + piece + text[i:]
        else:
            text = text[:i] + piece + text[i + 1:]
    return text, suffix


@FUZZ
@given(edited_texts())
def test_edited_spec_text_loads_or_raises_spec_error(case):
    text, suffix = case
    load_or_spec_error(text, suffix)


@FUZZ
@given(st.text(max_size=60), st.sampled_from([".toml", ".yaml", ".yml", ".json"]))
def test_random_text_loads_or_raises_spec_error(text, suffix):
    load_or_spec_error(text, suffix)
