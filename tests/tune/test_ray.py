"""The Ray path on a local Ray cluster (CPU only): compile tasks on Ray CPU workers, real Triton compiles
for sm_90 (no GPU needed), the same results a process pool gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.compile_jobs import CompileJob, pool, ray_tasks
from specgen.tune.space import config_key, enumerate_candidates, flattened

ROOT = Path(__file__).resolve().parents[2]
ray = pytest.importorskip("ray")


def _jobs(tmp_path: Path) -> list[CompileJob]:
    loaded = load_file(ROOT / "specs" / "gemm_bf16.toml")[0]
    t = parse_target("triton:sm90")
    c = enumerate_candidates(loaded, t, None, {"tile.m": (128,), "tile.n": (64, 128), "tile.k": (64,),
                                               "triton.num_warps": (4,), "pipeline.ab_stages": (3,)})
    return [CompileJob(f"j{i}", flattened(loaded, t, None, k), str(t), str(tmp_path)) for i, k in
            enumerate(c.kept) if config_key(k) != config_key(c.incumbent)]


def test_ray_compile_tasks_on_a_local_cluster(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    assert len(jobs) == 2
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        results = {r["key"]: r for r in ray_tasks()(jobs)}
    finally:
        ray.shutdown()
    assert set(results) == {j.key for j in jobs}
    assert all(not r["error"] for r in results.values()), results
    # the compiler's SMEM grows with the tile (64 -> 128 columns of B per stage)
    assert 0 < results["j1"]["compiler_smem"] < results["j2"]["compiler_smem"]
    # a process pool compiles the same kernels to the same figures
    again = {r["key"]: r for r in pool(2)(jobs)}
    assert {k: r["compiler_smem"] for k, r in again.items()} == {k: r["compiler_smem"] for k, r in results.items()}


def test_a_warmed_pool_starts_the_clock_after_every_worker_imported_its_compilers(tmp_path: Path) -> None:
    """--compile-only's clock: `ready` runs once, after the workers' imports and before the first job."""
    import time

    jobs, marks = _jobs(tmp_path), []
    results = list(pool(2, ready=lambda: marks.append(time.perf_counter()))(jobs))
    assert len(marks) == 1 and len(results) == 2 and all(not r["error"] for r in results)
