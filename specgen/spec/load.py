"""Load spec files (TOML, YAML, JSON) into validated `GemmSpec`s that remember where they came from.

Every failure is a `SpecError` listing `SpecIssue`s, each naming file, line, column, the field path and
what was expected, so an editor can jump to it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from pydantic import ValidationError

from specgen.spec.models import GemmSpec, SpecFile
from specgen.spec.positions import Positions, json_positions, toml_positions, yaml_positions

SPEC_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


@dataclass(frozen=True)
class SpecIssue:
    file: str
    line: int
    column: int
    path: str  # dotted field path, e.g. kernels[0].tile.m
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(Exception):
    def __init__(self, issues: Sequence[SpecIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class LazyPositions:
    """Positions are computed on first use: only files with diagnostics pay for the second pass."""

    def __init__(self, text: str, suffix: str) -> None:
        self._text, self._suffix, self._positions = text, suffix, None

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

    spec: GemmSpec
    file: str
    index: int  # position in the file's `kernels` list
    positions: LazyPositions = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def line(self) -> int:
        return self.where(())[0]

    def where(self, field_path: tuple[str | int, ...]) -> tuple[int, int]:
        """Line and column of a field of this kernel, or of its nearest written ancestor."""
        path = ("kernels", self.index, *field_path)
        positions = self.positions.get()
        while path:
            if path in positions:
                return positions[path]
            path = path[:-1]
        return (1, 1)

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.spec)


def spec_hash(spec: GemmSpec) -> str:
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
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError([SpecIssue(file, line, col, "", f"YAML syntax: {e.problem}")]) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (control characters)
        line, col = _offset_position(text, e.position)
        raise SpecError([SpecIssue(file, line, col, "", f"YAML syntax: {e.reason} (#x{e.character:04x})")]) from None


def _parse(text: str, file: str, suffix: str) -> object:
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
        return _parse_yaml(text, file)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        if not m and "(at end of document)" in str(e):
            line, col = _offset_position(text, len(text))
        raise SpecError([SpecIssue(file, line, col, "", f"TOML syntax: {re.sub(r' [(]at .*', '', str(e))}")]) from None
    except json.JSONDecodeError as e:
        raise SpecError([SpecIssue(file, e.lineno, e.colno, "", f"JSON syntax: {e.msg}")]) from None
    except (ValueError, RecursionError) as e:  # an integer past Python's digit limit; nesting past the stack
        kind = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
        raise SpecError([SpecIssue(file, 1, 1, "", f"cannot parse: {kind}")]) from None


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
        elif i == len(loc) - 1:
            shown.append(part)  # the missing field itself
    line, col = (1, 1)
    for cut in range(len(doc_path), -1, -1):
        if doc_path[:cut] in positions:
            line, col = positions[doc_path[:cut]]
            break
    message = error["msg"]
    given = error.get("input")
    if error["type"] not in ("missing",) and isinstance(given, (str, int, float, bool)) and not message.startswith("Value error"):
        message += f" (got {given!r})"
    message = message.removeprefix("Value error, ")
    return SpecIssue(file, line, col, format_path(shown), message)


def load_text(text: str, file: str, suffix: str) -> list[LoadedSpec]:
    data = _parse(text, file, suffix)
    positions = LazyPositions(text, suffix)
    if isinstance(data, dict) and "kernels" not in data and "kind" in data:
        raise SpecError([SpecIssue(file, 1, 1, "", "a spec file holds a `kernels` list; wrap this kernel in it")])
    try:
        parsed = SpecFile.model_validate(data)
    except ValidationError as e:
        issues = [_issue_from_pydantic(err, data, file, positions.get()) for err in e.errors()]
        raise SpecError(issues) from None
    return [LoadedSpec(spec, file, i, positions) for i, spec in enumerate(parsed.kernels)]


def load_file(path: Path) -> list[LoadedSpec]:
    if path.suffix not in SPEC_SUFFIXES:
        raise SpecError([SpecIssue(str(path), 1, 1, "", f"unknown spec file type; expected one of {', '.join(SPEC_SUFFIXES)}")])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError([SpecIssue(str(path), 1, 1, "", f"cannot read: {e.strerror}")]) from None
    return load_text(text, str(path), path.suffix)


def spec_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders into their spec files, sorted, so every run sees the same order."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES and f.is_file()))
        else:
            files.append(p)
    return files


def load_paths(paths: Iterable[Path]) -> list[LoadedSpec]:
    """Load every spec under `paths`; collect all files' issues before raising, and reject duplicate names."""
    loaded: list[LoadedSpec] = []
    issues: list[SpecIssue] = []
    for f in spec_files(paths):
        try:
            loaded.extend(load_file(f))
        except SpecError as e:
            issues.extend(e.issues)
    first: dict[str, LoadedSpec] = {}
    for ls in loaded:
        if ls.name in first:
            prev = first[ls.name]
            line, col = ls.where(("name",))
            issues.append(
                SpecIssue(ls.file, line, col, f"kernels[{ls.index}].name",
                          f"kernel name '{ls.name}' is already used at {prev.file}:{prev.where(('name',))[0]}")
            )
        first.setdefault(ls.name, ls)
    if issues:
        raise SpecError(issues)
    return loaded
