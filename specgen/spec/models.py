"""The parts of a kernel spec every kind shares, as pydantic v2 models. Strict: unknown fields are errors,
models are frozen. A spec file (spec/file.py) holds `kernels`, a list; each kernel has a `kind`, and the
kind's own model (specgen/kinds/<kind>/spec.py) declares its fields: its semantics, its configuration
sections and its variants' bounds (a `Bounds`) are the kind's, built from the generic parts here (Strict,
bounded, KeysAddedLater, Sparse); the targets and the per-target and per-size layering (LayeredSpec) are here.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from specgen.spec.names import IDENTIFIER, MAX_NAME, check_kernel_name
from specgen.spec.targets import ALL_TARGETS, TARGET_ARCHS, Backend


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def bounded(hi: int, lo: int = 1) -> object:
    """A strict integer in [lo, hi]: no "128", 128.0 or true, as the JSON Schema says; the bound is what
    the field's consumers hold (kernels compute in int32), far above any sane value."""
    return Annotated[int, Field(strict=True, ge=lo, le=hi)]


MAX_DESCRIPTION = 4096


class KeysAddedLater(Strict):
    """A section that gained keys after specs were first hashed: such a key, left unset at its default,
    is not dumped, so a spec that does not use it dumps (and hashes) as it did before the key existed."""

    ADDED_LATER: ClassVar[dict[str, object]] = {}  # key -> its default

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        data = handler(self)
        for key, default in self.ADDED_LATER.items():
            if key not in self.model_fields_set and data.get(key) == default:
                data.pop(key, None)
        return data


class Target(Strict):
    backend: Backend
    arch: str

    def __str__(self) -> str:
        return f"{self.backend._value_}:{self.arch}"  # _value_: what .value reads, without its descriptor


_PARSED: dict[str, Target] = {}  # each known target's one (frozen) model: specs name a few targets many times


def parse_target(text: object) -> object:
    if isinstance(text, str) and text in _PARSED:
        return _PARSED[text]
    known = ", ".join(ALL_TARGETS)
    if isinstance(text, Target):
        text = str(text)  # re-checked: a Target built by hand may name any arch
    if not isinstance(text, str):  # a table {backend, arch} would skip the arch check below
        raise ValueError(f"a target is a string 'backend:arch', not {type(text).__name__}; known targets: {known}")
    backend, sep, arch = text.partition(":")
    if not sep or backend not in Backend.__members__:
        raise ValueError(f"target '{text}' is not backend:arch; known targets: {known}")
    if arch not in TARGET_ARCHS[Backend(backend)]:
        raise ValueError(f"target '{text}': {backend} has no arch '{arch}'; known targets: {known}")
    target = _PARSED[text] = Target(backend=Backend(backend), arch=arch)
    return target


TargetName = Annotated[
    Target,
    BeforeValidator(parse_target),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "enum": list(ALL_TARGETS)}),
]


def _docstring_safe(text: str) -> str:
    """A description is rendered into each generated module's docstring: refuse what would end that
    docstring early or not survive as source text, so a spec can never inject code; and control
    characters (ANSI escapes, carriage returns) that would forge what a terminal shows of the file."""
    if '"""' in text or "\\" in text:
        raise ValueError('a description may not contain \'"""\' or backslashes (it is rendered into a docstring)')
    if "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a description may not contain NUL or unpaired surrogate characters")
    bad = next((c for c in text if (c < " " and c not in "\t\n") or "\x7f" <= c <= "\x9f"), None)
    if bad is not None:
        raise ValueError(f"a description may not contain control characters (found {bad!r})")
    return text


class Sparse(Strict):
    """A model of optional keys that dumps only the keys given a value, so that a dumped spec loads
    back as the same spec (SPEC, tests) and reads as it was written."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ConfigLayer(Sparse):
    """Configuration keys over the kernel's (the base of per-target tables and variants). A kind builds its
    layers on it (specgen/kinds/<kind>/spec.py): one optional field per configuration section, the generic
    ones and its designs' option sections, which `CONFIG_SECTIONS` lists."""

    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: object) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _has_sections(cls)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        # Sections dump the keys they were given only: a layer replaces exactly those, so a dumped
        # layer that spelled out defaults would override the kernel's values when loaded back.
        data = {k: v for k, v in handler(self).items() if v is not None}
        for section in self.CONFIG_SECTIONS:
            given = getattr(self, section)
            if given is not None:
                data[section] = given.model_dump(mode=info.mode, exclude_unset=True)
        return data


