"""The GEMM kind's numerics tests (specgen/kinds/gemm/testing/numerics.py) on the GPU-only designs: CuTe sm90
(the torch launcher, `out=` poisoned inside a poisoned storage) and Mosaic GPU (pallas:gpu_sm90, its torch
entry: a new tensor, the direct launch or the DLPack path), the same float64 reference, poisoning, input
checks and dropped-op checks the CPU backends run, on the catalogue's specs at their shipped configs:
ragged M / N / K, M = 1, K smaller than tile.k and deep K with a tail, strided operands on the small ones.

Marked `gpu`: CI (CPU only) deselects them (`-m "not gpu"`); gpu/run.sh runs them on the H200.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from kernels import catalogue, load_target_module

from specgen.kinds.gemm.testing.data import Problem
from specgen.kinds.gemm.testing.numerics import NumericsTests

pytestmark = pytest.mark.gpu

CATALOGUE = catalogue()
# (M, N, K, layout): N and K multiples of 8 off the tiles (TMA rows of 16 bytes for the 16-bit types; the
# storages are padded to 16 bytes for fp8), K tails of 16 past whole K tiles.
SHAPES = {
    "ragged": (517, 264, 1040, "dense"),
    "m1": (1, 136, 520, "strided"),
    "ksmall": (40, 136, 24, "strided"),
    "deepk": (130, 72, 4112, "dense"),
}


def only(spec: dict, target: str) -> dict:
    """The catalogue spec on `target` alone (its table for it kept), renamed per backend so that its custom op
    and module names meet neither the catalogue's nor another backend's (the module cache keys on them)."""
    spec = json.loads(json.dumps(spec))
    spec["name"] += "_num_" + target.partition(":")[0]
    spec["targets"] = [target]
    spec["per_target"] = {t: c for t, c in (spec.get("per_target") or {}).items() if t == target}
    return spec


def variants(target: str) -> dict[str, dict]:
    return {name: only(spec, target) for name, spec in CATALOGUE.items() if target in spec["targets"]}


@pytest.fixture(scope="module")
def gpu_modules(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("numerics_gpu")
    cache: dict = {}

    def get(spec: dict):
        (target,) = spec["targets"]
        if (spec["name"], target) not in cache:
            if target.startswith("pallas:"):
                from backends.pallas.test_mgpu_module import render

                cache[spec["name"], target] = render(spec, Path(folder))[0]
            else:
                cache[spec["name"], target] = load_target_module(spec, target, Path(folder), "_specgen_numerics_gpu_")[0]
        return cache[spec["name"], target]

    return get


class GpuNumerics(NumericsTests):
    SHAPES = SHAPES
    DEVICE = "cuda"
    MUTANT_SHAPES = frozenset({"ragged"})

    @pytest.fixture
    def module(self, gpu_modules):
        return gpu_modules

    def problem(self, spec: dict, shape: str) -> Problem:
        M, N, K, layout = SHAPES[shape]
        return Problem(spec, M, N, K, layout, aligned=True, vectors_2d=shape == "ksmall", tag=shape, device="cuda")


class TestCuteSm90Numerics(GpuNumerics):
    VARIANTS = variants("cute:sm90")


class TestMosaicGpuNumerics(GpuNumerics):
    VARIANTS = variants("pallas:gpu_sm90")
    WRITES_OUT = False

    def run(self, module: object, spec: dict, a: torch.Tensor, b: torch.Tensor, args: list[tuple[str, object]],
            out: torch.Tensor | None) -> torch.Tensor:
        result = getattr(module, spec["name"] + "_torch")(a, b, *(value for _, value in args))
        torch.cuda.synchronize()
        return result
