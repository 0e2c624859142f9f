"""Source positions for spec documents: a map from a value's path to its (line, column), both 1-based.

tomllib and json give values but no positions, so positions come from a second, structural pass:
PyYAML's node marks for YAML, a small scanner for JSON, and one for TOML that understands tables,
arrays of tables, dotted keys, inline tables and arrays, strings and comments. The values themselves
always come from the real parsers; a position is only ever used for messages.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from functools import cache

import tomllib

Path = tuple[str | int, ...]
Positions = Mapping[Path, tuple[int, int]]


class OffsetPositions(Mapping[Path, tuple[int, int]]):
    """Positions kept as character offsets and turned into (line, column) when read: check asks a few of a
    file's paths (those its findings name), not every one the pass records."""

    def __init__(self, text: str, offsets: dict[Path, int]) -> None:
        self._text, self._offsets = text, offsets
        self._starts: list[int] | None = None

    def __getitem__(self, path: Path) -> tuple[int, int]:
        offset = self._offsets[path]
        if self._starts is None:
            self._starts = toml_line_starts(self._text)
        line = bisect.bisect_right(self._starts, offset)
        return (line, offset - self._starts[line - 1] + 1)

    def __contains__(self, path: object) -> bool:
        return path in self._offsets

    def __iter__(self) -> Iterator[Path]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)


@cache
def spec_yaml_loader() -> type:
    """PyYAML's SafeLoader, refusing what a spec never needs and an attacker would use: aliases (a few
    lines of `*ref` expand to gigabytes, billion-laughs style) and duplicate keys (last would win)."""
    import yaml  # optional (specgen[yaml]): only YAML spec files need it

    class SpecLoader(yaml.SafeLoader):
        def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.MarkedYAMLError(None, None, "YAML aliases (*name) are not allowed in spec files: write "
                                           "the value out", event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
            seen: dict[object, yaml.Node] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if first is not None:
                    m = first.start_mark
                    raise yaml.MarkedYAMLError(None, None, f"duplicate key {key!r} (first at line {m.line + 1}, "
                                               f"column {m.column + 1})", key_node.start_mark)
                seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

    return SpecLoader


def yaml_positions(text: str) -> Positions:
    import yaml  # optional (specgen[yaml]): only YAML spec files need it

    positions: dict[Path, tuple[int, int]] = {}
    root = yaml.compose(text, Loader=spec_yaml_loader())

    def walk(node: yaml.Node, path: Path) -> None:
        positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, key.value)
                positions[sub] = (key.start_mark.line + 1, key.start_mark.column + 1)
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return positions


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = re.compile(r"(?:[ \t\r]+|#[^\n]*)*")  # blanks and comments, up to a line's end
_SPACE_LINES = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")  # and across lines
_BASIC_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)  # one-line strings: an escape skips a character
_LITERAL_STRING = re.compile(r"'([^']*)'")
_SCALAR = re.compile(r"[^,\]}\n#]*")  # a number, a date, true or false: up to what ends it
# The lines and items most TOML is made of, each read by one match (the scanner's general way reads them
# too, a part at a time; these only save it the steps): a one-line string (no multi-line quotes) or a scalar,
_PLAIN_VALUE = r"""(?:"(?:[^"\\\n]|\\.)*"(?!")|'[^'\n]*'(?!')|[^\s,\]}#\[{"'][^,\]}\n#]*)"""
# as a bare key's value on a line of its own (with blanks and a comment after it: `_STATEMENT`, below),
# in an inline table (the ',' or '}' after it not read),
_PLAIN_PAIR = re.compile(r"[ \t\r]*([A-Za-z0-9_-]+)[ \t]*=[ \t]*" + _PLAIN_VALUE + r"[ \t\r]*(?=[,}])")
# a bare key and its '=' before any other value (a table or an array) on a line of its own,
_BARE_KEY_EQ = re.compile(r"[ \t\r]*([A-Za-z0-9_-]+)[ \t]*=[ \t]*")  # (or in an inline table)
# and as an array's element (blanks, newlines and comments before it; the ',' or ']' after it not read).
# Possessive: a comment is read to its line's end, never in part (a scalar is never found inside one).
_PLAIN_ITEM = re.compile(r"(?:[ \t\r\n]++|#[^\n]*+)*+(" + _PLAIN_VALUE + r")(?:[ \t\r\n]++|#[^\n]*+)*+(?=[,\]])")


def _inline_value(depth: int) -> re.Pattern[str]:
    """An inline table or array, brackets nested up to `depth`, read whole by one match: its one-line strings
    and comments are atoms (a bracket inside one is no bracket). A multi-line string is not an atom (its
    quotes read as one-line strings): a match holding one is not used (`TomlScanner.top_value`)."""
    atom = r"""[^\[\]{}"'#]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+'|#[^\n]*+"""
    nest = r"[\[{](?:" + atom + r")*+[\]}]"
    for _ in range(depth - 1):
        nest = r"[\[{](?:" + atom + "|" + nest + r")*+[\]}]"
    return re.compile(nest)


