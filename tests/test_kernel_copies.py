"""A kernel written again (a copy of a file, a template's output) is validated, resolved and ruled on once per
process (issue 36's check speed): the copy reads exactly as if it were checked alone. Each memo is pinned here on
both sides: what it shares (the configs) and what stays each kernel's own (its name, description, positions and
the errors they have)."""

from __future__ import annotations

import json

import pytest

from specgen.check import KernelMemo, check_specs, check_unsettled
from specgen.spec import load as load_module
from specgen.spec.file import SpecFile
from specgen.spec.load import SpecError, load_text

KERNEL = """\
[[kernels]]
name = "{name}"
kind = "gemm"{description}
a = {{ dtype = "bf16" }}
b = {{ dtype = "bf16" }}
out = {{ dtype = "bf16" }}
tile = {{ m = 128, n = 256, k = 64 }}
schedule = {{ persistent = true }}
targets = ["triton:sm90", "triton:sm100", "cute:sm90"]
triton = {{ num_warps = 8 }}
{extra}
"""
# past CFG001's boundary: triton:sm100 would need a second kernel in the one Triton module
DISAGREES = '[kernels.per_target."triton:sm100"]\ntile = { m = 128, n = 128, k = 64 }\n'


def kernel(name: str, description: str | None = None, extra: str = "") -> str:
    desc = "" if description is None else f"\ndescription = {json.dumps(description)}"
    return KERNEL.format(name=name, description=desc, extra=extra)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(load_module, "_VALIDATED", {})


def _alone(text: str) -> list:
    """What full validation of the file gives, no kernel shared."""
    import tomllib

    return SpecFile.model_validate(tomllib.loads(text)).kernels


def test_a_copy_reads_as_the_kernel_validated_alone() -> None:
    text = kernel("first", "one") + kernel("second") + kernel("third", "three")
    loaded = load_text(text, "copies.toml", ".toml")
    alone = _alone(text)
    assert [ls.spec.model_dump() for ls in loaded] == [s.model_dump() for s in alone]
    assert [ls.spec.model_fields_set for ls in loaded] == [s.model_fields_set for s in alone]
    assert [ls.name for ls in loaded] == ["first", "second", "third"]
    assert [ls.spec.description for ls in loaded] == ["one", "", "three"]
    # the first and third share their configs (one validation); each keeps its own name and description
    assert loaded[0].spec is not loaded[2].spec and loaded[0].spec.tile is loaded[2].spec.tile
    # a second file's copy is validated once too, and dumps as its own
    again = load_text(kernel("fourth", "four"), "again.toml", ".toml")
    assert again[0].spec.tile is loaded[0].spec.tile and again[0].spec.model_dump()["name"] == "fourth"


@pytest.mark.parametrize(("name", "description", "words"), [
    ("2fast", None, ["kernels[1].name"]),
    ("a" * 300, None, ["kernels[1].name"]),
    ("fine", 'ends """ early', ["kernels[1].description", "backslashes"]),
    ("fine", "bell\x07", ["kernels[1].description", "control characters"]),
])
def test_a_copys_own_name_and_description_are_still_validated(name: str, description: str | None, words: list[str]) -> None:
    good = kernel("first", "one")
    load_text(good, "warm.toml", ".toml")  # the configs are known: only the copy's own fields can fail
    text = good + kernel(name, description)
    with pytest.raises(SpecError) as shared:
        load_text(text, "copies.toml", ".toml")
    load_module._VALIDATED.clear()
    with pytest.raises(SpecError) as alone:
        load_text(text, "copies.toml", ".toml")
    assert [str(i) for i in shared.value.issues] == [str(i) for i in alone.value.issues]
    assert all(w in str(shared.value) for w in words), str(shared.value)
    field = words[0].rpartition(".")[2]
    copy = text.splitlines()[good.count("\n"):]
    line = good.count("\n") + next(i for i, x in enumerate(copy) if x.startswith(f"{field} =")) + 1
    assert shared.value.issues[0].line == line


