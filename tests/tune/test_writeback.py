"""Writeback keeps the file's comments and layout (TOML through tomlkit, YAML through ruamel.yaml), and
the written spec checks clean and renders."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from specgen.check import check_spec
from specgen.render.catalogue import render_catalogue
from specgen.spec.load import load_file
from tests.tune.conftest import SMALL, run_tune

YAML = """\
# A YAML spec: this comment, the blank lines and the key order must survive a tune.
kernels:
  - name: yaml_gemm   # inline comment
    kind: gemm
    a: {dtype: bf16, major: k}
    b: {dtype: bf16, major: k}
    out: {dtype: bf16}

    tile: {m: 128, n: 256, k: 64}   # the incumbent tile
    schedule: {persistent: true}
    targets: ["triton:sm90", "triton:sm100"]
"""


def _comments(text: str) -> list[str]:
    return [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line and "specgen tune" not in line]


def test_toml_keeps_comments_and_rerenders(spec_copy, tmp_path: Path) -> None:
    path = spec_copy()
    before = path.read_text()
    r = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, write=True)
    after = path.read_text()
    assert r.edits and after != before
    assert _comments(after) == _comments(before)
    assert after.startswith(before.split("[kernels.per_target.\"triton:sm90\"]")[0][:2000])  # the head untouched
    # the file pads its inline tables, `{ m = 128 }`: so does every line the tuner wrote
    new = [ln[2:] for ln in difflib.ndiff(before.splitlines(), after.splitlines()) if ln.startswith("+ ") and "{" in ln]
    assert new and all("{ " in ln and " }" in ln and not re.search(r"\{\S|\S\}", ln) for ln in new), new
    specs = load_file(path)
    assert not [d for ls in specs for d in check_spec(ls) if d.severity == "error"]
    result = render_catalogue(specs, tmp_path / "out")
    assert not result.refused and (tmp_path / "out" / "triton" / "gemm_bf16.py").is_file()


def test_yaml_keeps_comments_and_rerenders(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(YAML)
    r = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, write=True)
    after = path.read_text()
    assert r.edits
    assert _comments(after) == _comments(YAML)
    assert after.startswith(YAML.split("    targets:")[0])  # everything above the new keys byte for byte
    (ls,) = load_file(path)
    assert ls.spec.for_target("triton:sm90").triton.num_warps == 4
    assert not [d for d in check_spec(ls) if d.severity == "error"]
    assert not render_catalogue([ls], tmp_path / "out").refused


def test_json_spec_is_rewritten(tmp_path: Path) -> None:
    import json

    import yaml

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(yaml.safe_load(YAML), indent=2))
    r = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, write=True)
    assert r.edits and load_file(path)[0].spec.for_target("triton:sm90").tile.n == 128


def test_a_key_written_before_a_tables_closing_comments_keeps_its_own_line(tmp_path: Path) -> None:
    """A second tune of one target: its table ends in the first tune's summary comment, which the writer
    lifts off and puts back after the new key; the key's line must end first (a tune of the residual
    kernel wrote `tile = { ... }# cute:sm90 variant 0 ...` into the catalogue this way)."""
    from specgen.tune.writeback import write_back

    path = tmp_path / "k.toml"
    path.write_text('[[kernels]]\nname = "k"\nkind = "gemm"\na = { dtype = "bf16" }\nb = { dtype = "bf16" }\n'
                    'out = { dtype = "bf16" }\ntile = { m = 128, n = 128, k = 64 }\ntargets = ["cute:sm90"]\n\n[kernels.per_target."cute:sm90"]\n'
                    "variants = [\n  { when = { m_max = 16 }, tile = { m = 64, n = 128, k = 64 } },\n]\n"
                    "# cute:sm90 variant 0 (M <= 16): the first tune\n")
    write_back(path, 0, [(("per_target", "cute:sm90", "tile"), {"m": 128, "n": 256, "k": 64})],
               ["cute:sm90 default: the second tune"])
    lines = path.read_text().splitlines()
    assert "tile = { m = 128, n = 256, k = 64 }" in lines
    assert "# cute:sm90 variant 0 (M <= 16): the first tune" in lines
    assert load_file(path)[0].spec.for_target("cute:sm90").tile.n == 256


def test_a_summary_goes_above_the_next_tables_prose(tmp_path: Path) -> None:
    """A target's table followed by a blank line and the next table's prose (the catalogue's layout): the
    tune's summary joins the table's own comments, above the blank line, and the prose stays with its table
    (a tune of gemm_bias_gelu_bf16 wrote its cute:sm90 line under the cute:sm100 prose)."""
    from specgen.tune.writeback import write_back

    path = tmp_path / "k.toml"
    path.write_text('[[kernels]]\nname = "k"\nkind = "gemm"\na = { dtype = "bf16" }\nb = { dtype = "bf16" }\n'
                    'out = { dtype = "bf16" }\ntile = { m = 128, n = 128, k = 64 }\ntargets = ["cute:sm90", "cute:sm100"]\n\n'
                    '[kernels.per_target."cute:sm90"]\ntile = { m = 128, n = 128, k = 64 }\n# cute:sm90 default: the first tune\n\n'
                    "# The sm100 table: its own prose.\n[kernels.per_target.\"cute:sm100\"]\ntile = { m = 128, n = 128, k = 64 }\n")
    write_back(path, 0, [(("per_target", "cute:sm90", "tile"), {"m": 128, "n": 256, "k": 64})],
               ["cute:sm90 default: the second tune"])
    text = path.read_text()
    assert ("tile = { m = 128, n = 256, k = 64 }\n# cute:sm90 default: the first tune\n# cute:sm90 default: the second tune\n\n"
            "# The sm100 table: its own prose.\n[kernels.per_target.\"cute:sm100\"]") in text, text
    assert load_file(path)[0].spec.for_target("cute:sm90").tile.n == 256