# What check reads first of a file: its tables and keys, each inline value skipped whole (scanned when a
# finding asks a path inside it). Deeper values than this are scanned at once.
_INLINE_VALUE = _inline_value(6)
# A table's next statement when it is a bare key's value (most lines are), with the blanks and comments
# before it, in one match: a string or a scalar on a line of its own, or an inline value (group 2, skipped
# whole). Where no such statement follows, it reads the blanks alone.
_STATEMENT = re.compile(r"(?:[ \t\r\n]++|#[^\n]*+)*+(?:([A-Za-z0-9_-]+)[ \t]*=[ \t]*(?:" + _PLAIN_VALUE
                        + r"[ \t\r]*+(?:#[^\n]*+)?(?=\n|\Z)|(" + _INLINE_VALUE.pattern + ")))?")
MULTILINE_QUOTES = ('"""', "'''")


class TomlScanner:
    """Walks TOML text recording where each key and array element starts (offsets; `positions` gives lines
    and columns). Assumes text tomllib accepted."""

    def __init__(self, text: str, line_starts: list[int] | None = None) -> None:
        self.text = text
        self.i = 0
        self.end = len(text)
        self.line_starts = line_starts or toml_line_starts(text)
        self.offsets: dict[Path, int] = {}
        self.record = self.offsets.setdefault  # (path, offset): the first place a path is written stands
        self.aot_index: dict[Path, int] = {}
        # A table's inline values (a key's `{...}` or `[...]`) are skipped by one match and scanned when a path
        # inside one is asked (`expand`): TOML closes an inline value, no other line adds to its paths.
        self.deferred: dict[Path, int] = {}  # an inline value's path: where it starts
        self.multiline = any(q in text for q in MULTILINE_QUOTES)  # else no skipped value can hold one

    def positions(self, under: Path = ()) -> Positions:
        """The recorded paths under `under` (all by default) with their line and column."""
        return _TomlPositions(self, under)

    def top_value(self, path: Path) -> None:
        """A table's key's value: an inline value skipped whole (where one match reads it), else as `value`."""
        self.skip_space()
        if self.peek() in ("{", "["):
            m = _INLINE_VALUE.match(self.text, self.i)
            if m is not None and not self.holds_multiline(m.group()):
                self.deferred[path] = self.i
                self.i = m.end()
                return
        self.value(path)

    def holds_multiline(self, value: str) -> bool:
        return self.multiline and any(q in value for q in MULTILINE_QUOTES)

    def expand(self, path: Path) -> None:
        """Scan the skipped inline value at `path`, recording the paths inside it."""
        resume, self.i = self.i, self.deferred.pop(path)
        with contextlib.suppress(ValueError, IndexError, RecursionError):  # a courtesy: what was read stands
            self.value(path)
        self.i = resume

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def skip_space(self, newlines: bool = False) -> None:
        self.i = (_SPACE_LINES if newlines else _SPACE).match(self.text, self.i).end()

    def string(self) -> str:
        t = self.text
        for quote in ('"""', "'''"):
            if t.startswith(quote, self.i):
                end = self.i + 3
                while True:
                    end = t.index(quote, end)
                    backslashes = 0  # the run of backslashes before the quote (never copy the prefix)
                    while t[end - 1 - backslashes] == "\\":
                        backslashes += 1
                    if quote == "'''" or backslashes % 2 == 0:  # an even run of backslashes escapes itself
                        break
                    end += 1
                while t.startswith(quote[0], end + 3):  # up to two quotes may close the content
                    end += 1
                value, self.i = t[self.i + 3 : end], end + 3
                return value
        m = (_BASIC_STRING if t[self.i] == '"' else _LITERAL_STRING).match(t, self.i)
        if m is None:
            raise ValueError("unterminated string")
        self.i = m.end()
        return m.group(1)

    def key(self) -> list[tuple[str, int]]:
        parts: list[tuple[str, int]] = []
        while True:
            self.skip_space()
            start = self.i
            if self.peek() in ("'", '"'):
                name = self.string()  # a basic string's escapes read as TOML reads them (a literal has none)
                if "\\" in name and self.text[start] == '"':
                    name = tomllib.loads(f"k = {self.text[start:self.i]}")["k"]
                parts.append((name, start))
            else:
                m = _BARE_KEY.match(self.text, self.i)
                if not m:
                    raise ValueError("bad key")
                parts.append((m.group(), start))
                self.i = m.end()
            self.skip_space()
            if self.peek() != ".":
                return parts
            self.i += 1

    def value(self, path: Path) -> None:
        self.skip_space()
        c = self.peek()
        text, record = self.text, self.record
        if c == "{":
            self.i += 1
            pair, key_eq = _PLAIN_PAIR.match, _BARE_KEY_EQ.match
            while True:
                m = pair(text, self.i)
                if m is not None:  # key = a string or a scalar
                    record((*path, m.group(1)), m.start(1))
                    self.i = m.end()
                elif (m := key_eq(text, self.i)) is not None:  # key = a table or an array
                    inner = (*path, m.group(1))
                    record(inner, m.start(1))
                    self.i = m.end()
                    self.value(inner)
                    self.skip_space()
                else:
                    self.skip_space()
                    if self.peek() == "}":
                        self.i += 1
                        return
                    self.keyval(path)
                    self.skip_space()
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() == "}":
                    self.i += 1
                    return
        elif c == "[":
            self.i += 1
            index = 0
            item = _PLAIN_ITEM.match
            while True:
                m = item(text, self.i)
                if m is not None:  # a string or a scalar
                    record((*path, index), m.start(1))
                    self.i = m.end()
                else:
                    self.skip_space(newlines=True)
                    if self.peek() == "]":
                        self.i += 1
                        return
                    record((*path, index), self.i)
                    start = self.i
                    self.value((*path, index))
                    if self.i == start:  # end of text or a character no value starts with: never loop forever
                        raise ValueError("bad array")
                    self.skip_space(newlines=True)
                index += 1
                if self.peek() == ",":
                    self.i += 1
        elif c in ("'", '"'):
            self.string()
        else:
            self.i = _SCALAR.match(self.text, self.i).end()

    def keyval(self, table: Path, top: bool = False) -> None:
        parts = self.key()
        path = table
        for name, offset in parts:
            path = (*path, name)
            self.record(path, offset)
        self.skip_space()
        self.i += 1  # '='
        (self.top_value if top else self.value)(path)

    def resolve(self, parts: list[tuple[str, int]]) -> Path:
        path: Path = ()
        for name, offset in parts:
            path = (*path, name)
            self.record(path, offset)
            if path in self.aot_index:
                path = (*path, self.aot_index[path])
        return path

    def scan(self) -> None:
        table: Path = ()
        text, statement, key_eq, record = self.text, _STATEMENT.match, _BARE_KEY_EQ.match, self.record
        while True:
            m = statement(text, self.i)
            if m.start(1) >= 0 and (m.start(2) < 0 or not self.holds_multiline(m.group(2))):
                path = (*table, m.group(1))
                record(path, m.start(1))
                if m.start(2) >= 0:  # an inline value: scanned when a path inside it is asked
                    self.deferred[path] = m.start(2)
                self.i = m.end()
                continue
            self.i = m.start(1) if m.start(1) >= 0 else m.end()
            if self.i >= self.end:
                return
            if text[self.i] == "[":
                start = self.i
                array = text.startswith("[[", self.i)
                self.i += 2 if array else 1
                parts = self.key()
                if array:
                    prefix = self.resolve(parts[:-1])
                    full = (*prefix, parts[-1][0])
                    record(full, parts[-1][1])
                    self.aot_index[full] = self.aot_index.get(full, -1) + 1
                    table = (*full, self.aot_index[full])
                    record(table, start)
                else:
                    table = self.resolve(parts)
                end = text.find("\n", self.i)  # not `in self.text[i:]`: that copies the rest of the file
                self.i = end if end >= 0 else len(text)
            elif (m := key_eq(text, self.i)) is not None:  # key = a table or an array
                path = (*table, m.group(1))
                record(path, self.i)
                self.i = m.end()
                self.top_value(path)
            else:
                self.keyval(table, top=True)


