"""Load spec files (TOML, YAML, JSON) into validated kernel specs (each its kind's model, a `LayeredSpec`) that
remember where they came from.

Every failure is a `SpecError` listing `SpecIssue`s, each naming file, line, column, the field path and
what was expected, so an editor can jump to it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tomllib
from pydantic import TypeAdapter, ValidationError

from specgen.spec.file import SpecFile
from specgen.spec.kernel_tables import toml_kernel_positions_shared, toml_kernel_tables
from specgen.spec.models import LayeredSpec, copy_model
from specgen.spec.positions import (
    Positions,
    json_duplicate_keys,
    json_positions,
    spec_yaml_loader,
    toml_line_starts,
    toml_positions,
    yaml_positions,
)

SPEC_SUFFIXES = (".toml", ".yaml", ".yml", ".json")
# Larger spec files are refused before reading: 64 MiB holds about 400k kernels.
MAX_FILE_BYTES = 64 << 20
_MAX_SHOWN = 60  # characters of a user's value quoted back in a message


def inert(text: str) -> str:
    """Text safe to print: control characters (newlines, ANSI escapes, carriage returns) escaped as in
    repr, so a key or value from a spec file can never forge output lines or drive the terminal."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def quote(value: object) -> str:
    """A user's value as a short, inert repr."""
    shown = repr(value)
    return inert(shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 5] + "...'" * isinstance(value, str)
                 + f" ({len(shown)} characters)")


@dataclass(frozen=True)
class SpecIssue:
    file: str
    line: int
    column: int
    path: str  # dotted field path, e.g. kernels[0].tile.m
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return inert(f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}")


