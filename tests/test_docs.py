"""README's spec reference is the one the schema generates now."""

from __future__ import annotations

from pathlib import Path

from specgen.docs import BEGIN, END, spec_reference

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_spec_reference_is_current() -> None:
    text = README.read_text()
    embedded = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert embedded == spec_reference().strip(), "README's spec reference is stale: paste `specgen schema --markdown`"


def test_reference_names_every_epilogue_op_and_target() -> None:
    ref = spec_reference()
    for op in ("Bias", "Scale", "Activation", "Residual", "Clamp", "Cast"):
        assert f"### {op}" in ref
    assert "`pallas:tpu_v7x`" in ref and "`triton:sm100`" in ref
