"""The backends under conformance: one row each. Adding a backend is adding a row.

A row names the spec target it renders, where it runs here (the CPU under an interpreter, or CUDA),
the dtypes it cannot run where it runs (Triton's CPU interpreter gets bf16 wrong and has no fp8 dot:
those specs run as f16 there), and how its generated module is called from torch (the launcher with
`out=`, or a Pallas module's `<name>_torch` entry, which returns a new tensor).

`build(spec, backend, folder)` checks the spec for the backend's target first: a spec the target
cannot serve is *refused*, with the rule ids check gave, and never rendered; otherwise the module is
rendered through the design registry, as `specgen render` would, and imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specgen.check import check_spec
from specgen.compile import load_rendered
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.load import load_text

# What an interpreter cannot run, swapped for what it can (the spec is otherwise the same).
INTERPRETER_DTYPES = {"bf16": "f16", "fp8_e4m3": "f16", "fp8_e5m2": "f16"}


@dataclass(frozen=True)
class Backend:
    id: str
    target: str
    device: str  # "cpu" (an interpreter: CI runs it) or "cuda" (the GPU entry point runs it)
    dtypes: dict[str, str] = field(default_factory=dict)  # spec dtype -> the dtype it runs as here
    entry: str = "{name}"  # the torch-facing function of the generated module
    takes_out: bool = True  # the entry writes into a given `out=` (Pallas entries return a new tensor)

    def param(self) -> object:
        marks = [pytest.mark.gpu] if self.device == "cuda" else []
        return pytest.param(self, id=self.id, marks=marks)


BACKENDS = [
    Backend("triton-interp", "triton:sm90", "cpu", dtypes=INTERPRETER_DTYPES),
    Backend("pallas-tpu-interp", "pallas:tpu_v7x", "cpu", entry="{name}_torch", takes_out=False),
    Backend("triton", "triton:sm90", "cuda"),
    Backend("cute-sm90", "cute:sm90", "cuda"),
    Backend("cute-sm90-jax", "cute:sm90", "cuda", entry="{name}_jax_torch", takes_out=False),  # XLA's custom call
    Backend("pallas-mgpu", "pallas:gpu_sm90", "cuda", entry="{name}_torch", takes_out=False),
]
TARGETS = sorted({b.target for b in BACKENDS})


@dataclass
class Built:
    """A spec as one backend sees it: its module's entry, or the rules that refused it."""

    spec: dict
    fn: Callable | None = None
    refused: list[str] = field(default_factory=list)  # "RULE: message", where check refused the target

    @property
    def rules(self) -> list[str]:
        return sorted({r.split(":", 1)[0] for r in self.refused})


def _checked(spec: dict) -> tuple[object, list]:
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<conformance:{spec['name']}>", ".json")
    return loaded, [d for d in check_spec(loaded) if d.severity == "error"]


def as_backend_sees_it(spec: dict, backend: Backend) -> dict:
    """The spec on the backend's target alone (its per_target table kept), dtypes swapped where the
    backend runs under an interpreter that cannot take them."""
    spec = json.loads(json.dumps(spec))
    spec["name"] = f"{spec['name']}__{re.sub(r'[^a-z0-9]', '_', backend.id)}"
    spec["targets"] = [backend.target]
    spec["per_target"] = {t: c for t, c in spec.get("per_target", {}).items() if t == backend.target}
    if backend.dtypes:
        for side in ("a", "b", "out"):
            spec[side]["dtype"] = backend.dtypes.get(spec[side]["dtype"], spec[side]["dtype"])
        for op in spec.get("epilogue", []):
            if "dtype" in op:
                op["dtype"] = backend.dtypes.get(op["dtype"], op["dtype"])
    return spec


def build(spec: dict, backend: Backend, folder: Path, fallback: dict | None = None) -> Built:
    """Check, render and import the spec for the backend. `fallback`: a config for the backend's target
    used where the backend swapped dtypes (an interpreter) and the spec's own config, tuned for the
    dtypes it no longer has (an fp8 tile run as f16 is twice the SMEM), is refused."""
    seen = as_backend_sees_it(spec, backend)
    swapped = any(seen[side]["dtype"] != spec[side]["dtype"] for side in ("a", "b", "out"))
    spec = seen
    loaded, errors = _checked(spec)
    if errors and fallback is not None and swapped:
        spec["per_target"] = {backend.target: json.loads(json.dumps(fallback))}
        spec.pop("variants", None)
        loaded, errors = _checked(spec)
    if errors:
        return Built(spec, refused=[f"{d.rule}: {d.message}" for d in errors])
    (target,) = loaded.spec.targets
    design = design_for(loaded.spec.kind, target)
    assert design is not None, f"{backend.target} passed check but has no design"
    files = design.render(loaded, [target], {str(target): resolve(loaded.spec, target)})
    (text,) = [t for p, t in files.items() if p.rsplit("/", 1)[-1] == f"{spec['name']}.py"]
    path = folder / f"{spec['name']}.py"
    path.write_text(text)
    module = load_rendered(path, f"_specgen_conformance_{spec['name']}")
    return Built(spec, fn=getattr(module, backend.entry.format(name=spec["name"])))