class SpecError(Exception):
    def __init__(self, issues: Sequence[SpecIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class LazyPositions:
    """Positions are computed on first use: only files with diagnostics pay for the second pass; in a TOML
    file of `[[kernels]]` tables, only the kernels with diagnostics (`for_kernel`)."""

    def __init__(self, text: str, suffix: str) -> None:
        self._text, self._suffix, self._positions = text, suffix, None
        self.kernels: int | None = None  # how many kernels the file holds, once it parsed as a spec file
        self._tables: list[int] | None = None
        self._lines: list[int] = []
        self._kernel: dict[int, Positions] = {}
        self.names: list[object] = []  # each kernel's name as written (a copy's positions are its first's)

    def for_kernel(self, index: int) -> Positions:
        """Positions enough for the paths of kernel `index` (under ("kernels", index)), and their ancestors."""
        if self._positions is None and self._suffix == ".toml" and self.kernels is not None:
            if self._tables is None:
                self._tables = toml_kernel_tables(self._text, self.kernels) or []
                self._lines = toml_line_starts(self._text) if self._tables else []
            if self._tables:
                found = self._kernel.get(index)
                if found is None:
                    name = self.names[index] if index < len(self.names) else None
                    found = self._kernel[index] = toml_kernel_positions_shared(self._text, self._tables, index,
                                                                               self._lines, name)
                return found
        return self.get()

    def get(self) -> Positions:
        if self._positions is None:
            if self._suffix == ".toml":
                self._positions = toml_positions(self._text)
            elif self._suffix == ".json":
                self._positions = json_positions(self._text)
            else:
                import yaml  # present: the file parsed

                try:
                    self._positions = yaml_positions(self._text)
                except (yaml.YAMLError, RecursionError):  # aliases that make a cycle: values stand,
                    self._positions = {}  # positions do not
        return self._positions


@dataclass(frozen=True)
class LoadedSpec:
    """A validated kernel spec and where it was written."""

    spec: LayeredSpec
    file: str
    index: int  # position in the file's `kernels` list
    positions: LazyPositions = field(repr=False, compare=False)
    raw: object = field(default=None, repr=False, compare=False)  # the kernel as parsed, before validation
    # `raw` less its name and description (`kernel_key`): what the spec's configs read, the same for a copy
    key: str | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def line(self) -> int:
        return self.where(())[0]

    def where(self, field_path: tuple[str | int, ...]) -> tuple[int, int]:
        """Line and column of a field of this kernel, or of its nearest written ancestor."""
        path = ("kernels", self.index, *field_path)
        positions = self.positions.for_kernel(self.index)
        while path:
            if path in positions:
                return positions[path]
            path = path[:-1]
        return (1, 1)

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.spec)


def spec_hash(spec: LayeredSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def format_path(parts: Iterable[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _parse_yaml(text: str, file: str) -> object:
    try:
        import yaml
    except ImportError:
        raise SpecError([SpecIssue(file, 1, 1, "", "YAML spec files need PyYAML: pip install 'specgen[yaml]' "
                                   "(or write the spec in TOML or JSON)")]) from None
    try:
        return yaml.load(text, Loader=spec_yaml_loader())  # noqa: S506 - a SafeLoader without aliases
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = e.problem if e.problem else str(e)
        prefix = "" if problem.startswith(("duplicate key", "YAML aliases")) else "YAML syntax: "
        raise SpecError([SpecIssue(file, line, col, "", f"{prefix}{problem}")]) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (control characters)
        line, col = _offset_position(text, e.position)
        raise SpecError([SpecIssue(file, line, col, "", f"YAML syntax: {e.reason} (#x{e.character:04x})")]) from None


def _fast_toml() -> Callable[[str], dict] | None:
    """tomli's `loads` where tomli is a compiled TOML 1.0 build (2.1 and 2.2: the stdlib tomllib's parser,
    mypyc-compiled, about twice as fast over issue 36's 50,000 kernels); else None. Later tomli reads TOML
    1.1, which tomllib refuses: not used."""
    try:
        import tomli
    except ImportError:
        return None
    version = tuple(int(p) for p in re.findall(r"\d+", getattr(tomli, "__version__", ""))[:2])
    return tomli.loads if (2, 1) <= version < (2, 3) else None


_TOMLI = _fast_toml()


_TOMLI_DEPTH = 100  # nesting up to which tomllib (recursive Python) reads what tomli reads


def _nested_past(data: object, limit: int) -> bool:
    """Whether tomli's tables and arrays (plain dicts and lists) nest deeper than `limit`: level by level."""
    level = [data]
    for _ in range(limit + 1):
        inner = []
        for value in level:
            inner += [c for c in (value.values() if type(value) is dict else value) if type(c) is dict or type(c) is list]
        if not inner:
            return False
        level = inner
    return True


def _parse_toml(text: str) -> dict:
    """`tomllib.loads(text)`: the same data, by tomli where it is there; text tomli refuses, or nests deeper
    than tomllib may recurse, is read by tomllib again, so a refusal says what tomllib says."""
    if _TOMLI is not None:
        try:
            data = _TOMLI(text)
        except Exception:  # noqa: BLE001 - tomllib says why (or reads it)
            data = None
        if data is not None and not _nested_past(data, _TOMLI_DEPTH):
            return data
    return tomllib.loads(text)


def _parse(text: str, file: str, suffix: str) -> object:
    try:
        if suffix == ".toml":
            return _parse_toml(text)
        if suffix == ".json":
            return _parse_json(text, file)
        return _parse_yaml(text, file)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        if not m and "(at end of document)" in str(e):
            line, col = _offset_position(text, len(text))
        raise SpecError([SpecIssue(file, line, col, "", f"TOML syntax: {re.sub(r' [(]at .*', '', str(e))}")]) from None
    except json.JSONDecodeError as e:
        raise SpecError([SpecIssue(file, e.lineno, e.colno, "", f"JSON syntax: {e.msg}")]) from None
    except (ValueError, RecursionError, MemoryError) as e:  # an integer past Python's digit limit; nesting
        kind = "nested too deeply" if isinstance(e, (RecursionError, MemoryError)) else str(e).split(";")[0]
        raise SpecError([SpecIssue(file, 1, 1, "", f"cannot parse: {kind}")]) from None


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _DuplicateKey
    return d


def _parse_json(text: str, file: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey:
        # Rare: find both positions with the scanner (json.loads accepted the text otherwise).
        issues = [SpecIssue(file, *second, format_path(path), f"duplicate key {quote(path[-1])} "
                            f"(first at line {first[0]}, column {first[1]})")
                  for path, first, second in json_duplicate_keys(text)]
        raise SpecError(issues or [SpecIssue(file, 1, 1, "", "duplicate key in a JSON object")]) from None


def _offset_position(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _issue_from_pydantic(error: dict, data: object, file: str, positions: Positions) -> SpecIssue:
    """Map a pydantic error location onto the document: drop union tags, keep the missing field's name."""
    loc = error["loc"]
    node, doc_path, shown = data, (), []
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in (node.get("op"), node.get("kind")) and (i < len(loc) - 1 or part not in node):
            continue  # a discriminated union's tag (before keys: `{op = "scale", scale = 2.0}` has both)
        elif isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node, doc_path = node[part], (*doc_path, part)
            shown.append(part)
        elif i == len(loc) - 1 and isinstance(node, dict):
            shown.append(part)  # the missing field itself (past a scalar: a union member's tag, not a field)
    line, col = (1, 1)
    for cut in range(len(doc_path), -1, -1):
        if doc_path[:cut] in positions:
            line, col = positions[doc_path[:cut]]
            break
    message = error["msg"]
    given = error.get("input")
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = "expected a table (mapping) of fields"  # not pydantic's "instance of <the kind's model>"
    if error["type"] not in ("missing",) and isinstance(given, (str, int, float, bool)) and not message.startswith("Value error"):
        message += f" (got {quote(given)})"
    elif error["type"].endswith("_type") and given is not None and not isinstance(given, (str, int, float, bool)):
        message += f" (got {_kind(given)})"
    message = message.removeprefix("Value error, ")
    return SpecIssue(file, line, col, format_path(shown), message)


def _kind(value: object) -> str:
    return {dict: "a table", list: "a list"}.get(type(value), type(value).__name__)


# What a file must hold, for files that hold something else at the top.
_FILE_SHAPE = "a spec file holds a table (mapping) with a `kernels` list of kernel specs"


def load_text(text: str, file: str, suffix: str) -> list[LoadedSpec]:
    data = _parse(text, file, suffix)
    positions = LazyPositions(text, suffix)
    if isinstance(data, dict) and "kernels" not in data and "kind" in data:
        raise SpecError([SpecIssue(file, 1, 1, "", "a spec file holds a `kernels` list; wrap this kernel in it")])
    if data is None or data == {}:
        raise SpecError([SpecIssue(file, 1, 1, "", f"the file is empty: {_FILE_SHAPE}")])
    if not isinstance(data, dict):
        raise SpecError([SpecIssue(file, 1, 1, "", f"the file holds {_kind(data)}: {_FILE_SHAPE}")])
    keys = [kernel_key(k) for k in data["kernels"]] if type(data.get("kernels")) is list else []
    try:
        kernels = _validated_kernels(data, keys)
    except ValidationError as e:
        issues: list[SpecIssue] = []
        for err in e.errors():
            issue = _issue_from_pydantic(err, data, file, positions.get())
            prev = issues[-1] if issues else None
            if prev and (prev.line, prev.column, prev.path) == (issue.line, issue.column, issue.path):
                issue = SpecIssue(file, issue.line, issue.column, issue.path, f"{prev.message}; or {issue.message}")
                issues.pop()  # one value failing each member of a union: one issue
            issues.append(issue)
        raise SpecError(issues) from None
    positions.kernels = len(kernels)
    positions.names = [raw.get("name") if type(raw) is dict else None for raw in data["kernels"]]
    return [LoadedSpec(spec, file, i, positions, raw, key)
            for i, (spec, raw, key) in enumerate(zip(kernels, data["kernels"], keys, strict=True))]


def kernel_key(raw: object) -> str | None:
    """A kernel as written less its name and description (whether it gives one kept), or None where it is no
    table: what its validated configs depend on. repr keeps the types (1, 1.0, "1" and true differ)."""
    if type(raw) is not dict:
        return None
    return repr(("description" in raw, [(k, v) for k, v in raw.items() if k not in ("name", "description")]))


# Kernels validated in this process, by `kernel_key`: a kernel written again (a copy of a file, a template's
# output) is validated whole once; a copy validates its own name and description and shares the rest (frozen
# models). At most _VALIDATED_HELD kernels, then it starts over.
_VALIDATED: dict[str, LayeredSpec] = {}
_VALIDATED_HELD = 256
_FIELD_ADAPTERS: dict[tuple[type, str], TypeAdapter] = {}


def _validated_kernels(data: dict, keys: list[str | None]) -> list[LayeredSpec]:
    """`SpecFile.model_validate(data).kernels`, each kernel met before (in this file or an earlier one) taken
    from `_VALIDATED` under its own name and description. Where any part fails, the whole file is validated
    again as one, so its errors read as they always have."""
    raws = data["kernels"] if len(data) == 1 and keys else None
    if raws is None or not all(keys):
        return SpecFile.model_validate(data).kernels
    known: dict[str, LayeredSpec] = {}
    first: dict[str, int] = {}  # each kernel not met before: the index of its first copy here
    for i, key in enumerate(keys):
        seen = _VALIDATED.get(key)  # type: ignore[arg-type]
        if seen is not None:
            known[key] = seen  # type: ignore[index]
        elif key not in first:
            first[key] = i  # type: ignore[index]
    if first:
        try:
            fresh = SpecFile.model_validate({"kernels": [raws[i] for i in first.values()]}).kernels
        except ValidationError:
            return SpecFile.model_validate(data).kernels  # raises with the whole file's positions
        known.update(zip(first, fresh, strict=True))
        if len(_VALIDATED) + len(first) > _VALIDATED_HELD:
            _VALIDATED.clear()
        _VALIDATED.update(zip(first, fresh, strict=True))
    out: list[LayeredSpec] = []
    for i, (raw, key) in enumerate(zip(raws, keys, strict=True)):
        spec = known[key] if first.get(key) == i else _renamed(known[key], raw)  # type: ignore[index]
        if spec is None:
            return SpecFile.model_validate(data).kernels
        out.append(spec)
    return out


def _renamed(seen: LayeredSpec, raw: dict) -> LayeredSpec | None:
    """`seen` with `raw`'s name and description, each validated as its field; None where one fails or is
    missing (the kernel is then validated whole, which says why)."""
    update: dict[str, object] = {}
    try:
        for name in ("name", "description"):
            if name in raw:
                update[name] = _field_adapter(type(seen), name).validate_python(raw[name])
    except ValidationError:
        return None
    return copy_model(seen, update) if "name" in update else None


def _field_adapter(model: type, name: str) -> TypeAdapter:
    adapter = _FIELD_ADAPTERS.get((model, name))
    if adapter is None:
        info = model.model_fields[name]  # type: ignore[attr-defined]
        adapter = _FIELD_ADAPTERS[(model, name)] = TypeAdapter(Annotated[info.annotation, info])
    return adapter


def decode(data: bytes, file: str) -> str:
    """UTF-8 text (a leading BOM dropped), or an issue at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        line_start = data.rfind(b"\n", 0, e.start) + 1
        column = len(data[line_start : e.start].decode("utf-8", errors="replace")) + 1
        raise SpecError([SpecIssue(file, line, column, "", f"not UTF-8: byte 0x{data[e.start]:02x} cannot start or "
                                   "continue a UTF-8 character (spec files are UTF-8 text)")]) from None


def path_problem(path: Path) -> str | None:
    """Why `path` names no readable file or folder (missing, a symlink loop, a dangling link), or None."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"symlink loop: {path} resolves through a cycle of links"
        if path.is_symlink():
            return f"dangling symlink: {path} points to {os.readlink(path)}, which does not exist"
        if e.errno == errno.ENOENT:
            return f"no such file or folder: {path}"
        return f"{path}: {e.strerror}"
    except ValueError as e:  # a NUL in the path
        return f"{path!r}: {e}"
    return None


def load_file(path: Path) -> list[LoadedSpec]:
    file = str(path)
    if path.suffix not in SPEC_SUFFIXES:
        raise SpecError([SpecIssue(file, 1, 1, "", f"unknown spec file type; expected one of {', '.join(SPEC_SUFFIXES)}")])
    problem = path_problem(path)
    if problem:
        raise SpecError([SpecIssue(file, 1, 1, "", f"cannot read: {problem}")])
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would block or never end
            raise SpecError([SpecIssue(file, 1, 1, "", "not a regular file")])
        if info.st_size > MAX_FILE_BYTES:
            raise SpecError([SpecIssue(file, 1, 1, "", f"the file has {info.st_size} bytes > {MAX_FILE_BYTES}, the "
                                       "largest spec file specgen reads; split it")])
        data = path.read_bytes()
    except OSError as e:
        raise SpecError([SpecIssue(file, 1, 1, "", f"cannot read: {e.strerror}")]) from None
    return load_text(decode(data, file), file, path.suffix)


def spec_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders into their spec files, sorted, so every run sees the same order. A folder's links
    that lead nowhere (loops, dangling) are kept so that loading reports them."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES
                                and (f.is_file() or (f.is_symlink() and not f.exists()))))
        else:
            files.append(p)
    return files


def load_paths(paths: Iterable[Path]) -> list[LoadedSpec]:
    """Load every spec under `paths`; collect all files' issues before raising, and reject duplicate names.
    A path that holds no spec file (an empty folder, a folder named x.toml) is an error: an empty input
    must never read as "nothing to do" (render would then drop every module it owns)."""
    loaded: list[LoadedSpec] = []
    issues: list[SpecIssue] = []
    for p in paths:
        problem = path_problem(p)
        if problem:
            issues.append(SpecIssue(str(p), 1, 1, "", problem))
        elif p.is_dir() and not spec_files([p]):
            issues.append(SpecIssue(str(p), 1, 1, "", f"the folder holds no spec files ({', '.join(SPEC_SUFFIXES)})"))
    for f in spec_files(p for p in paths if path_problem(p) is None):
        try:
            loaded.extend(load_file(f))
        except SpecError as e:
            issues.extend(e.issues)
    first: dict[str, LoadedSpec] = {}
    for ls in loaded:
        # Module files are named after kernels: names that differ only in case collide on macOS and Windows.
        key = ls.name.lower()
        if key in first:
            prev = first[key]
            line, col = ls.where(("name",))
            same = "is already used" if prev.name == ls.name else f"differs only in case from '{prev.name}'"
            issues.append(
                SpecIssue(ls.file, line, col, f"kernels[{ls.index}].name",
                          f"kernel name '{ls.name}' {same} at {prev.file}:{prev.where(('name',))[0]}"
                          + ("" if prev.name == ls.name else " (module files would collide on case-insensitive file systems)"))
            )
        first.setdefault(key, ls)
    if not loaded and not issues:
        issues.append(SpecIssue(", ".join(str(p) for p in paths) or ".", 1, 1, "", "no spec files given"))
    if issues:
        raise SpecError(issues)
    return loaded
