"""`specgen bench`'s orchestration, record and report on a CPU: the GPU replaced by fake workloads whose
calls carry a time keyed by (kernel, target, shape) and a fake timer behind the real paired statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgen.bench.record import BenchRecord, Environment
from specgen.bench.report import compare, tables
from specgen.bench.run import Workload, plan, run_bench
from specgen.bench.shapes import ShapeError, parse_shapes, slot_for
from specgen.bench.timing import Call
from specgen.cli import app
from specgen.kinds.gemm.problem import Shape
from specgen.spec.load import load_paths
from tests.tune.fakes import FakeTimer

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(gpu="NVIDIA H200", driver="580.0", sm_clock_mhz=1755, date="2026-11-25")


class FakeWorkloads:
    """Our kernel at 100 us x the shape's work, the peer `speedup` times slower; sm90 targets only."""

    def __init__(self, speedup: float = 1.05, error: float = 0.0) -> None:
        self.speedup, self.error = speedup, error

    def runs(self, target) -> bool:
        return str(target) in ("triton:sm90", "cute:sm90")

    def make(self, loaded, target, shape: Shape) -> Workload:
        us = 2 * shape.m * shape.n * shape.k * shape.batch / 7e8
        ours = Call(json.dumps({"us": us, "k": f"{loaded.name}@{target}"}), lambda: None)
        peer = Call(json.dumps({"us": us * self.speedup, "k": "peer"}), lambda: None)
        return Workload(ours, peer, "cuBLAS (torch.matmul)", self.error)


def _catalogue():
    return {ls.name: ls for ls in load_paths([ROOT / "specs"])}


def test_plan_times_the_targets_this_gpu_runs_and_default_shapes() -> None:
    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"], specs["bmm_bf16"]], None, None, FakeWorkloads())
    assert [(ls.name, str(t)) for ls, t, _ in jobs] == [("gemm_bf16", "triton:sm90"), ("gemm_bf16", "cute:sm90"),
                                                          ("bmm_bf16", "triton:sm90"), ("bmm_bf16", "cute:sm90")]
    shapes = dict(((ls.name, str(t)), s) for ls, t, s in jobs)
    tri = shapes[("gemm_bf16", "triton:sm90")]
    # each Triton variant's corner is measured (and served by that variant), then the model shapes
    spec = specs["gemm_bf16"].spec
    for i, v in enumerate(spec.variants_on("triton:sm90")):
        corner = Shape(v.when.m_max or 8192, v.when.n_max or 8192, v.when.k_max or 8192)
        assert corner in tri and slot_for(spec, "triton:sm90", corner) == i
    assert Shape(8192, 8192, 8192) in tri and Shape(16, 8192, 8192) in tri
    assert all(s.batch == 8 or s.batch == 4 for s in shapes[("bmm_bf16", "cute:sm90")])


def test_record_rows_aa_geomean_and_schema(tmp_path: Path) -> None:
    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"]], {"triton:sm90"}, parse_shapes("8192x8192x8192,16x8192x8192", "gemm"), FakeWorkloads())
    record = run_bench(jobs, FakeWorkloads(1.05), FakeTimer(), ENV, rounds=9)
    aa = [r for r in record.rows if r.kind == "aa"]
    rows = [r for r in record.rows if r.kind == "kernel"]
    assert len(aa) == 1 and abs(aa[0].ratio - 1) < 0.005 and len(rows) == 2
    assert all(abs(r.ratio - 1.05) < 0.005 and r.ratio_lo <= r.ratio <= r.ratio_hi for r in rows)
    big = rows[0]
    assert big.variant == "default" and rows[1].variant.startswith("variant ")
    assert abs(big.ours_tflops - 700) < 2 and big.pct_peak == pytest.approx(100 * big.ours_tflops / 989.4)
    assert abs(record.geomeans()["triton:sm90"] - 1.05) < 0.005
    path = tmp_path / "r.json"
    record.dump(path)
    data = json.loads(path.read_text())
    assert data["schema"] == "specgen.bench/1" and data["environment"]["gpu"] == "NVIDIA H200"
    assert BenchRecord.read(path) == record
    data["rows"][0]["unknown"] = 1
    with pytest.raises(ValueError, match="unknown"):
        BenchRecord.model_validate(data)
    assert "A/A" in str(tables(record)[0].columns[0]._cells[0])


def test_a_wrong_result_is_a_failure_not_a_row() -> None:
    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"]], {"triton:sm90"}, parse_shapes("256x256x256", "gemm"), FakeWorkloads())
    record = run_bench(jobs, FakeWorkloads(error=0.5), FakeTimer(), ENV, rounds=5)
    assert record.rows == [] and len(record.failures) == 1
    assert record.failures[0].startswith("gemm_bf16 @ triton:sm90 256x256x256: result differs from")


def test_compare_says_what_moved(tmp_path: Path) -> None:
    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"]], {"triton:sm90"}, parse_shapes("8192x8192x8192,4096x4096x4096", "gemm"), FakeWorkloads())
    a = run_bench(jobs, FakeWorkloads(1.05), FakeTimer(), ENV, rounds=9)
    b = run_bench(jobs[:1], FakeWorkloads(1.20), FakeTimer(), ENV, rounds=9)
    table, notes = compare(a, b)
    verdicts = table.columns[-1]._cells
    assert verdicts == ["same", "faster", "faster"]  # the A/A row, then both shapes
    a.dump(tmp_path / "a.json")
    b.dump(tmp_path / "b.json")
    result = CliRunner().invoke(app, ["bench", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert result.exit_code == 0, result.output
    assert "faster" in result.output and "1.050x -> 1.200x" in result.output
    assert not notes[0].startswith("only")
    clean = b.model_copy(update={"environment": ENV.model_copy(update={"l2_flush": "read"})})
    assert compare(a, clean)[1][0].startswith("A flushed the L2 by write, B by read")


def test_the_l2_flush_is_a_choice_on_record() -> None:
    """`--flush` picks how the timer empties the L2 (timing.Flush); the record and its tables say which, and
    a bad choice is refused before anything is timed (no GPU needed to get that far)."""
    from specgen.bench.timing import FLUSHES, flush_l2
    from specgen.cli_perf import L2Flush

    assert FLUSHES == ("write", "read") == tuple(f.value for f in L2Flush) and ENV.l2_flush == "write"
    with pytest.raises(ValueError, match="write, read"):
        flush_l2(how="sideways")  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["bench", "gemm_bf16", "--flush", "sideways"])
    assert result.exit_code == 2 and "'sideways' is not one of 'write', 'read'" in result.output
    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"]], {"triton:sm90"}, parse_shapes("16x8192x8192", "gemm"), FakeWorkloads())
    clean = ENV.model_copy(update={"l2_flush": "read"})
    record = run_bench(jobs, FakeWorkloads(), FakeTimer(), clean, rounds=5)
    assert "L2 flushed by read" in tables(record)[0].title


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from specgen.bench.report import plot

    specs = _catalogue()
    jobs = plan([specs["gemm_bf16"]], None, parse_shapes("8192x8192x8192", "gemm"), FakeWorkloads())
    plot(run_bench(jobs, FakeWorkloads(), FakeTimer(), ENV, rounds=5), tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_shape_errors_name_the_item() -> None:
    assert parse_shapes("8x16x32x64, 1x2x3", "gemm") == [Shape(16, 32, 64, 8), Shape(1, 2, 3)]
    for bad in ("8x8", "8x0x8", "axbxc", ""):
        with pytest.raises(ShapeError):
            parse_shapes(bad, "gemm")
