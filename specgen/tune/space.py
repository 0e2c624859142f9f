"""The tuner's candidates: each design's knobs and ranges (its `tune_space(spec, target, when)` hook), their
product with the incumbent always in it, each applied to the spec as the writeback would write it (`edits`) and pruned by the same `check` (no compile is spent on a config check rejects).

A config is flat: {"tile.m": 128, "tile.n": 256, "tile.k": 64, "triton.num_warps": 8}. It is written into
the target's per_target table (or its copy of the size variants, for a variant's slot); a field the
design's `shared_config` makes common to a module's targets (Triton's tile) is written for each of them."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, MutableMapping, MutableSequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from specgen.check import Diagnostic, check_spec
from specgen.registry import design_for
from specgen.settle import mode_from_environment
from specgen.spec.file import SpecFile
from specgen.spec.load import LazyPositions, LoadedSpec, quote
from specgen.spec.models import LayeredSpec, Target
from specgen.targets import target_info

Config = dict[str, Any]
Edit = tuple[tuple[str | int, ...], Any]  # (path from the kernel's table, value)


class SpaceError(ValueError):
    pass


def config_key(config: Config) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def has_tune_space(spec: LayeredSpec, target: Target) -> bool:
    design = design_for(spec.kind, target)
    return design is not None and design.tune_space(spec.for_target(target), target_info(target)) is not None


def design_space(spec: LayeredSpec, target: Target, slot: int | None = None) -> dict[str, tuple[Any, ...]]:
    """The design's knobs for (target, slot): `tune_space(effective spec, target, when)`, `when` the slot's
    bounds where it is a variant's (a design may sweep other knobs for decode-sized slots)."""
    design = design_for(spec.kind, target)
    when = spec.variants_on(target)[slot].when if slot is not None else None
    found = design.tune_space(spec.for_target(target, slot), target_info(target), when) if design else None
    if found is None:
        raise SpaceError(f"{target} has no tune space: its design declares none (`tune_space`)")
    return found


_INT = re.compile(r"-?[0-9]+")  # ASCII digits only: str.isdigit() also takes '²' and '１２８', which int() may not


def _knob_value(text: str) -> Any:
    """An integer where it is one, true / false as booleans (cute.swap_ab=false,true), none for an unset
    optional field, else the string (a literal such as cute.schedule=pingpong)."""
    if _INT.fullmatch(text):
        return int(text)
    return {"true": True, "false": False, "none": None}.get(text, text)


def parse_knobs(items: list[str], model: type[LayeredSpec]) -> dict[str, tuple[Any, ...]]:
    """--knob tile.n=128,256: a knob's range replaced, each value validated against the field's own type and
    bounds (`tile.n=abc` or `tile.n=0` is an error here, not a candidate check rejects later). `model`: the
    spec's kind's model, whose configuration sections the knobs name."""
    from pydantic import TypeAdapter, ValidationError

    sections = model.CONFIG_SECTIONS
    out: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        parts = name.split(".")
        if not sep or len(parts) != 2 or parts[0] not in sections or not values:
            raise SpaceError(f"--knob {quote(item)} is not SECTION.KEY=V1,V2 with SECTION one of {', '.join(sections)}")
        section, key = parts
        fields = model.model_fields[section].annotation.model_fields
        if key not in fields:
            raise SpaceError(f"--knob {quote(item)}: {section} has no field {quote(key)} (its fields: {', '.join(fields)})")
        field_ = fields[key]
        adapter = TypeAdapter(Annotated[(field_.annotation, *field_.metadata)] if field_.metadata else field_.annotation)
        parsed = []
        for text in values.split(","):
            value = _knob_value(text.strip())
            try:
                adapter.validate_python(value)
            except ValidationError as e:
                reason = e.errors()[0]["msg"]
                raise SpaceError(f"--knob {quote(item)}: {quote(text)} is no value of {name} ({reason})") from None
            parsed.append(value)
        out[name] = tuple(parsed)
    return out


