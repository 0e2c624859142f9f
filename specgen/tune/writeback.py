"""Writing the winners into the spec file, keeping its comments and layout: tomlkit for TOML, ruamel.yaml
(round trip) for YAML, the file's own indentation and escaping for JSON. The edits are space.edits', applied
to the kernel's own table; a summary comment says what was measured (TOML and YAML block tables).

What `tune --write` writes and keeps (README, "What tune --write writes"):
- Only the spec file named, and in it only the tuned kernel's `per_target` tables (and the summary
  comments): every other byte, the other kernels', comments, blank lines, key order, a UTF-8 byte-order
  mark and CRLF line ends, stays as it was.
- Before any timing (`preflight`): a file this writer cannot write back byte-for-byte unchanged (a YAML or
  JSON layout the round trip would re-flow, mixed line ends, a hard-linked file), a read-only file or
  folder, or a file that is not a regular file is refused, with why.
- The new text is checked (it loads, passes check and is the tuned spec) before the file is touched, then
  replaces the file atomically (a temporary file beside it, fsynced, renamed over it, with the file's mode):
  a full disk or a kill leaves the old file whole. A link is followed: the file it names is replaced.
- A file changed since the tune loaded it is not overwritten.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.tune.space import Edit, apply_edits


class WriteError(RuntimeError):
    pass


def _toml_value(v: Any, padded: bool = False) -> Any:
    """A TOML item for `v`; inline tables as `{ m = 1 }` where the file pads its braces (else `{m = 1}`)."""
    import tomlkit

    if isinstance(v, dict):
        t = tomlkit.inline_table()
        t.update({k: _toml_value(x, padded) for k, x in v.items()})
        if padded and len(t):
            return tomlkit.parse(f"x = {{ {t.as_string()[1:-1]} }}")["x"]
        return t
    if isinstance(v, list):
        a = tomlkit.array()
        a.extend(_toml_value(x, padded) for x in v)
        if any(isinstance(x, dict) for x in v):
            a.multiline(True)
        return a
    return v


def _toml(text: str, index: int, edits: list[Edit], summary: list[str]) -> str:
    try:
        import tomlkit
    except ImportError as e:
        raise WriteError("writing a TOML spec needs tomlkit: pip install 'specgen[tune]'") from e
    from tomlkit.items import Comment, Whitespace

    doc = tomlkit.parse(text)
    kernel = doc["kernels"][index]
    padded = re.search(r"=\s*\{ ", text) is not None  # the file writes `{ m = 128 }`: so do the edits
    if isinstance(kernel, tomlkit.items.InlineTable):  # `kernels = [{ ... }]`: the kernel stays one inline table
        apply_edits(kernel, edits, table=lambda path: tomlkit.inline_table(), value=lambda v: _toml_value(v, padded))
        return tomlkit.dumps(doc)  # (no room for the summary comment inside it: the CLI prints it)
    # Comments and blank lines closing the kernel's table introduce what follows it (the next kernel):
    # new tables go above them, and they are put back after.
    body = _last_table(kernel).value.body
    tail = []
    while body and body[-1][0] is None and isinstance(body[-1][1], (Comment, Whitespace)):
        tail.insert(0, body.pop()[1])
    if "per_target" not in kernel:
        kernel["per_target"] = tomlkit.table(is_super_table=True)
    intros: dict[str, list] = {}  # target -> the comments after its table's blank line (the next table's prose)
    for target in dict.fromkeys(p[1] for p, _ in edits):
        if target not in kernel["per_target"]:
            kernel["per_target"][target] = tomlkit.table()
        layer = kernel["per_target"][target]
        if isinstance(layer, tomlkit.items.Table):
            intros[target] = _next_intro(layer.value.body, Comment, Whitespace)
            for line in summary:
                if line.startswith(f"{target} "):
                    layer.add(tomlkit.comment(line))
    # sections inside a target's table are inline ({ num_warps = 4 }), as the catalogue writes them
    apply_edits(kernel, edits, table=lambda path: tomlkit.table() if len(path) <= 2 else tomlkit.inline_table(),
                value=lambda v: _toml_value(v, padded))
    if padded:
        for target in dict.fromkeys(p[1] for p, _ in edits):
            _pad(kernel["per_target"][target])
    for target, intro in intros.items():
        _put_back(kernel["per_target"][target].value.body, intro)
    last = _last_table(kernel)
    if last.value.body and last.value.body[-1][0] is not None:
        # a key written last carries no line end of its own (tomlkit): end its line before the comments go
        # back, or the first of them lands on the key's line; with none, before the next kernel's header
        # (which tomlkit keeps outside this kernel: `tile = {...}[[kernels]]` did not load)
        item = last.value.body[-1][1]
        if not item.trivia.trail.endswith("\n"):
            item.trivia.trail += "\n"
    for item in tail:
        last.value.body.append((None, item))
    return tomlkit.dumps(doc)


def _next_intro(body: list, comment: type, whitespace: type) -> list:
    """Pop the comments that close a table after its last blank line: they introduce the next table (its
    prose), so a summary written into this table goes above them, not under them."""
    run = 0
    while run < len(body) and body[-1 - run][0] is None and isinstance(body[-1 - run][1], (comment, whitespace)):
        run += 1
    blanks = [i for i in range(len(body) - run, len(body)) if isinstance(body[i][1], whitespace)]
    if not blanks:
        return []
    intro = [item for _, item in body[blanks[-1]:]]
    del body[blanks[-1]:]
    return intro


def _put_back(body: list, intro: list) -> None:
    """Append what `_next_intro` popped, the last item's line ended first (a key written last has none)."""
    if not intro:
        return
    if body and body[-1][0] is not None and not body[-1][1].trivia.trail.endswith("\n"):
        body[-1][1].trivia.trail += "\n"
    body.extend((None, item) for item in intro)


