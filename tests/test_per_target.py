"""Per-target configs: `per_target` tables override a kernel's configuration on one target; resolve,
check and render read each target's effective config; diagnostics point at the overriding line."""

from __future__ import annotations

import json

import pytest
import yaml

from specgen.check import check_spec
from specgen.render.catalogue import render_module
from specgen.resolve import resolve
from specgen.spec.file import SpecFile
from specgen.spec.load import SpecError, load_text, spec_hash
from specgen.spec.models import parse_target

TOML = """\
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "bf16" }
b = { dtype = "bf16" }
out = { dtype = "bf16" }
tile = { m = 128, n = 256, k = 64 }
schedule = { persistent = true }
targets = ["triton:sm90", "triton:sm100", "cute:sm100"]
triton = { num_warps = 8 }

[kernels.per_target."cute:sm100"]
tile = { m = 128, n = 128, k = 64 }
cluster = { m = 2 }
cute = { two_cta = true }

[kernels.per_target."triton:sm100"]
triton = { num_warps = 16 }
pipeline = { ab_stages = 3 }
"""


def data() -> dict:
    import tomllib

    return tomllib.loads(TOML)


def load(text: str = TOML, suffix: str = ".toml"):
    (ls,) = load_text(text, f"spec{suffix}", suffix)
    return ls


def test_toml_yaml_and_json_give_the_same_effective_configs() -> None:
    specs = [load(), load(yaml.safe_dump(data()), ".yaml"), load(json.dumps(data()), ".json")]
    for target in ("triton:sm90", "triton:sm100", "cute:sm100"):
        effective = {json.dumps(ls.spec.for_target(target).model_dump(mode="json")) for ls in specs}
        assert len(effective) == 1, target
    assert len({spec_hash(ls.spec) for ls in specs}) == 1


def test_keys_given_replace_the_kernels_others_keep_it() -> None:
    spec = load().spec
    cute = spec.for_target("cute:sm100")
    assert (cute.tile.m, cute.tile.n, cute.tile.k) == (128, 128, 64)
    assert (cute.cluster.m, cute.cluster.n) == (2, 1)  # n not given: the kernel's
    assert cute.cute.two_cta and cute.cute.tma_store
    assert cute.schedule.persistent and cute.per_target == {}
    sm100 = spec.for_target("triton:sm100")
    assert sm100.triton.num_warps == 16 and sm100.triton.tma  # tma not given: the kernel's
    assert sm100.pipeline.ab_stages == 3 and sm100.pipeline.acc_stages == "auto"
    assert sm100.tile == spec.tile
    sm90 = spec.for_target("triton:sm90")  # no table: the kernel's own config
    assert sm90.triton.num_warps == 8 and sm90.pipeline.ab_stages == "auto"


def test_resolve_reads_the_effective_config() -> None:
    spec = load().spec
    r = resolve(spec, parse_target("triton:sm100"))
    assert r.ab_stages == 3 and r.spec.triton.num_warps == 16
    assert r.acc_threads == 16 * 32
    r90 = resolve(spec, parse_target("triton:sm90"))
    assert r90.acc_threads == 8 * 32 and r90.spec.pipeline.ab_stages == "auto"
    rc = resolve(spec, parse_target("cute:sm100"))
    assert rc.spec.tile.n == 128 and rc.tmem_columns == 128  # 2-CTA MMA M = 256: N columns per CTA
    assert resolve(spec, parse_target("triton:sm100")).spec.tile.n == 256


def test_a_spec_without_tables_dumps_and_hashes_as_before() -> None:
    plain = load(TOML.split("[kernels.per_target")[0]).spec
    assert "per_target" not in plain.model_dump(mode="json")
    assert "per_target" in load().spec.model_dump(mode="json")


def test_a_table_for_an_unlisted_target_is_inert() -> None:
    spec = load(TOML + '[kernels.per_target."cute:sm90"]\ntile = { m = 16, n = 16, k = 16 }\n').spec
    assert [str(t) for t in spec.targets] == ["triton:sm90", "triton:sm100", "cute:sm100"]
    assert not [d for d in check_spec(load(TOML + '[kernels.per_target."cute:sm90"]\ntile = { m = 16, n = 16, k = 16 }\n'))
                if d.severity == "error"]