def current(spec: LayeredSpec, target: Target, slot: int | None, knobs: list[str]) -> Config:
    """The incumbent: the effective value of each knob on (target, slot)."""
    eff = spec.for_target(target, slot)
    return {k: getattr(getattr(eff, k.split(".")[0]), k.split(".")[1]) for k in knobs}


def space(spec: LayeredSpec, target: Target, slot: int | None,
          overrides: dict[str, tuple[Any, ...]] | None = None) -> tuple[Config, list[Config]]:
    """(incumbent, every config of the product of the knobs' ranges, the incumbent first)."""
    ranges = {**design_space(spec, target, slot), **(overrides or {})}
    unknown = [k for k in ranges if k.split(".")[1] not in type(getattr(spec, k.split(".")[0])).model_fields]
    if unknown:
        raise SpaceError(f"unknown knob(s) {', '.join(unknown)} on {target}")
    inc = current(spec, target, slot, list(ranges))
    configs = [inc]
    for values in itertools.product(*ranges.values()):
        c = dict(zip(ranges, values, strict=True))
        if c != inc:
            configs.append(c)
    return inc, configs


def _module_targets(spec: LayeredSpec, target: Target) -> list[Target]:
    design = design_for(spec.kind, target)
    same = [t for t in spec.targets if t.backend is target.backend]
    for targets in (design.modules(spec, same) if design else {}).values():
        if target in targets:
            return targets
    return [target]


def _shared(spec: LayeredSpec, target: Target, knob: str) -> bool:
    design = design_for(spec.kind, target)
    section, key = knob.split(".")
    return any(p in ((section,), (section, key)) for p in getattr(design, "shared_config", ()))


def _layer(spec: LayeredSpec, target: Target, slot: int | None, edits: list[Edit]) -> tuple[str | int, ...]:
    """The path of (target, slot)'s layer; a variant's slot copies the kernel's variants into the target's
    table first (its own list, so the other targets keep theirs)."""
    if slot is None:
        return ("per_target", str(target))
    cfg = spec.per_target.get(str(target))
    if cfg is None or cfg.variants is None:
        copy = [v.model_dump(mode="json") for v in spec.variants]
        if not any(p == ("per_target", str(target), "variants") for p, _ in edits):
            edits.append((("per_target", str(target), "variants"), copy))
    return ("per_target", str(target), "variants", slot)


def edits(spec: LayeredSpec, target: Target, slot: int | None, config: Config) -> list[Edit]:
    """What writing `config` for (target, slot) changes: only knobs whose value differs; a section the kind
    gives whole (`WHOLE_SECTIONS`: the GEMM's tile) written whole; a shared field written for each of the
    module's targets."""
    whole = type(spec).WHOLE_SECTIONS
    out: list[Edit] = []
    for t in _module_targets(spec, target):
        if t != target and (slot is not None and spec.variants_on(t) != spec.variants_on(target)):
            continue  # another target's variants differ: its slot is not this one
        eff = spec.for_target(t, slot)
        mine = [k for k in config if t == target or _shared(spec, target, k)]
        changed = [k for k in mine if getattr(getattr(eff, k.split(".")[0]), k.split(".")[1]) != config[k]]
        if not changed:
            continue
        layer = _layer(spec, t, slot, out)
        for section in whole:  # a section given whole (the GEMM's tile)
            if any(k.split(".")[0] == section for k in changed):
                given = getattr(eff, section).model_dump() | {
                    k.split(".")[1]: config[k] for k in mine if k.split(".")[0] == section}
                out.append(((*layer, section), given))
        for k in changed:
            if k.split(".")[0] not in whole:
                out.append(((*layer, *k.split(".")), config[k]))
    return out + _pins(spec, out) if slot is None and out else out