def _padded(t: Any) -> Any:
    """An inline table in the `{ m = 1 }` style, its own inline tables too (tomlkit writes `{m = 1}`)."""
    import tomlkit

    text = t.as_string().strip()
    if len(t) and not (text.startswith("{ ") and text.endswith(" }")):
        text = f"{{ {text[1:-1].strip()} }}"
    out = tomlkit.parse(f"x = {text}")["x"]
    for k, v in list(out.items()):
        if isinstance(v, tomlkit.items.InlineTable):
            out[k] = _padded(v)
    return out


def _pad(container: Any) -> None:
    """Every inline table under `container` (a table, or an array of them) in the padded style."""
    import tomlkit

    items = list(container.items()) if hasattr(container, "items") else list(enumerate(container))
    for k, v in items:
        if isinstance(v, tomlkit.items.InlineTable):
            container[k] = _padded(v)
        elif isinstance(v, (tomlkit.items.Table, tomlkit.items.Array)):
            _pad(v)


def _last_table(table: Any) -> Any:
    """The innermost last sub-table of a TOML table: where the file's text continues after it."""
    import tomlkit

    while True:
        tables = [v for v in table.values() if isinstance(v, tomlkit.items.Table)]
        if not tables:
            return table
        table = tables[-1]


def _yaml(text: str, index: int, edits: list[Edit], summary: list[str]) -> str:
    yaml = _yaml_loader(text)
    from ruamel.yaml.comments import CommentedMap

    data = yaml.load(text)
    kernel = data["kernels"][index]

    def flow(v: Any) -> Any:  # sections and tiles in flow style ({m: 128, n: 128, k: 64}), as specs write them
        if isinstance(v, dict):
            m = CommentedMap((k, flow(x)) for k, x in v.items())
            m.fa.set_flow_style()
            return m
        return [flow(x) for x in v] if isinstance(v, list) else v

    apply_edits(kernel, edits, table=lambda path: CommentedMap() if len(path) <= 2 else flow({}), value=flow)
    if summary and "per_target" in kernel and not kernel.fa.flow_style():  # no comments inside a { } mapping
        kernel.yaml_set_comment_before_after_key("per_target", before="\n".join(summary),
                                                 indent=kernel.lc.col if kernel.lc else 0)
    return _yaml_dump(yaml, data)


def _yaml_loader(text: str) -> Any:
    """A round-trip YAML of the file's own indentation (sequences indented under their key or not) that never
    re-wraps a line (a one-line flow spec stays on one line)."""
    try:
        from ruamel.yaml import YAML
    except ImportError as e:
        raise WriteError("writing a YAML spec needs ruamel.yaml: pip install 'specgen[tune]'") from e
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 1 << 20
    if "\n  - " in text:  # the common "key:\n  - item" layout (ruamel's default is "key:\n- item")
        yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _yaml_dump(yaml: Any, data: Any) -> str:
    import io

    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


class _JsonSpans:
    """Where a JSON document's values lie: `member(start, key)` finds a key's value span in the object at
    `start`, `item(start, i)` an array's i-th; each (start, end) with end past the value (json's own scanner)."""

    def __init__(self, text: str) -> None:
        self.text, self.decoder = text, json.JSONDecoder()

    def _ws(self, i: int) -> int:
        while self.text[i] in " \t\r\n":
            i += 1
        return i

    def _value(self, i: int) -> tuple[int, int]:
        i = self._ws(i)
        return i, self.decoder.raw_decode(self.text, i)[1]

    def entries(self, start: int) -> list[tuple[object, int, int]]:
        """(key or index, value start, value end) of the object or array at `start`."""
        out: list[tuple[object, int, int]] = []
        obj, i = self.text[start] == "{", self._ws(start + 1)
        while self.text[i] not in "}]":
            key: object = len(out)
            if obj:
                key, i = json.decoder.scanstring(self.text, i + 1)
                i = self._ws(self._ws(i) + 1)  # past the colon
            begin, end = self._value(i)
            out.append((key, begin, end))
            i = self._ws(end)
            i = self._ws(i + 1) if self.text[i] == "," else i
        return out


