"""Writing the winners into the spec file, keeping its comments and layout: tomlkit for TOML, ruamel.yaml
(round trip) for YAML, plain JSON for JSON. The edits are space.edits', applied to the kernel's own table;
a summary comment says what was measured (TOML and YAML)."""

from __future__ import annotations

import json
import re
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
    padded = re.search(r"=\s*\{ ", text) is not None  # the file writes `{ m = 128 }`: so do the edits
    apply_edits(kernel, edits, table=lambda path: tomlkit.table() if len(path) <= 2 else tomlkit.inline_table(),
                value=lambda v: _toml_value(v, padded))
    if padded:
        for target in dict.fromkeys(p[1] for p, _ in edits):
            _pad(kernel["per_target"][target])
    for target, intro in intros.items():
        _put_back(kernel["per_target"][target].value.body, intro)
    last = _last_table(kernel)
    if tail and last.value.body and last.value.body[-1][0] is not None:
        # a key written last carries no line end of its own (tomlkit): end its line before the comments
        # go back, or the first of them lands on the key's line
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
    try:
        from ruamel.yaml import YAML
        from ruamel.yaml.comments import CommentedMap
    except ImportError as e:
        raise WriteError("writing a YAML spec needs ruamel.yaml: pip install 'specgen[tune]'") from e
    import io

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    if "\n  - " in text:  # the common "key:\n  - item" layout (ruamel's default is "key:\n- item")
        yaml.indent(mapping=2, sequence=4, offset=2)
    data = yaml.load(text)
    kernel = data["kernels"][index]

    def flow(v: Any) -> Any:  # sections and tiles in flow style ({m: 128, n: 128, k: 64}), as specs write them
        if isinstance(v, dict):
            m = CommentedMap((k, flow(x)) for k, x in v.items())
            m.fa.set_flow_style()
            return m
        return [flow(x) for x in v] if isinstance(v, list) else v

    apply_edits(kernel, edits, table=lambda path: CommentedMap() if len(path) <= 2 else flow({}), value=flow)
    if summary and "per_target" in kernel:
        kernel.yaml_set_comment_before_after_key("per_target", before="\n".join(summary),
                                                 indent=kernel.lc.col if kernel.lc else 0)
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def _json(text: str, index: int, edits: list[Edit], summary: list[str]) -> str:
    data = json.loads(text)
    apply_edits(data["kernels"][index], edits)
    return json.dumps(data, indent=2) + "\n"


WRITERS = {".toml": _toml, ".yaml": _yaml, ".yml": _yaml, ".json": _json}


def write_back(path: Path, index: int, edits: list[Edit], summary: list[str]) -> str:
    """Apply `edits` to kernel `index` of the spec file at `path`; returns the new text (written)."""
    writer = WRITERS.get(path.suffix)
    if writer is None:
        raise WriteError(f"{path}: cannot write a {path.suffix} spec (TOML, YAML or JSON)")
    text = writer(path.read_text(), index, edits, summary)
    path.write_text(text)
    return text
