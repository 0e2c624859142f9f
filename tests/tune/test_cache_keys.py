"""The tuner's cache keys outlive moves of the code that makes them: a kernel's semantics is its kind's
spec model's SEMANTIC_FIELDS, hashed as before (the values below were written by the code before the GEMM
kind held its problem), and the caches recorded on the GPUs still hit: each entry's semantics is a
catalogue kernel's, each timing's key is made again from its fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.spec.load import load_paths
from specgen.tune.cache import Cache, semantic_fields, semantics, time_key

ROOT = Path(__file__).resolve().parents[2]
SPECS = {ls.name: ls.spec for ls in load_paths([ROOT / "specs"])}
RECORDED = sorted((ROOT / "bench" / "results").glob("*tune*cache*.jsonl"))

# semantics() of the catalogue's kernels as the tuner computed it before (tune/cache.py's own field list)
BEFORE = {"gemm_bf16": "da421197d9eb91d0909c", "gemm_bf16_tpu": "da421197d9eb91d0909c",
          "gemm_bias_gelu_bf16": "5e80b5c0eb21ee9cd872", "gemm_relu_f16": "1bdd8203516e6efc2c3e",
          "bmm_bf16": "3017a5f902256c93b106", "gemm_fp8_rowwise": "bc94f14eafda60f723fd",
          "gemm_residual_bf16": "8feabdbd26702254d4ff", "gemm_residual_tpu": "f21f58b3c5d15ced059d"}


def test_semantic_fields_come_from_the_spec_model():
    assert semantic_fields(SPECS["gemm_bf16"]) == ("a", "b", "out", "accumulator", "batch", "epilogue")
    assert {name: semantics(SPECS[name]) for name in BEFORE} == BEFORE


def test_a_config_change_keeps_the_semantics():
    spec = SPECS["gemm_bf16"]
    other = spec.model_copy(update={"tile": spec.tile.model_copy(update={"n": 64}), "name": "renamed"})
    assert semantics(other) == semantics(spec)
    assert semantics(spec.model_copy(update={"batch": True})) != semantics(spec)


@pytest.mark.skipif(not RECORDED, reason="no recorded tune cache in bench/results")
@pytest.mark.parametrize("path", RECORDED[:3], ids=lambda p: p.name)
def test_recorded_caches_still_hit(path: Path):
    cache = Cache(path)
    assert cache.entries and cache.foreign_version == 0 and cache.skipped == 0
    known = {semantics(s) for s in SPECS.values()}
    assert {e.semantics for e in cache.entries.values()} <= known
    times = [e for e in cache.entries.values() if e.kind == "time"]
    assert times
    for e in times:  # (a compile's key takes its run's library versions, which its entry does not hold)
        assert e.shape is not None and e.machine is not None
        assert time_key(e.semantics, e.target, e.shape, e.config_key, e.incumbent_key, e.machine) == e.key