def test_a_copy_without_a_name_is_refused_where_it_stands() -> None:
    text = kernel("first") + kernel("first").replace('name = "first"\n', "")
    with pytest.raises(SpecError) as info:
        load_text(text, "copies.toml", ".toml")
    assert "kernels[1].name" in str(info.value) and "Field required" in str(info.value)


def test_each_copy_reports_its_own_module_disagreement() -> None:
    text = kernel("first", extra=DISAGREES) + kernel("second", extra=DISAGREES)
    specs = load_text(text, "copies.toml", ".toml")
    memo = KernelMemo()
    shared = check_unsettled(specs, memo=memo).diagnostics
    alone = check_specs(load_text(text, "copies.toml", ".toml")).diagnostics
    assert shared == alone
    cfg = [d for d in shared if d.rule == "CFG001"]
    assert [d.spec for d in cfg] == ["first", "second"] and cfg[0].line < cfg[1].line
    # a kernel whose targets agree is checked for it once, and its copies still agree
    agreeing = load_text(kernel("third") + kernel("fourth"), "more.toml", ".toml")
    assert not [d for d in check_unsettled(agreeing, memo=memo).diagnostics if d.rule.startswith("CFG")]
    assert agreeing[0].key in memo.agreed and specs[0].key not in memo.agreed


def test_near_verdicts_of_copies_point_at_each_copys_own_lines() -> None:
    text = kernel("first") + kernel("second")
    specs = load_text(text, "copies.toml", ".toml")
    report = check_specs(specs, settle="analytic")
    near = [d for d in report.diagnostics if "near the boundary" in d.message]
    first = [(d.rule, d.target, d.variant, d.line - specs[0].line) for d in near if d.spec == "first"]
    second = [(d.rule, d.target, d.variant, d.line - specs[1].line) for d in near if d.spec == "second"]
    assert first and first == second  # the same findings, each at its own kernel's lines


def _positions_alone(text: str) -> dict:
    from specgen.spec.positions import toml_positions

    return dict(toml_positions(text).items())


@pytest.mark.parametrize("suffix", ["_c1", "_a_much_longer_copy_name"])
def test_a_copys_positions_are_its_own_lines(monkeypatch, suffix: str) -> None:
    """Every shipped catalogue file, then a copy of it with its kernels renamed (another name length) and two
    lines more above: each kernel's every path reads where a whole-file scan puts it, the copy's read off the
    first's tables (multi-line descriptions and all)."""
    from pathlib import Path

    from specgen.spec import kernel_tables as tables_module

    monkeypatch.setattr(tables_module, "_TABLES", {})
    for f in sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.toml")):
        text = f.read_text()
        names = [ls.name for ls in load_text(text, f.name, ".toml")]
        copy = "# a copy\n\n" + text
        for name in names:
            copy = copy.replace(f'name = "{name}"', f'name = "{name}{suffix}"')
        for source in (text, copy):
            loaded = load_text(source, f.name, ".toml")
            alone = _positions_alone(source)
            for ls in loaded:
                mine = ls.positions.for_kernel(ls.index)
                paths = [p for p in alone if p[:2] == ("kernels", ls.index)]
                assert paths and {p: mine[p] for p in paths if p in mine} == {p: alone[p] for p in paths}, (f, ls.name)
    assert tables_module._TABLES  # the copies were read off their firsts


def test_a_kernels_header_inside_a_multiline_string_is_no_table() -> None:
    from specgen.spec.kernel_tables import toml_kernel_tables

    text = kernel("first", "x") + 'description = """\n[[kernels]]\nname = "not"\n"""\n' + kernel("second")
    text = text.replace('description = "x"\n', "", 1)
    starts = toml_kernel_tables(text, 2)
    assert starts is not None and [text[i : i + 11] for i in starts] == ["[[kernels]]"] * 2
    assert starts[1] > text.index('"""\n', text.index('"""') + 3)
    loaded = load_text(text, "ml.toml", ".toml")
    assert [ls.name for ls in loaded] == ["first", "second"] and loaded[1].line == text[: starts[1]].count("\n") + 1