def _pins(spec: LayeredSpec, changes: list[Edit]) -> list[Edit]:
    """A target's default is what its size variants inherit: writing a new default must not retune them.
    Each variant that would read a changed field from the new default gets the field's old value written
    into its own entry (a tile whole), so every variant runs exactly what it ran before."""
    data = spec.model_dump(mode="json")
    apply_edits(data, changes)
    after = type(spec).model_validate(data)
    touched = {p[1] for p, _ in changes}
    pins: list[Edit] = []
    for t in (t for t in spec.targets if str(t) in touched):
        for i in range(len(spec.variants_on(t))):
            old, new = spec.for_target(t, i), after.for_target(t, i)
            for section in type(spec).CONFIG_SECTIONS:
                was, now = getattr(old, section).model_dump(mode="json"), getattr(new, section).model_dump(mode="json")
                if was == now:
                    continue
                layer = _layer(spec, t, i, pins)
                if section in type(spec).WHOLE_SECTIONS:
                    pins.append(((*layer, section), was))
                    continue
                for k, v in was.items():
                    if now[k] != v and v is None:  # "unset" has no spelling in a spec file
                        raise SpaceError(f"{t} variant {i} reads {section}.{k} unset from the default, which this "
                                         f"config sets to {now[k]!r}: give the variant its own {section}.{k} first")
                    if now[k] != v:
                        pins.append(((*layer, section, k), v))
    return pins


def apply_edits(root: MutableMapping, changes: list[Edit],
                table: Callable[[tuple[str | int, ...]], MutableMapping] = lambda _: {},
                value: Callable[[Any], Any] = lambda v: v) -> None:
    """Apply edits to a kernel's table (a dict, a tomlkit table, a ruamel map): a missing table is made
    with `table(its path)`, values converted by `value` (inline tables for TOML)."""
    for path, v in changes:
        node: Any = root
        for depth, part in enumerate(path[:-1]):
            if isinstance(node, MutableSequence):
                node = node[part]
                continue
            if part not in node:
                node[part] = table(path[:depth + 1])
            node = node[part]
        node[path[-1]] = value(v)


def loaded_from(spec_data: dict, file: str = "<tune>") -> LoadedSpec:
    (spec,) = SpecFile.model_validate({"kernels": [spec_data]}).kernels  # its kind's model, by `kind`
    return LoadedSpec(spec, file, 0, LazyPositions("", ".json"))


@dataclass
class Candidates:
    target: Target
    slot: int | None
    incumbent: Config
    kept: list[Config] = field(default_factory=list)
    rejected: list[tuple[Config, list[Diagnostic]]] = field(default_factory=list)


def candidate_spec(loaded: LoadedSpec, target: Target, slot: int | None, config: Config) -> LoadedSpec:
    data = loaded.spec.model_dump(mode="json")
    apply_edits(data, edits(loaded.spec, target, slot, config))
    return loaded_from(data, loaded.file)


def enumerate_candidates(loaded: LoadedSpec, target: Target, slot: int | None,
                         overrides: dict[str, tuple[Any, ...]] | None = None) -> Candidates:
    """Every config of the space, checked as written: kept when the whole spec then passes check (no new
    error on any target, a near-boundary refusal aside: the candidate's compile settles it), rejected with
    check's errors otherwise."""
    inc, configs = space(loaded.spec, target, slot, overrides)
    out = Candidates(target, slot, inc)
    compiling = mode_from_environment() == "compile"
    for c in configs:
        try:
            spec = candidate_spec(loaded, target, slot, c)
        except ValueError as e:  # the model refused the value (a bound): check's first gate
            out.rejected.append((c, [Diagnostic(loaded.name, loaded.file, 1, 1, str(target), "LOAD", "error",
                                                str(e).splitlines()[0], "")]))
            continue
        # check's verdicts; where check settles with the compiler, a near-boundary refusal is left to the compile
        # the candidate gets anyway (a config that fails it, a spill included, is the candidate's verdict:
        # tune/run.py), as check would settle it
        errors = [d for d in check_spec(spec, settle="analytic") if d.severity == "error"
                  and (d.source != "model" or not compiling)]
        if errors:
            out.rejected.append((c, errors))
        else:
            out.kept.append(c)
    return out


def flattened(loaded: LoadedSpec, target: Target, slot: int | None, config: Config) -> dict:
    """The candidate as one kernel for one target, the slot's config as its default (no variants): what is
    compiled and timed (exactly what the launcher would run for a shape in that slot)."""
    spec = candidate_spec(loaded, target, slot, config).spec.for_target(target, slot)
    return spec.model_copy(update={"targets": [target]}).model_dump(mode="json")
