"""TOML positions read lazily (specgen/spec/positions.py): a table's inline values are skipped whole when the
file is first read and scanned when a path inside one is asked. On random valid TOML (tables, arrays of tables,
dotted and quoted keys, inline tables and arrays over one or many lines, comments holding brackets and quotes,
one-line and multi-line strings holding brackets, CRLF), a path asked first of a fresh map reads where the whole
map reads it, a path never written is absent either way, and every key's position is where the key is written."""

from __future__ import annotations

import re

import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.spec.positions import toml_positions

KEYS = st.sampled_from(["a", "b_c", "d-e", "1", "'lit key'", '"q.k"', '"esc\\"k"', "x.y", "x . 'z'"])
SCALARS = st.sampled_from([
    "1", "-2", "3.5", "true", "inf", "1979-05-27", "1979-05-27 07:32:00", "0x1f", '"s"', "'l'", '"a, ] } # ="',
    "'# not'", '""', '"\\\\"', '"x\\"y"', '"""ml ] {\n x"""', "'''lit ] { '''", '"""q"" ]"""',
])
QUOTED = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")  # a quoted key where a position points
BLANK = st.sampled_from(["", " ", "  ", "\t"])
COMMENT = st.sampled_from(["", "", "  # c", "  # x, y", "  # ]", '  # "', "  # = ["])


def _unique(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Inline tables' keys, each once, none a dotted prefix of another (TOML refuses both)."""
    seen: set[str] = set()
    out = []
    for key, value in pairs:
        head = key.split(".")[0].strip()
        if head not in seen:
            seen.add(head)
            out.append((key, value))
    return out


@st.composite
def values(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["scalar", "scalar", "table", "array", "lines"] if depth < 3 else ["scalar"]))
    if kind == "table":
        pairs = _unique(draw(st.lists(st.tuples(KEYS, values(depth + 1)), max_size=3)))
        sep = "," + draw(BLANK)
        return "{" + draw(BLANK) + sep.join(f"{k}{draw(BLANK)}={draw(BLANK)}{v}" for k, v in pairs) + draw(BLANK) + "}"
    if kind in ("array", "lines"):
        items = draw(st.lists(values(depth + 1), max_size=4))
        if kind == "array":
            return "[" + draw(BLANK) + ("," + draw(BLANK)).join(items) + draw(BLANK) + "]"
        return "[\n" + "".join(f"{draw(BLANK)}{item},{draw(COMMENT)}\n" for item in items) + "]"
    return draw(SCALARS)


@st.composite
def documents(draw: st.DrawFn) -> str:
    lines = []
    for t in range(draw(st.integers(1, 4))):
        if t or draw(st.booleans()):
            lines.append(draw(st.sampled_from(["[[kernels]]", "[ tab ]", f"[t{t}.'s']", "[[ arr . x ]]"])) + draw(COMMENT))
        names = draw(st.lists(st.sampled_from(["name", "tile", "targets", "v", "w_x", "q"]), unique=True, max_size=5))
        for name in names:
            lines.append(f"{draw(BLANK)}{name}{draw(BLANK)}={draw(BLANK)}{draw(values())}{draw(COMMENT)}")
        if draw(st.booleans()):
            lines.append("# a whole line ] { \"")
    text = "\n".join(lines) + "\n"
    return text.replace("\n", "\r\n") if draw(st.integers(0, 4)) == 0 else text


def _valid(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(documents(), st.randoms(use_true_random=False))
def test_a_path_asked_first_reads_as_the_whole_map_reads_it(text, rnd):
    if not _valid(text):
        return
    whole = dict(toml_positions(text))
    lines = text.replace("\r\n", "\n").split("\n")
    for path, (line, col) in whole.items():
        if isinstance(path[-1], str):
            at = lines[line - 1][col - 1:]
            quoted = QUOTED.match(at)
            written = tomllib.loads(f"k = {quoted.group()}")["k"] if quoted else at
            assert written.startswith(path[-1]) if not quoted else written == path[-1], (path, at)
    for path in rnd.sample(sorted(whole, key=repr), min(6, len(whole))):
        fresh = toml_positions(text)
        assert fresh[path] == whole[path]
        assert (*path, "never") not in fresh and (*path, 99) not in fresh


def test_a_multiline_string_inside_an_inline_array_is_scanned_not_skipped():
    """A one-match skip reads `\"\"\"` as one-line strings: an inline value holding one is scanned at once, and
    the keys after it keep their places."""
    text = 'arr = [ """a ] {\n""", 2 ]\nnext = { k = 1 }\nlast = 3\n'
    tomllib.loads(text)
    p = toml_positions(text)
    assert p[("arr", 1)] == (2, 6) and p[("next", "k")] == (3, 10) and p[("last",)] == (4, 1)
