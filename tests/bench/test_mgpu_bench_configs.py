"""The grouped Mosaic GPU benches' forced configs (--configs of gpu/bench_grouped_mgpu_k.py and bench_grouped_mgpu.py),
on the CPU: each is the design's plan of the bench's spec at that tile and stages (its warpgroup split, subtiles,
swizzles and SMEM, as check resolves them), not a figure re-derived by hand from the base row; forced output slots
change the SMEM by the slots' buffers alone. The timing runs on the GPU only."""

from __future__ import annotations

import importlib.util
import json
from collections import namedtuple
from pathlib import Path

import pytest

from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.kinds.grouped.designs.pallas_mgpu.design import CONFIG_FIELDS
from specgen.resolve import resolve
from specgen.spec.load import load_text

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _script("bench_grouped_mgpu_k")


def _planned(bench, tile: dict | None = None, stages: int | None = None, spec: dict | None = None):
    """The design's config of the bench's spec (at a tile and stages), as the module's Config row."""
    spec = {**(spec or bench.SPEC), **({"tile": tile} if tile else {}), **({"pipeline": {"ab_stages": stages}} if stages else {})}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    cfg = mgpu_config(resolve(loaded.spec, loaded.spec.targets[0]))
    row = namedtuple("Config", [f for f, _ in CONFIG_FIELDS] + ["swap_ab"])
    return row(**{f: getattr(cfg, g) for f, g in CONFIG_FIELDS}, swap_ab=False)


def test_forced_configs_are_the_designs_plan(bench) -> None:
    base = _planned(bench)
    assert bench.forced_config(base, f"{base.tile_m}x{base.tile_n}x{base.tile_k}x{base.stages}") == base
    # another depth and tile: 16 B of mbarriers a stage, which the figure the bench once derived from the base row's
    # missed (128x128x64 over 6 stages: 229,440 B, where the plan and Mosaic GPU's lowering allocate 229,472)
    row = bench.forced_config(base, "128x128x64x6")
    assert row == _planned(bench, {"m": 128, "n": 128, "k": 64}, 6) and row.smem_bytes == 229472
    # a tile check refuses (MGP001: 32-wide K tiles of M- / N-major operands) is not timed: its findings are printed
    assert bench.forced_config(base, "128x256x32x5") is None
    # one output slot a warpgroup instead of two: two (64 x 64) bf16 buffers fewer, nothing else
    one = bench.forced_config(base, f"{base.tile_m}x{base.tile_n}x{base.tile_k}x{base.stages}x1")
    assert base.out_slots == 2 and one == base._replace(out_slots=1, smem_bytes=base.smem_bytes - 2 * 64 * 64 * 2)


def test_the_ragged_m_benchs_forced_configs_are_the_designs_plan() -> None:
    """bench_grouped_mgpu.py times the catalogue's moe_bf16 module: its forced row at the module's own tile and stages
    is the module's CONFIG; another one is moe_bf16's spec planned there, the visit order as given (it kept the base
    row's SMEM and swizzles before)."""
    import tomllib

    bench = _script("bench_grouped_mgpu")
    with open(ROOT / "specs" / "grouped.toml", "rb") as f:
        moe = next(k for k in tomllib.load(f)["kernels"] if k["name"] == "moe_bf16")
    moe = {**moe, "targets": ["pallas:gpu_sm90"], "per_target": {}, "variants": []}
    base = _planned(bench, spec=moe)
    assert bench.forced_config(base, f"{base.tile_m}x{base.tile_n}x{base.tile_k}x{base.stages}") == base
    row = bench.forced_config(base, "128x256x32x5r1g16")
    want = _planned(bench, {"m": 128, "n": 256, "k": 32}, 5, moe)._replace(raster_dim=1, group_m=16)
    assert row == want and row.smem_bytes != base.smem_bytes and (row.a_swizzle, row.b_swizzle) == (64, 64)