def _has_sections(cls: type[BaseModel]) -> None:
    """A kind's model (its spec or a layer) declares a field for each section it lists, and names a backend
    only for a section it lists."""
    sections: tuple[str, ...] = cls.CONFIG_SECTIONS  # type: ignore[attr-defined]
    missing = [s for s in sections if s not in cls.model_fields]
    if missing:
        raise TypeError(f"{cls.__name__} lists the configuration sections {missing} but has no such fields")
    stray = [s for s in getattr(cls, "BACKEND_SECTIONS", {}) if s not in sections]
    if stray:
        raise TypeError(f"{cls.__name__} names a backend for {stray}, which are not among its CONFIG_SECTIONS")
    stray = [s for s in getattr(cls, "WHOLE_SECTIONS", ()) if s not in sections]
    if stray:
        raise TypeError(f"{cls.__name__} gives {stray} whole, which are not among its CONFIG_SECTIONS")


class Bounds(Sparse):
    """A variant's problem-size bounds, whatever its kind: the kind's `when` model subclasses this and says its
    bounds (`bounds()`, {dimension: largest size served}); a dimension it leaves unbounded is absent. Which
    variant the launcher picks, and whether an earlier one shadows a later, follow from those alone."""

    def bounds(self) -> dict[str, int]:
        raise NotImplementedError(f"{type(self).__name__} says its bounds")

    def contains(self, other: Bounds) -> bool:
        """Whether every problem `other` admits, this admits too."""
        theirs = other.bounds()
        return all(dim in theirs and theirs[dim] <= mine for dim, mine in self.bounds().items())

    def __str__(self) -> str:
        return " and ".join(f"{d} <= {v}" for d, v in self.bounds().items())


def _check_variants(variants: list[ConfigLayer], where: str) -> None:
    for i, v in enumerate(variants):
        for j in range(i):
            if variants[j].when.contains(v.when):
                raise ValueError(f"{where}variant {i} ({v.when}) is never chosen: variant {j} ({variants[j].when}), "
                                 "listed before it, admits every problem it does; list the narrower one first")


def _target_key(text: object) -> str:
    return str(parse_target(text))


TargetKey = Annotated[str, BeforeValidator(_target_key), WithJsonSchema({"type": "string", "enum": list(ALL_TARGETS)})]


Description = Annotated[str, Field(max_length=MAX_DESCRIPTION), AfterValidator(_docstring_safe)]
# The pattern is checked by check_kernel_name (with a message that says why); the schema shows it too.
KernelName = Annotated[str, Field(max_length=MAX_NAME, json_schema_extra={"pattern": IDENTIFIER.pattern}),
                       AfterValidator(check_kernel_name)]


