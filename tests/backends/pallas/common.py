"""Render Pallas TPU modules for test specs into a temporary folder and import them; the data and the
float64 reference shared by the Pallas tests."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
from kernels import catalogue

from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES, is_tpu_target
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.dtypes import DType
from specgen.spec.load import load_text
from specgen.targets import TARGETS

CATALOGUE = catalogue()
TPU_CATALOGUE = {name: spec for name, spec in CATALOGUE.items()
                 if any(is_tpu_target(TARGETS[t]) for t in spec["targets"])}


def _gated_form(name: str, **fields: object) -> dict:
    return GemmSpec.model_validate({"name": name, "kind": "gemm", "targets": ["pallas:gpu_sm90"], **fields}).model_dump(
        mode="json")


# The dense Mosaic GPU kernel's gated epilogue (B (K, 2N): gate and up tiles a step, two accumulators; PAL012 its
# limits): halves K-major with a bias after it, interleaved K-major with A stored (K, M), batched, f16, GELU-tanh,
# and halves N-major with a residual after it on a 64-row tile. Lowered on the CPU (test_mgpu_module.py), run on the
# GPU (tests/gpu/test_pallas_gpu.py).
MGPU_GATED_FORMS: dict[str, dict] = {s["name"]: s for s in (
    _gated_form("mgpu_gated_halves_bias", a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "k"},
                out={"dtype": "bf16"}, tile={"m": 128, "n": 128, "k": 64},
                epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias", "dtype": "bf16"}]),
    _gated_form("mgpu_gated_il_f16_batch", a={"dtype": "f16", "major": "mn"}, b={"dtype": "f16", "major": "k"},
                out={"dtype": "f16"}, batch=True, tile={"m": 128, "n": 128, "k": 64},
                epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}]),
    _gated_form("mgpu_gated_halves_mn_residual", a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "mn"},
                out={"dtype": "bf16"}, tile={"m": 64, "n": 128, "k": 64},
                epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "residual", "dtype": "bf16", "name": "res"}]),
)}


def catalogue_config(name: str, overrides: dict[str, object]) -> dict:
    """Catalogue spec `name` with one config: its per-target tables and size-selected variants dropped,
    `overrides` laid over its fields (a table merged key by key; a list such as the epilogue, or a plain
    value such as the name or the targets, replaced)."""
    spec = {k: v for k, v in CATALOGUE[name].items() if k not in ("per_target", "variants")}
    for field, value in overrides.items():
        spec[field] = {**(spec.get(field) or {}), **value} if isinstance(value, dict) else value
    return spec


def jnp_dtype(dt: str):
    return jnp.dtype(JNP_DTYPES[DType(dt)])


def render_module(spec: dict, tmp_dir: Path):
    """Render the spec's TPU module (the design's one file) and import it under a unique name."""
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    targets = [t for t in loaded.spec.targets if is_tpu_target(t)]
    design = design_for(loaded.spec.kind, "pallas:tpu_v5e")
    assert design is not None
    (text,) = design.render(loaded, targets, {str(t): resolve(loaded.spec, t) for t in targets}).values()
    path = tmp_dir / f"pallas_{spec['name']}.py"
    path.write_text(text)
    return load_rendered(path, f"_specgen_pallas_test_{spec['name']}")


class Data:
    """Seeded operands in the stored layouts the JAX function takes, and their float64 logical forms."""

    def __init__(self, spec: dict, M: int, N: int, K: int, batch: int = 3, tag: str = "") -> None:
        self.spec, self.M, self.N, self.K = spec, M, N, K
        self.batch = (batch,) if spec["batch"] else ()
        self.rng = np.random.default_rng(zlib.crc32(f"{spec['name']}/{M}/{N}/{K}/{tag}".encode()))

    def values(self, shape: tuple[int, ...], dt: str, kind: str = "normal") -> jax.Array:
        if not DType(dt).is_float:
            return jnp.asarray(self.rng.integers(-8, 9, shape), jnp_dtype(dt))
        if kind == "positive":
            return jnp.asarray(self.rng.random(shape) + 0.5, jnp_dtype(dt))
        return jnp.asarray(self.rng.standard_normal(shape), jnp_dtype(dt))

    def operands(self) -> tuple[jax.Array, jax.Array]:
        s, M, N, K = self.spec, self.M, self.N, self.K
        a_shape = (*self.batch, M, K) if s["a"]["major"] == "k" else (*self.batch, K, M)
        bn = 2 * N if s["epilogue"] and s["epilogue"][0]["op"] == "gated" else N  # gate and up columns
        b_shape = (*self.batch, bn, K) if s["b"]["major"] == "k" else (*self.batch, K, bn)
        a = self.values(a_shape, s["a"]["dtype"])
        if DType(s["a"]["dtype"]).is_float and DType(s["a"]["dtype"]).bytes > 1:  # A @ B of unit variance
            a = (a.astype(jnp.float32) / math.sqrt(K)).astype(a.dtype)
        return a, self.values(b_shape, s["b"]["dtype"])

    def epilogue_args(self) -> list[tuple[str, object]]:
        M, N = self.M, self.N
        args: list[tuple[str, object]] = []
        for op in self.spec["epilogue"]:
            if op["op"] == "bias":
                args.append((op["name"], self.values((M if op["along"] == "m" else N,), op["dtype"])))
            elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
                args.append((op["name"] or "alpha", 0.75))
            elif op["op"] == "scale" and op["by"] == "row":
                args.append((op["name"] or "row_scale", self.values((M,), "f32", "positive")))
            elif op["op"] == "scale" and op["by"] == "col":
                args.append((op["name"] or "col_scale", self.values((N,), "f32", "positive")))
            elif op["op"] == "scale" and op["by"] == "rowcol":
                args.append(("scale_a", self.values((M,), "f32", "positive")))
                args.append(("scale_b", self.values((N,), "f32", "positive")))
            elif op["op"] == "residual":
                args.append((op["name"], self.values((*self.batch, M, N), op["dtype"])))
        want = [arg.name for arg in GemmSpec.model_validate(self.spec).runtime_args()]
        assert [name for name, _ in args] == want
        return args


def f64(x: object) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def reference(spec: dict, a: jax.Array, b: jax.Array, args: list[tuple[str, object]],
              epilogue: list[dict] | None = None) -> torch.Tensor:
    """epilogue(A @ B) in float64 from the stored layouts (transposed back to A (M, K), B (K, N))."""
    a64, b64 = f64(a), f64(b)
    if spec["a"]["major"] == "mn":
        a64 = a64.transpose(-1, -2)
    if spec["b"]["major"] == "k":
        b64 = b64.transpose(-1, -2)
    kwargs = {name: (value if isinstance(value, float) else f64(value)) for name, value in args}
    return REFERENCES[spec["kind"]](spec["epilogue"] if epilogue is None else epilogue, a64, b64, kwargs)


def tolerance(spec: dict) -> dict[str, float]:
    """O(1) results: the out dtype's rounding; an f32 out from 16-bit operands is exact f32 sums."""
    out = spec["out"]["dtype"]
    casts = [op["dtype"] for op in spec["epilogue"] if op["op"] == "cast"]
    if out == "int32":
        return {"atol": 0.0, "rtol": 0.0}
    if out == "bf16" or "bf16" in casts:  # one bf16 ulp (2**-7 relative) either way
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 2e-5, "rtol": 2e-5}


def host_primitives(jaxpr) -> list[str]:
    """The primitives a traced program runs outside its kernels (into jit, custom_vjp / custom_vmap calls, control
    flow; not into a pallas_call's or a Mosaic GPU kernel's (mpmd_map) body): a lax.map or loop shows as scan or while,
    and each kernel launch once as pallas_call / mpmd_map."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        if eqn.primitive.name in ("pallas_call", "mpmd_map", "core_map"):
            continue
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    names += host_primitives(inner)
    return names