def _margin(text: str, i: int) -> str:
    """The leading whitespace of the line holding index i."""
    line = text[text.rfind("\n", 0, i) + 1:]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _json(text: str, index: int, edits: list[Edit], summary: list[str]) -> str:
    """Splice the kernel's new `per_target` value into the text: every other byte stays, and the new value
    follows the file's indentation (one line where the kernel is written on one line) and its escaping."""
    data = json.loads(text)
    kernel = data["kernels"][index]
    apply_edits(kernel, edits)
    spans = _JsonSpans(text)
    top = spans._ws(0)
    _, k_start, _ = next(e for e in spans.entries(top) if e[0] == "kernels")
    _, obj, obj_end = spans.entries(k_start)[index]
    members = spans.entries(obj)
    one_line = "\n" not in text[obj:obj_end]
    unit = None if one_line else re.search(r"\n([ \t]+)\S", text)  # the file's indentation step
    escaped = re.search(r"\\u[0-9a-fA-F]{4}", text) is not None and text.isascii()  # it writes non-ASCII as \uXXXX
    style: dict[str, Any] = {"ensure_ascii": escaped, **({"indent": unit.group(1)} if unit else {"separators": (", ", ": ")})}
    found = [(b, e) for key, b, e in members if key == "per_target"]
    if found:
        (begin, end), = found
        value = json.dumps(kernel["per_target"], **style).replace("\n", "\n" + _margin(text, begin))
        return text[:begin] + value + text[end:]
    last_end = members[-1][2] if members else obj + 1
    if unit is None:
        insert = f'{", " if members else ""}"per_target": {json.dumps(kernel["per_target"], **style)}'
    else:
        margin = _margin(text, members[-1][1]) if members else _margin(text, obj) + unit.group(1)
        value = json.dumps(kernel["per_target"], **style).replace("\n", "\n" + margin)
        insert = f'{"," if members else ""}\n{margin}"per_target": {value}'
    return text[:last_end] + insert + text[last_end:]


WRITERS = {".toml": _toml, ".yaml": _yaml, ".yml": _yaml, ".json": _json}


@dataclass(frozen=True)
class SpecText:
    """A spec file's text as the writers see it (LF line ends, no BOM) and how to put its bytes back."""

    path: Path  # the file itself (a link resolved)
    text: str
    bom: bool
    newline: str
    original: bytes

    def encode(self, text: str) -> bytes:
        return codecs.BOM_UTF8 * self.bom + text.replace("\n", self.newline).encode()


def read_spec(path: Path) -> SpecText:
    """Read the spec file `path` for writing back; WriteError says why it cannot be (before any tune work)."""
    if path.suffix not in WRITERS:
        raise WriteError(f"{path}: cannot write a {path.suffix} spec (TOML, YAML or JSON)")
    target = path.resolve()
    try:
        info = target.stat()
        if not stat.S_ISREG(info.st_mode):
            raise WriteError(f"{path} is not a regular file: --write replaces a spec file")
        if info.st_nlink > 1:
            raise WriteError(f"{path} has {info.st_nlink} hard links: replacing it atomically would leave the others "
                             "with the old text; write to a copy without --write's help or break the link first")
        data = target.read_bytes()
    except OSError as e:
        raise WriteError(f"cannot read {path}: {e.strerror}") from None
    if not os.access(target, os.W_OK) or not info.st_mode & 0o222:  # (root may write a 0444 file: we do not)
        raise WriteError(f"{path} is read-only: --write would replace it (make it writable, or tune without --write)")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise WriteError(f"{target.parent} is read-only: --write writes the new {path.name} beside the old one and "
                         "renames it over it")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise WriteError(f"{path} is not UTF-8 text") from None
    crlf = text.count("\r\n")
    if crlf and crlf != text.count("\n"):
        raise WriteError(f"{path} mixes CRLF and LF line ends ({crlf} of {text.count(chr(10))} lines end in CRLF): "
                         "--write would have to change some; make them one kind first")
    spec = SpecText(target, text.replace("\r\n", "\n"), data.startswith(codecs.BOM_UTF8), "\r\n" if crlf else "\n", data)
    why = _layout_problem(spec.text, path.suffix)
    if why:
        raise WriteError(f"{path}: --write cannot keep this file's layout ({why}); tune without --write and copy "
                         "the summary's values into it by hand")
    return spec


