"""The formula table on Mosaic GPU without a GPU: a module with every activation and clamp form lowers
for CUDA on this CPU machine (`lowering_platforms=("cuda",)`, Mosaic GPU's warpgroup lowering of
jnp.where, jnp.tanh and the constants; needs the jax-cuda12 plugin, as the SMEM probe (bench/mgpu_smem_probe.py until issue 21, in git history) does).
GELU's erf form does not lower there: Mosaic GPU 0.10.2 has no layout rule for math.erf (it did not
before the table either), recorded as an expected failure; check refuses it (PAL009)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from specgen.compile import load_rendered
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_text

# Lowering for CUDA needs jax's CUDA plugin: a GPU machine has it (CI, CPU only, deselects `gpu`); on a CPU
# machine with the jax-cuda12 plugin installed, `pytest -m gpu tests/backends/pallas/test_mgpu_formulas.py`.
pytestmark = pytest.mark.gpu

CLAMPS = [{"op": "clamp", "min": -1.5, "max": 2.5}, {"op": "clamp", "min": -0.0}, {"op": "clamp", "max": 3e38}]


def lower(name: str, epilogue: list[dict], tmp_path) -> str:
    spec = {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "tile": {"m": 128, "n": 128, "k": 64}, "targets": ["pallas:gpu_sm90"],
            "epilogue": epilogue}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{name}>", ".json")
    files = render_modules(loaded, loaded.spec.targets)
    path = tmp_path / f"mgpu_{name}.py"
    path.write_text(files[f"pallas/gpu_sm90/{name}.py"])
    module = load_rendered(path, f"_specgen_mgpu_formula_{name}")
    args = [jax.ShapeDtypeStruct((512, 512), jnp.bfloat16), jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)]
    return jax.jit(module._call).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def test_every_tanh_form_and_clamp_lowers_for_cuda(tmp_path) -> None:
    fns = ("relu", "gelu_tanh", "silu", "sigmoid")
    assert "mosaic_gpu" in lower("mg_forms", [*({"op": "activation", "fn": f} for f in fns), *CLAMPS], tmp_path)


@pytest.mark.xfail(raises=NotImplementedError, strict=True, reason="Mosaic GPU has no layout rule for math.erf")
def test_gelu_erf_form_lowers_for_cuda(tmp_path) -> None:
    lower("mg_erf", [{"op": "activation", "fn": "gelu"}], tmp_path)