class _TomlPositions(Mapping[Path, tuple[int, int]]):
    """A lazy scanner's positions under a path prefix: a path inside a skipped inline value scans that value
    first (once); reading them all scans every one. (line, column) from offsets when read."""

    def __init__(self, scanner: TomlScanner, under: Path) -> None:
        self._scanner, self._under = scanner, under

    def _offset(self, path: Path) -> int | None:
        if path[: len(self._under)] != self._under:
            return None
        scanner = self._scanner
        offset = scanner.offsets.get(path)
        if offset is None and scanner.deferred:
            for cut in range(len(path) - 1, 0, -1):  # the skipped value holding it, if any (values nest
                if path[:cut] in scanner.deferred:  # inside one; none is skipped inside another)
                    scanner.expand(path[:cut])
                    return scanner.offsets.get(path)
        return offset

    def __getitem__(self, path: Path) -> tuple[int, int]:
        offset = self._offset(path)
        if offset is None:
            raise KeyError(path)
        starts = self._scanner.line_starts
        line = bisect.bisect_right(starts, offset)
        return (line, offset - starts[line - 1] + 1)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and self._offset(path) is not None

    def __iter__(self) -> Iterator[Path]:
        scanner, n = self._scanner, len(self._under)
        while scanner.deferred:
            scanner.expand(next(iter(scanner.deferred)))
        return iter([p for p in scanner.offsets if p[:n] == self._under])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def toml_positions(text: str) -> Positions:
    """Every key's and array element's position (a key of a table, of an inline table, an array's element),
    each inline value scanned when a path inside it is first asked."""
    scanner = TomlScanner(text)
    try:
        scanner.scan()
    except (ValueError, IndexError, RecursionError):  # positions are a courtesy: never fail a load over them
        return {}
    return scanner.positions()


