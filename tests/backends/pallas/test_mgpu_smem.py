"""The Mosaic GPU SMEM model (the Pallas design's `memory` for pallas:gpu_sm90) against what Mosaic GPU
itself computed when lowering JAX's warp-specialized Hopper matmul on the H200 (jax 0.11.2): every
recorded figure, over and under the 232448 B limit, equal to the byte. The live form of this check is
tests/gpu/test_pallas_gpu.py (and the SMEM probe (bench/mgpu_smem_probe.py until issue 21, in git history), which wrote the record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.stages import memory
from specgen.targets import SM90, TARGETS

RECORD = Path(__file__).resolve().parents[3] / "bench" / "results" / "2026-11-22-h200-mgpu-smem.jsonl"
ROWS = [json.loads(line) for line in RECORD.read_text().splitlines() if line.strip()]


def model(wg_m: int, wg_n: int, tile_k: int, steps: int) -> int:
    spec = GemmSpec.model_validate({
        "name": "k", "kind": "gemm", "a": {"dtype": "bf16"}, "b": {"dtype": "bf16"}, "out": {"dtype": "bf16"},
        "tile": {"m": wg_m, "n": 2 * wg_n, "k": tile_k}, "targets": ["pallas:gpu_sm90"],
    })
    return memory(spec, TARGETS["pallas:gpu_sm90"], steps).total


def test_record_covers_both_sides_of_the_limit() -> None:
    assert {row["fits"] for row in ROWS} == {True, False} and len(ROWS) >= 8


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['wg_tile']}x{r['steps']}" for r in ROWS])
def test_model_matches_the_lowering(row: dict) -> None:
    got = model(*row["wg_tile"], row["steps"])
    assert got == row["model"]
    assert (got <= SM90.smem_per_block) == row["fits"]
    if not row["fits"]:  # Mosaic GPU's own figure: "smem_bytes=<n> > max_smem_bytes=232448"
        assert f"smem_bytes={got} > max_smem_bytes={SM90.smem_per_block}" in row["err"]
