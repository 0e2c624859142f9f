"""Render spec variants into a temporary package and import them: the numerics tests run what the
catalogue renders, with dtypes swapped where the CPU interpreter cannot (bf16, fp8 -> f16)."""

from __future__ import annotations

import json
from pathlib import Path

from specgen.compile import load_rendered
from specgen.render.catalogue import render_module, render_modules
from specgen.spec.load import load_paths, load_text
from specgen.spec.models import parse_target

ROOT = Path(__file__).resolve().parents[1]

# The smallest valid kernel spec; tests override fields of a copy.
MINIMAL_SPEC: dict = {
    "name": "k",
    "kind": "gemm",
    "a": {"dtype": "bf16", "major": "k"},
    "b": {"dtype": "bf16", "major": "k"},
    "out": {"dtype": "bf16"},
    "tile": {"m": 128, "n": 128, "k": 64},
    "targets": ["triton:sm90"],
}


def catalogue(kind: str = "gemm") -> dict[str, dict]:
    """The shipped specs of one kind (the dense GEMM's unless asked) as plain data, by name."""
    return {ls.name: ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs"]) if ls.spec.kind == kind}


def interpreter_variant(spec: dict, **changes: object) -> dict:
    """The same kernel with interpreter-safe dtypes: bf16 and fp8 become f16 (Triton's CPU interpreter gets bf16
    wrong; it converts fp8 tiles before its dot, so fp8 kernels also run as they are: tests/grouped keeps both)."""
    spec = json.loads(json.dumps(spec))
    swap = {"bf16": "f16", "fp8_e4m3": "f16", "fp8_e5m2": "f16"}
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = swap.get(spec[side]["dtype"], spec[side]["dtype"])
    for op in spec["epilogue"]:
        if "dtype" in op:
            op["dtype"] = swap.get(op["dtype"], op["dtype"])
    spec["name"] = spec["name"] + "_interp"
    spec.update(changes)
    return spec


def triton_only(spec: dict) -> dict:
    """The spec on its Triton targets alone (their per_target tables kept, the others' dropped)."""
    targets = [t for t in spec["targets"] if t.startswith("triton:")]
    spec = {**spec, "targets": targets}
    if "per_target" in spec:
        spec["per_target"] = {t: c for t, c in spec["per_target"].items() if t in targets}
    return spec


def load_module(spec: dict, tmp_dir: Path, module_name: str | None = None):
    """Render one Triton module for `spec` and import it (under a unique name unless one is given)."""
    spec = triton_only(spec)
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    text = render_module(loaded, loaded.spec.targets)
    path = tmp_dir / f"{spec['name']}.py"
    path.write_text(text)
    return load_rendered(path, module_name or f"_specgen_test_{spec['name']}")


def load_target_module(spec: dict, target: str, tmp_dir: Path, prefix: str = "_specgen_test_"):
    """Render `spec`'s one module for `target` (the CuTe designs render a module per arch) and import it
    under `prefix` + the file's stem: (module, its text)."""
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    ((rel, text),) = render_modules(loaded, [parse_target(target)]).items()
    path = tmp_dir / Path(rel).name
    path.write_text(text)
    return load_rendered(path, prefix + path.stem), text


# The guard tests' kernels by role (specgen/kinds/gemm/testing/guards.py: ROLES), from these catalogue specs.
GUARD_ROLES = {"ptr": "gemm_residual_bf16", "relu": "gemm_relu_f16", "tma": "gemm_fp8_rowwise",
               "bias": "gemm_bias_gelu_bf16", "bmm": "bmm_bf16", "bmm_res": "bmm_bf16"}


def guard_kernels(prefix: str, target: str, tile: dict, mn_tile: dict | None = None) -> dict[str, dict]:
    """The guard roles' catalogue specs on `target` alone, at `tile` (`mn_tile` where A is mn-major), their
    per-target tables and size-selected variants dropped, named `<prefix>_<role>`; `bmm_res` is the batched
    spec with a residual (beta 0.5)."""
    from specgen.kinds.gemm.spec import GemmSpec

    specs = catalogue()
    out = {}
    for role, base in GUARD_ROLES.items():
        spec = {k: v for k, v in specs[base].items() if k not in ("per_target", "variants")}
        spec.update(name=f"{prefix}_{role}", targets=[target],
                    tile=dict(mn_tile if mn_tile and spec["a"]["major"] == "mn" else tile))
        if role == "bmm_res":
            spec["epilogue"] = [{"op": "residual", "dtype": spec["out"]["dtype"], "beta": 0.5}]
        out[role] = GemmSpec.model_validate(spec).model_dump(mode="json")
    return out
