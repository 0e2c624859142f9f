"""The spec loader's TOML parser (specgen/spec/load.py, issue 36): tomli (compiled, TOML 1.0) where present,
giving what the stdlib tomllib gives, and tomllib's own refusal for text either refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from specgen.spec import load

ROOT = Path(__file__).resolve().parent.parent


def _outcome(fn, text: str) -> object:
    try:
        return fn(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("text", [
    'a = {x=1,\n y=2}\n', 'a = {x=1, y=2,}\n', 'a = "\\e"\n', 'a = "\\x41"\n', "a = 07:32\n",
    "a = 1979-05-27T07:32Z\n", "a = 1\na = 2\n", "a = [1,\n", "a = " + "9" * 5000 + "\n",
    "a = " + "[" * 150 + "]" * 150 + "\n", "a = " + "[" * 700 + "]" * 700 + "\n", "a = " + "[" * 3000 + "]" * 3000 + "\n",
])
def test_toml_text_reads_as_tomllib_reads_it(text):
    assert _outcome(load._parse_toml, text) == _outcome(tomllib.loads, text)


def test_the_catalogue_reads_as_tomllib_reads_it():
    for f in sorted((ROOT / "specs").glob("*.toml")):
        assert load._parse_toml(f.read_text()) == tomllib.loads(f.read_text())
