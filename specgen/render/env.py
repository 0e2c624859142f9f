"""The Jinja2 environment every backend renders with: strict undefined, stable whitespace, filters
that turn plan data into Python literals (never code built elsewhere)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import jinja2

from specgen.spec.epilogue import GATED_NAMES
from specgen.spec.formulas import DERIVATIVES, FORMULAS


def templates_dir() -> Path:
    """Installed wheels carry the templates inside the package; a source checkout has them at the top."""
    packaged = Path(__file__).resolve().parent.parent / "_templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "templates"


def pylit(value: object, indent: int = 0, width: int = 110) -> str:
    """A deterministic Python literal of plain data (order kept), compact: a dict or list that fits in
    the line stays on it; a longer one puts one entry a line, each entry compact in turn."""
    flat = _flat(value)
    if len(flat) + 4 * indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = "    " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{k!r}: {pylit(v, indent + 1, width - len(repr(k)) - 2)}," for k, v in value.items()]
        return "{\n" + "\n".join(items) + "\n" + "    " * indent + "}"
    if all(not isinstance(v, (dict, list)) for v in value):  # scalars: as many a line as fit
        lines, line = [], ""
        for item in (_flat(v) + "," for v in value):
            if line and len(pad) + len(line) + 1 + len(item) > width:
                lines.append(line)
                line = ""
            line = f"{line} {item}" if line else item
        return "[\n" + "\n".join(pad + x for x in [*lines, line]) + "\n" + "    " * indent + "]"
    return "[\n" + "\n".join(f"{pad}{pylit(v, indent + 1, width)}," for v in value) + "\n" + "    " * indent + "]"


def _flat(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flat(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_flat(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, float):
        return float_literal(value)
    return repr(value)


def float_literal(value: float) -> str:
    v = float(value)
    if math.isfinite(v):
        return repr(v)
    if math.isnan(v):
        return 'float("nan")'
    return 'float("inf")' if v > 0 else 'float("-inf")'


def describe_op(op: dict) -> str:
    kind = op["op"]
    if kind == "bias":
        return f"bias: + {op['name']} ({op['along'].upper()},) {op['dtype']}, per {'column' if op['along'] == 'n' else 'row'}"
    if kind == "scale":
        by = op["by"]
        if by == "scalar":
            return f"scale: * {op['value']!r}" if op["value"] is not None else f"scale: * {op['name'] or 'alpha'} (float)"
        if by == "rowcol":
            return "scale: * scale_a[m] * scale_b[n]"
        name = op["name"] or ("row_scale" if by == "row" else "col_scale")
        return f"scale: * {name}[{'m' if by == 'row' else 'n'}]"
    if kind == "gated":
        where = "gate columns [0, N), up [N, 2N)" if op["layout"] == "halves" else "gate column 2j, up 2j + 1"
        return f"gated: {op['fn']}(gate) * up ({GATED_NAMES[op['fn']]}; B has 2N columns, {where})"
    if kind == "activation":
        return f"activation: {op['fn']}"
    if kind == "residual":
        beta = "" if op["beta"] == 1.0 else f"{op['beta']!r} * "
        return f"residual: + {beta}{op['name']} ({op['dtype']})"
    if kind == "clamp":
        lo = "-inf" if op["min"] is None else repr(op["min"])
        hi = "inf" if op["max"] is None else repr(op["max"])
        return f"clamp: to [{lo}, {hi}]"
    return f"cast: round to {op['dtype']}"


def oneline(text: str) -> str:
    """Text safe inside a one-line comment: newlines and other control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def fail(message: str) -> None:
    """Stop a render from a template (a formula primitive a backend cannot spell)."""
    raise jinja2.TemplateRuntimeError(message)


@cache
def environment(kind: str) -> jinja2.Environment:
    """The environment a kind's designs render with: its templates are templates/<kind>/ (each kind's
    names its own host parts and backends' folders, so two kinds never read each other's)."""
    root = templates_dir() / kind
    if not root.is_dir():
        raise ValueError(f"kind {kind!r} has no templates folder ({root})")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(pylit=pylit, float_literal=float_literal, describe_op=describe_op,
                       oneline=oneline)
    # The epilogue formula table (data: expression trees the backends' `formula` macros spell).
    env.globals.update(formulas=FORMULAS, derivatives=DERIVATIVES, fail=fail)
    return env