@pytest.mark.parametrize(("extra", "words"), [
    ('[kernels.per_target."cute:sm42"]\ntile = { m = 64, n = 64, k = 64 }\n', ["cute:sm42", "no arch"]),
    ('[kernels.per_target."triton:sm90"]\ncute = { two_cta = true }\n', ["cute options", "only cute targets"]),
])
def test_per_target_tables_name_known_targets_and_their_own_backend(extra: str, words: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        load(TOML + extra)
    text = str(info.value)
    assert all(w in text for w in words), text


def test_semantics_cannot_be_overridden_per_target() -> None:
    with pytest.raises(SpecError) as info:
        load(TOML + 'a = { dtype = "f16" }\n')
    (issue,) = info.value.issues
    assert issue.line == TOML.count("\n") + 1 and issue.path.endswith("per_target.triton:sm100.a")


def test_a_diagnostic_points_at_the_overriding_line() -> None:
    # tcgen05 2-CTA: tile.m 100 is no MMA shape; only cute:sm100 sees it, at its per_target line.
    text = TOML.replace("tile = { m = 128, n = 128, k = 64 }", "tile = { m = 100, n = 128, k = 64 }")
    diags = [d for d in check_spec(load(text)) if d.severity == "error"]
    assert diags and {d.target for d in diags} == {"cute:sm100"}
    line = text.splitlines().index("tile = { m = 100, n = 128, k = 64 }") + 1
    assert {d.line for d in diags if d.rule.startswith("MMA")} == {line}
    # a key the table does not set points at the kernel's own line
    text = TOML.replace("triton = { num_warps = 8 }", "triton = { num_warps = 48 }")
    diags = [d for d in check_spec(load(text)) if d.rule == "POW001" and "num_warps" in d.message]
    assert [d.target for d in diags] == ["triton:sm90"]
    assert diags[0].line == text.splitlines().index("triton = { num_warps = 48 }") + 1


def test_cfg001_targets_of_one_module_share_its_kernels_shape() -> None:
    # inside the boundary: warps and stages differ per compute capability
    assert not [d for d in check_spec(load()) if d.rule == "CFG001"]
    # past it: a different tile on triton:sm100 would need a second kernel in the one module
    text = TOML + "tile = { m = 128, n = 128, k = 64 }\n"
    diags = [d for d in check_spec(load(text)) if d.rule == "CFG001"]
    assert len(diags) == 1 and diags[0].severity == "error" and diags[0].target == "triton:sm100"
    assert diags[0].line == text.count("\n")
    assert "'m': 128, 'n': 128" in diags[0].message and "'n': 256" in diags[0].message
    text = TOML + "schedule = { persistent = false }\n"
    assert [d.rule for d in check_spec(load(text)) if d.severity == "error"] == ["CFG001"]


def test_render_uses_each_targets_warps_and_stages() -> None:
    ls = load()
    text = render_module(ls, [t for t in ls.spec.targets if t.backend.value == "triton"])
    configs = text.split("CONFIGS = {", 1)[1].split("\n}", 1)[0]
    assert '90: {"num_warps": 8' in configs
    assert '100: {"num_warps": 16, "num_stages": 3}' in configs
    assert "'per_target'" in text  # SPEC is the whole spec, tables included


def test_schema_lists_per_target_keyed_by_target_names() -> None:
    schema = SpecFile.model_json_schema()
    prop = schema["$defs"]["GemmSpec"]["properties"]["per_target"]
    assert prop["additionalProperties"] == {"$ref": "#/$defs/TargetConfig"}
    assert "cute:sm100" in prop["propertyNames"]["enum"]
    assert set(schema["$defs"]["TargetConfig"]["properties"]) == {
        "tile", "cluster", "pipeline", "schedule", "triton", "cute", "pallas", "variants"}


def test_a_dumped_spec_loads_back_with_the_same_effective_configs() -> None:
    # a table's sections dump the keys they were given, not the defaults of the rest
    spec = load().spec
    dumped = spec.model_dump(mode="json")
    assert dumped["per_target"]["triton:sm100"]["triton"] == {"num_warps": 16}
    (again,) = load_text(json.dumps({"kernels": [dumped]}), "again.json", ".json")
    for t in spec.targets:
        assert again.spec.for_target(t) == spec.for_target(t)