def toml_line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


class _JsonScanner:
    """Walks JSON text (already accepted by `json.loads`) recording where keys and elements start."""

    _WS = " \t\r\n"

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.positions: dict[Path, tuple[int, int]] = {}
        self.duplicates: list[tuple[Path, tuple[int, int], tuple[int, int]]] = []  # (path, first, second)

    def where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in self._WS:
            self.i += 1

    def string(self) -> str:
        j = self.i + 1
        while self.text[j] != '"':
            j += 2 if self.text[j] == "\\" else 1
        raw, self.i = self.text[self.i : j + 1], j + 1
        return json.loads(raw)

    def value(self, path: Path) -> None:
        self.skip()
        self.positions.setdefault(path, self.where(self.i))
        c = self.text[self.i]
        if c == "{":
            self.i += 1
            self.skip()
            while self.text[self.i] != "}":
                start = self.i
                key = self.string()
                if (*path, key) in self.positions:
                    self.duplicates.append(((*path, key), self.positions[(*path, key)], self.where(start)))
                self.positions[(*path, key)] = self.where(start)
                self.skip()
                self.i += 1  # ':'
                self.value((*path, key))
                self.skip()
                if self.text[self.i] == ",":
                    self.i += 1
                    self.skip()
            self.i += 1
        elif c == "[":
            self.i += 1
            self.skip()
            index = 0
            while self.text[self.i] != "]":
                self.value((*path, index))
                index += 1
                self.skip()
                if self.text[self.i] == ",":
                    self.i += 1
                    self.skip()
            self.i += 1
        elif c == '"':
            self.string()
        else:
            while self.i < len(self.text) and self.text[self.i] not in ",]}" + self._WS:
                self.i += 1


def json_duplicate_keys(text: str) -> list[tuple[Path, tuple[int, int], tuple[int, int]]]:
    """Each key written twice in one object: its path, the first and the second position."""
    scanner = _JsonScanner(text)
    with contextlib.suppress(IndexError, ValueError, RecursionError):
        scanner.value(())
    return scanner.duplicates


# JSON's parts a position needs: a key with the scalar after it, if any (one match: an object's scalar
# records nothing of its own), a bracket, and a value in an array (a string or a scalar). Commas and colons
# are skipped: an array's next element is its next value.
_JSON_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_JSON_PART = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*(?:' + _JSON_STRING + r'|[^\s{}\[\],:"]+)?'
                        r'|[{}\[\]]|' + _JSON_STRING + r'|[^\s{}\[\],:"]+')


def json_positions(text: str) -> Positions:
    """What `_JsonScanner` records (a key's position, else where the value starts; a later duplicate key
    moves its key's), in one pass of a regular expression over text json.loads accepted: issue 36's check
    reads a position of every file with findings."""
    try:
        return OffsetPositions(text, _json_offsets(text))
    except (IndexError, ValueError, KeyError):  # a courtesy: never fail a load over it
        return {}


def _json_offsets(text: str) -> dict[Path, int]:
    offsets: dict[Path, int] = {}
    stack: list[list] = []  # each open container: [its path, the next index (None: an object)]
    path: Path = ()  # the innermost open container's
    index = None  # its next element's index (None: it is an object, or none is open)
    key: Path | None = None  # the path of the key just read, whose value may open a container
    top = True  # the document's own value comes next
    setdefault = offsets.setdefault
    for m in _JSON_PART.finditer(text):
        name = m.group(1)
        if name is not None:  # an object's key (and its scalar value)
            key = (*path, json.loads(f'"{name}"') if "\\" in name else name)
            offsets[key] = m.start()
            continue
        c = text[m.start()]
        if c == "}" or c == "]":
            stack.pop()
            if stack:
                path, index = stack[-1]
            key = None
            continue
        if index is not None:  # an array's element
            slot = (*path, index)
            index += 1
            stack[-1][1] = index
        elif key is not None:
            slot, key = key, None
        elif top:
            slot, top = (), False
        else:
            raise ValueError("a value where none goes")
        setdefault(slot, m.start())
        if c == "{":
            path, index = slot, None
            stack.append([path, None])
        elif c == "[":
            path, index = slot, 0
            stack.append([path, 0])
    return offsets