class LayeredSpec(Strict):
    """A kernel spec's configuration layering, whatever its kind: the kernel's config sections, a target's
    `per_target` table over them, a size variant over that. A kind's spec model subclasses it and declares
    every field itself, in its own order (this base has none, so a kind's fields dump and hash in the order
    it gives them): `name`, `kind`, `targets`, `per_target`, `variants` and its configuration sections among
    them. It names those sections in `CONFIG_SECTIONS` (the ones a target or a variant may override: the
    kernel's semantics stay the same on every target), and in `BACKEND_SECTIONS` the sections that are a
    design's options, each with the backend whose targets read it; in `WHOLE_SECTIONS` the sections a layer
    gives whole (their keys have no defaults: the tuner writes such a section whole)."""

    CONFIG_SECTIONS: ClassVar[tuple[str, ...]] = ()
    BACKEND_SECTIONS: ClassVar[dict[str, Backend]] = {}
    WHOLE_SECTIONS: ClassVar[tuple[str, ...]] = ()
    # Keys left out of the dump (and the hash) while empty: a spec that does not use a section added later
    # dumps as it did before the section existed.
    DROPPED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("per_target", "variants")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: object) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _has_sections(cls)

    @model_validator(mode="after")
    def _layers(self) -> LayeredSpec:
        seen: set[str] = set()
        for t in self.targets:
            if str(t) in seen:
                raise ValueError(f"target '{t}' is listed twice")
            seen.add(str(t))
        _check_variants(self.variants, "")
        for key, cfg in self.per_target.items():
            if cfg.variants:
                _check_variants(cfg.variants, f"per_target '{key}': ")
            # a table for a target the spec does not list is inert, as a backend's options are on a
            # spec that lists none of its targets (so a copy of a spec may narrow its targets)
            backend = key.partition(":")[0]
            for section, owner in self.BACKEND_SECTIONS.items():
                for i, c in [(None, cfg), *enumerate(cfg.variants or [])]:
                    if getattr(c, section) is not None and owner.value != backend:
                        where = f"per_target '{key}'" + ("" if i is None else f" variant {i}")
                        raise ValueError(f"{where} sets {section} options, which only {owner} targets read")
        return self

    def companions(self) -> tuple[tuple[str, LayeredSpec, tuple[str | int, ...]], ...]:
        """Kernels this spec renders beside its own (a backward's GEMMs), each a spec of the same kind that
        resolve and the rules take as they take this one: (label, its effective spec, the field a finding
        about it points at). Called on an effective spec (one target's); none unless a kind says so."""
        return ()

    def variants_on(self, target: object) -> list[ConfigLayer]:
        """The size-selected variants on one target: its per_target list where it gives one, else the
        kernel's."""
        cfg = self.per_target.get(str(target))
        return cfg.variants if cfg is not None and cfg.variants is not None else self.variants

    def for_target(self: Spec, target: object, variant: int | None = None, *, base: Spec | None = None) -> Spec:
        """The effective spec on one target (and one of its variants): the target's `per_target` keys
        applied over the kernel's, then the variant's, with no `per_target` or `variants` left (what
        resolve, the rules and the designs read). `base`: the target's effective spec, made already, which
        a variant that sets nothing but its bounds is (one object: what is figured of it is figured once)."""
        layers = [c for c in (self.per_target.get(str(target)),) if c is not None]
        if variant is not None:
            layer = self.variants_on(target)[variant]
            sets = layer.model_fields_set.intersection(self.CONFIG_SECTIONS)
            if base is not None and all(getattr(layer, s) is None for s in sets):
                return base
            layers.append(layer)
        update: dict[str, object] = {"per_target": {}, "variants": []}
        for cfg in layers:
            for section in cfg.model_fields_set.intersection(self.CONFIG_SECTIONS):
                given = getattr(cfg, section)
                if given is not None:  # values were validated on load; merging keys keeps them valid
                    base = update.get(section, getattr(self, section))
                    update[section] = copy_model(base, {k: getattr(given, k) for k in given.model_fields_set})
        return copy_model(self, update)

    def config_field(self, target: object, field: tuple[str | int, ...],
                     variant: int | None = None) -> tuple[str | int, ...]:
        """Where a configuration field of the effective spec on `target` (and variant) was written:
        in the variant when it sets it (a section, or a key of it), else in the target's per_target
        table, else the kernel's own."""
        cfg = self.per_target.get(str(target))
        layers: list[tuple[tuple[str | int, ...], ConfigLayer]] = []
        if variant is not None:
            own = cfg is not None and cfg.variants is not None
            prefix = ("per_target", str(target), "variants", variant) if own else ("variants", variant)
            layers.append((prefix, self.variants_on(target)[variant]))
        if cfg is not None:
            layers.append((("per_target", str(target)), cfg))
        for prefix, layer in layers:
            if not field or field[0] not in layer.model_fields_set or field[0] not in self.CONFIG_SECTIONS:
                continue
            section = getattr(layer, str(field[0]))
            if section is not None and (len(field) == 1 or field[1] in section.model_fields_set):
                return (*prefix, *field)
        return field

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        # A spec without per-target tables dumps (and hashes) as it did before they existed.
        data = handler(self)
        for key in self.DROPPED_WHEN_EMPTY:
            if not data.get(key, True):
                data.pop(key)
        return data


Spec = TypeVar("Spec", bound=LayeredSpec)
Model = TypeVar("Model", bound=BaseModel)


def copy_model(model: Model, update: dict[str, object]) -> Model:
    """`model.model_copy(update=update)` (pydantic 2's: a shallow copy, `update` over its fields, unvalidated),
    built directly for these strict models, which hold no extra fields and no private attributes: check makes
    one per section a layer overrides, for every target and variant of every kernel."""
    if model.__pydantic_extra__ is not None or getattr(model, "__pydantic_private__", None) is not None:
        return model.model_copy(update=update)
    copied = type(model).__new__(type(model))
    fields = model.__dict__.copy()
    fields.update(update)
    fields_set = set(model.__pydantic_fields_set__)
    fields_set.update(update)
    object.__setattr__(copied, "__dict__", fields)
    object.__setattr__(copied, "__pydantic_extra__", None)
    object.__setattr__(copied, "__pydantic_fields_set__", fields_set)
    object.__setattr__(copied, "__pydantic_private__", None)
    return copied
