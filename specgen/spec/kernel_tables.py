"""A spec file's `[[kernels]]` tables: where each starts, and the positions of one kernel's fields read from its
table alone (what check needs where a few kernels of a large file have findings), shared by tables written alike
(a copy of a file, a template's output: one scan, moved to each copy's lines)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Mapping

from specgen.spec.positions import MULTILINE_QUOTES, Path, Positions, TomlScanner

# A `[[kernels]]` header at a line's start: the line-up of a file's kernels' tables where no multi-line
# string holds such a line (a value never starts with a bare word).
_KERNELS_HEADER = re.compile(r"^[ \t]*(\[\[)[ \t]*kernels[ \t]*\]\]", re.M)
# What can hold a `[[kernels]]` line that is no header: a multi-line string. Read in order with what could hide
# its quotes (a comment, a one-line string), so each match starts where TOML starts one (text tomllib accepted).
_QUOTED = re.compile(r'#[^\n]*|"""(?:[^"\\]|\\.|"(?!""))*"""(?:""?(?!"))?|\'\'\'(?:[^\']|\'(?!\'\'))*\'\'\'(?:\'\'?(?!\'))?'
                     r'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'', re.S)


def toml_kernel_tables(text: str, kernels: int) -> list[int] | None:
    """Where each of a file's `kernels` tables starts (`[[kernels]]`), or None where the file does not read
    as one such header per kernel, plainly (an inline `kernels` array, quoted keys)."""
    starts = [m.start(1) for m in _KERNELS_HEADER.finditer(text)]
    if any(q in text for q in MULTILINE_QUOTES) and starts:
        spans = [(m.start(), m.end()) for m in _QUOTED.finditer(text) if m.group().startswith(MULTILINE_QUOTES)]
        starts = [i for i in starts if not any(a < i < b for a, b in spans)]
    return starts if len(starts) == kernels else None


# A kernel's `name = "..."` statement on a line of its own, its value (group 1): what a copy changes.
_NAME_STATEMENT = re.compile(r"""^[ \t]*name[ \t]*=[ \t]*("[A-Za-z0-9_]*"|'[A-Za-z0-9_]*')[ \t]*$""", re.M)
# Kernel tables scanned so far, by their text less the name's value (and its length): a copy's positions are its
# first's, moved to its own lines. At most _TABLES_HELD, then it starts over.
_TABLES: dict[tuple[str, int], tuple[Positions, int, int]] = {}
_TABLES_HELD = 256


class _MovedPositions(Mapping[Path, tuple[int, int]]):
    """Another kernel table's positions (kernel `source`, whose header is on line `line`) read as those of an
    identical table (kernel `index`, `shift` lines further)."""

    def __init__(self, positions: Positions, source: int, index: int, shift: int) -> None:
        self._positions, self._source, self._index, self._shift = positions, source, index, shift

    def _theirs(self, path: object) -> Path | None:
        if not isinstance(path, tuple) or path[:2] != ("kernels", self._index):
            return None
        return ("kernels", self._source, *path[2:])

    def __getitem__(self, path: Path) -> tuple[int, int]:
        theirs = self._theirs(path)
        if theirs is None:
            raise KeyError(path)
        line, column = self._positions[theirs]
        return line + self._shift, column

    def __contains__(self, path: object) -> bool:
        theirs = self._theirs(path)
        return theirs is not None and theirs in self._positions

    def __iter__(self) -> Iterator[Path]:
        return iter([("kernels", self._index, *p[2:]) for p in self._positions])

    def __len__(self) -> int:
        return len(self._positions)


def toml_kernel_positions_shared(text: str, tables: list[int], index: int, line_starts: list[int],
                                 name: object) -> Positions:
    """`toml_kernel_positions`, shared by tables written alike: where a table's text less its `name` value is
    one scanned before (a copy of a file, a template's output), its positions are that table's, moved."""
    start = text.rfind("\n", 0, tables[index]) + 1  # the header's line: columns then agree
    end = tables[index + 1] if index + 1 < len(tables) else len(text)
    block = text[start:end]
    names = list(_NAME_STATEMENT.finditer(block))
    if len(names) != 1 or names[0].group(1)[1:-1] != name:
        return toml_kernel_positions(text, tables, index, line_starts)
    m = names[0]
    key = (block[: m.start(1)] + block[m.end(1) :], m.end(1) - m.start(1))
    line = bisect.bisect_right(line_starts, start)
    seen = _TABLES.get(key)
    if seen is not None:
        positions, source, first = seen
        return _MovedPositions(positions, source, index, line - first)
    positions = toml_kernel_positions(text, tables, index, line_starts)
    if len(_TABLES) >= _TABLES_HELD:
        _TABLES.clear()
    _TABLES[key] = (positions, index, line)
    return positions


def toml_kernel_positions(text: str, tables: list[int], index: int, line_starts: list[int]) -> Positions:
    """`toml_positions` of one kernel's fields (its paths under ("kernels", index)), read from its table
    alone: what a check needs where a few kernels of a large file have findings."""
    scanner = TomlScanner(text, line_starts)
    scanner.i = tables[index]
    scanner.end = tables[index + 1] if index + 1 < len(tables) else len(text)
    scanner.aot_index[("kernels",)] = index - 1
    try:
        scanner.scan()
    except (ValueError, IndexError, RecursionError):
        return {}
    return scanner.positions(("kernels", index))
