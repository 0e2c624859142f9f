"""tune and check share verdicts near a rule's boundary (issue 36): a candidate the model refuses near the
boundary is not pruned (its compile, which tune runs anyway, settles it), and what tune's compile found is
check's cached verdict, so a check of the tuned spec compiles that config no more."""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from specgen.check import check_specs
from specgen.spec.load import load_file, load_text
from specgen.spec.models import parse_target
from specgen.tune.compile_jobs import CompileJob, compile_job
from specgen.tune.space import enumerate_candidates

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((ROOT / "tests" / "data" / "grid_cute_sm90.json").read_text())["cases"]


def test_a_near_refusal_is_left_to_the_candidates_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # cgrid_17_0208: REG001 1 register over the 232 (ptxas built it spill-free): near the boundary
    (case,) = [c for c in RECORD if c["spec"]["name"] == "cgrid_17_0208"]
    path = tmp_path / "near.json"
    path.write_text(json.dumps({"kernels": [case["spec"]]}))
    (loaded,) = load_file(path)
    (reg,) = [d for d in check_specs([loaded]).diagnostics if d.rule == "REG001"]  # the model alone refuses it
    assert reg.severity == "error"
    monkeypatch.delenv("SPECGEN_NO_COMPILE", raising=False)  # check settles with the compiler
    c = enumerate_candidates(loaded, parse_target("cute:sm90"), None)
    assert c.kept[0] == c.incumbent  # kept: tune's compile decides, as check's would
    monkeypatch.setenv("SPECGEN_NO_COMPILE", "1")  # check keeps the model's verdict: so does tune
    c = enumerate_candidates(loaded, parse_target("cute:sm90"), None)
    assert c.incumbent in [r for r, _ in c.rejected]


SMALL = {"name": "tuned", "kind": "gemm", "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
         "out": {"dtype": "f16"}, "tile": {"m": 64, "n": 64, "k": 32}, "triton": {"num_warps": 4},
         "targets": ["triton:sm90"]}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="needs triton")
def test_tunes_compile_is_checks_cached_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path / "settle"))
    job = CompileJob("k0", SMALL, "triton:sm90", str(tmp_path / "build"))
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # a worker, as tune's are
        result = pool.submit(compile_job, job).result()
    assert result["error"] == "", result
    (loaded,) = load_text(json.dumps({"kernels": [SMALL]}), "<tuned>", ".json")
    report = check_specs([loaded], settle="compile")
    assert report.settled.near >= 1 and report.settled.compiled == 0 and report.settled.cached == 1
    assert not [d for d in report.diagnostics if d.severity == "error"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="needs triton")
def test_an_inline_compile_leaves_the_callers_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile in this process (tune's workers = 0) sets TRITON_INTERPRET=0 for the design's compile and puts it
    back after: the caller's later Triton calls stay under the interpreter (they failed with "must be on a CUDA
    device" when a test batch ran tune's tests first)."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path / "settle"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = compile_job(CompileJob("k1", SMALL, "triton:sm90", str(tmp_path / "build")))
    assert result["error"] == "", result
    import os

    assert os.environ["TRITON_INTERPRET"] == "1"
