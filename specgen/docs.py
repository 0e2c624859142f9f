"""The spec reference in Markdown, generated from the JSON Schema (README.md embeds it between
markers; tests/test_docs.py keeps it current)."""

from __future__ import annotations

import json

from specgen.kinds.models import SPEC_MODELS
from specgen.spec.file import SpecFile

BEGIN, END = "<!-- spec-reference:begin -->", "<!-- spec-reference:end -->"


def _type(prop: dict) -> str:
    if "$ref" in prop:
        return f"[{prop['$ref'].rsplit('/', 1)[-1]}](#{prop['$ref'].rsplit('/', 1)[-1].lower()})"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])
    if "oneOf" in prop:
        return " or ".join(_type(p) for p in prop["oneOf"])
    if prop.get("type") == "object" and isinstance(prop.get("additionalProperties"), dict):
        keys = prop.get("propertyNames", {})
        key = "target name" if "enum" in keys else "name"
        return f"table of {key} to {_type(prop['additionalProperties'])}"
    if prop.get("type") == "array":
        return f"list of {_type(prop.get('items', {}))}"
    shown = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "maxLength": "length <=", "pattern": "matching"}
    bounds = "".join(f", {shown[k]} {f'`{v}`' if k == 'pattern' else f'{v:.8g}' if isinstance(v, float) else v}"
                     for k, v in sorted(prop.items(), key=lambda kv: list(shown).index(kv[0]) if kv[0] in shown else 0)
                     if k in shown)
    return f"{prop.get('type', 'any')}{bounds}"


def spec_reference() -> str:
    schema = SpecFile.model_json_schema()
    defs = schema.get("$defs", {})
    lines = ["A spec file holds `kernels`, a list of kernel specs. Fields without a default are required.", ""]
    kinds = [m.__name__ for m in SPEC_MODELS]  # each kind's spec first, then what they are made of
    order = kinds + sorted(k for k in defs if k not in kinds)
    for name in order:
        d = defs[name]
        if "properties" not in d:
            if "enum" in d:
                lines += [f"### {name}", "", "One of " + ", ".join(f"`{v}`" for v in d["enum"]) + ".", ""]
            continue
        lines += [f"### {name}", ""]
        if d.get("description"):
            lines += [" ".join(d["description"].split()), ""]
        lines += ["| field | type | default |", "|---|---|---|"]
        required = set(d.get("required", []))
        for field, prop in d["properties"].items():
            # default_factory fields carry no default
            fallback = [] if prop.get("type") == "array" else {} if prop.get("type") == "object" else None
            default = "required" if field in required else f"`{json.dumps(prop.get('default', fallback))}`"
            lines.append(f"| `{field}` | {_type(prop)} | {default} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