def _layout_problem(text: str, suffix: str) -> str:
    """Why the writer for `suffix` would change bytes of `text` beyond its edits ("" when it keeps them)."""
    try:
        if suffix == ".json":
            json.loads(text)
            return ""
        if suffix == ".toml":
            try:
                import tomlkit
            except ImportError as e:
                raise WriteError("writing a TOML spec needs tomlkit: pip install 'specgen[tune]'") from e
            return "" if tomlkit.dumps(tomlkit.parse(text)) == text else "tomlkit does not round-trip it"
        yaml = _yaml_loader(text)
        return "" if _yaml_dump(yaml, yaml.load(text)) == text else \
            "ruamel.yaml re-flows it: indentation, line wrapping or quoting differ after a round trip"
    except WriteError:
        raise
    except Exception as e:  # a parser's own complaint: the loader accepted the file, the round-trip parser did not
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def new_text(spec: SpecText, index: int, edits: list[Edit], summary: list[str]) -> str:
    """The file's text with `edits` applied to kernel `index` (LF line ends, no BOM: `spec.encode` restores them)."""
    return WRITERS[spec.path.suffix](spec.text, index, edits, summary)


# The one line a tune writes per winning slot (run.summarize): "<target> <slot label>: specgen tune <date> on
# <gpu>, shapes <shapes>: <knob = value, ...>: <ratio>x the incumbent ..."
TUNER_COMMENT = re.compile(r"^\s*#\s*(?P<target>[a-z]+:[a-z0-9_]+) (?P<label>default|variant \d+ \([^)]*\)): specgen tune "
                           r"(?P<date>\d{4}-\d{2}-\d{2}) on .+?, shapes [0-9x, ]+: (?P<config>.+?): [0-9.]+x the incumbent")


def _knobs(config: str) -> dict[str, str] | None:
    pairs = [p.split(" = ", 1) for p in config.split(", ")]
    return {k: v for k, v in pairs} if all(len(p) == 2 and "." in p[0] for p in pairs) else None


def tidy_tuner_comments(text: str, suffix: str, index: int) -> str:
    """Kernel `index`'s tuner comments (TUNER_COMMENT lines, nothing else) kept only where they still
    describe its spec: one per (target, slot) that exists, whose label (the variant's bounds) is the slot's
    today and whose knob values are the slot's effective config; of several, the latest (by date, then
    place). Every other line, hand-written comments included, is kept byte for byte."""
    from specgen.bench.shapes import slot_label
    from specgen.spec.load import load_text

    loaded = load_text(text, "<tidy>", suffix)
    lines = text.splitlines(keepends=True)
    start = loaded[index].line - 1
    end = loaded[index + 1].line - 1 if index + 1 < len(loaded) else len(lines)
    spec = loaded[index].spec
    labels = {(str(t), slot_label(spec, t, i)): (t, i) for t in spec.targets
              for i in [None, *range(len(spec.variants_on(t)))]}
    best: dict[tuple[str, str], tuple[str, int]] = {}
    drop = set()
    for n in range(start, end):
        m = TUNER_COMMENT.match(lines[n])
        if not m:
            continue
        slot, knobs = labels.get((m["target"], m["label"])), _knobs(m["config"])
        if slot is None or knobs is None:
            drop.add(n)  # a slot that no longer exists (a target dropped, a variant's bounds changed)
            continue
        eff = spec.for_target(*slot)
        if any(str(getattr(getattr(eff, k.split(".")[0], None), k.split(".")[1], None)) != v for k, v in knobs.items()):
            drop.add(n)  # the config it describes is no longer the slot's
            continue
        key = (m["target"], m["label"])
        if key in best:
            older = min(best[key], (m["date"], n))
            drop.add(older[1])
            best[key] = max(best[key], (m["date"], n))
        else:
            best[key] = (m["date"], n)
    return "".join(line for n, line in enumerate(lines) if n not in drop)


def replace_file(spec: SpecText, data: bytes) -> None:
    """Replace the spec file with `data` atomically, keeping its mode (and owner, where allowed). Refuses a
    file that changed since `read_spec` read it (someone edited it during the tune)."""
    path = spec.path
    try:
        if path.read_bytes() != spec.original:
            raise WriteError(f"{path} changed since the tune read it: nothing written (tune again, or copy the "
                             "summary's values into it by hand)")
        info = path.stat()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.specgen-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(info.st_mode))
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # not ours to give away: the new file keeps our owner, as an editor's
            os.chown(tmp, info.st_uid, info.st_gid)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise WriteError(f"cannot write {path}: {e.strerror or e}; the file is as it was") from None
        raise


def write_back(path: Path, index: int, edits: list[Edit], summary: list[str]) -> str:
    """Apply `edits` to kernel `index` of the spec file at `path` and replace it; returns the new text."""
    spec = read_spec(path)
    text = new_text(spec, index, edits, summary)
    replace_file(spec, spec.encode(text))
    return text
