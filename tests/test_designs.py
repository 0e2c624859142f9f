"""The design registry: one design per (kind, backend), its protocol, and refusal per (spec, module)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from kernels import MINIMAL_SPEC

from specgen.designs import DESIGNS, design_for
from specgen.render.catalogue import render_catalogue
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import TARGETS, Backend


def loaded(**overrides: object):
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update(overrides)
    (ls,) = load_text(json.dumps({"kernels": [d]}), "<designs>.json", ".json")
    return ls


def test_registry_is_keyed_by_kind_and_backend():
    assert set(DESIGNS) == {("gemm", Backend.triton), ("gemm", Backend.cute), ("gemm", Backend.pallas)}
    for (kind, backend), design in DESIGNS.items():
        assert (design.kind, design.backend) == (kind, backend)
        module, _, fn = design.compile_hook.partition(":")
        assert module.startswith("specgen.") and fn.isidentifier()
    assert all(design_for(kind, backend) is design for (kind, backend), design in DESIGNS.items())


def test_the_triton_design_renders_paths_to_text_from_what_check_resolved():
    ls = loaded(targets=["triton:sm90", "triton:sm100"])
    design = design_for("gemm", Backend.triton)
    assert design is not None
    (rel, targets), = design.modules(ls.spec, ls.spec.targets).items()
    assert rel == "triton/k.py" and [str(t) for t in targets] == ["triton:sm90", "triton:sm100"]
    resolved = {str(t): resolve(ls.spec, t) for t in targets}
    files = design.render(ls, targets, resolved)
    assert list(files) == [rel]
    for name, r in resolved.items():
        # the plan's figures are the resolved ones, per compute capability
        cc = TARGETS[name].compute_capability
        assert f"{cc}: {{\"num_warps\": 8, \"num_stages\": {r.ab_stages}}}" in files[rel]
        assert f"SMEM {r.budget.total} B = {r.budget.breakdown()}" in files[rel]


def test_a_failing_checked_only_target_does_not_refuse_the_triton_module(tmp_path: Path):
    # cute:sm100 (checked only) fails MMA002 (tcgen05 M is 64 or 128); triton:sm90 takes it (with a warning)
    ls = loaded(tile={"m": 32, "n": 128, "k": 64}, targets=["triton:sm90", "cute:sm100"])
    result = render_catalogue([ls], tmp_path)
    assert any(d.rule == "MMA002" and d.severity == "error" and d.target == "cute:sm100" for d in result.diagnostics)
    assert result.refused == []
    assert (tmp_path / "triton" / "k.py").is_file()
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert manifest["kernels"]["k"]["targets"]["triton:sm90"] == "triton/k.py"


def test_a_failing_mosaic_gpu_target_refuses_only_its_module(tmp_path: Path):
    # the Pallas design renders pallas:gpu_sm90 (pallas/gpu_sm90/): its MMA001 error refuses that module only
    ls = loaded(tile={"m": 32, "n": 128, "k": 64}, targets=["triton:sm90", "pallas:gpu_sm90"])
    result = render_catalogue([ls], tmp_path)
    assert any(d.rule == "MMA001" and d.severity == "error" and d.target == "pallas:gpu_sm90" for d in result.diagnostics)
    assert result.refused == ["k"]
    assert (tmp_path / "triton" / "k.py").is_file() and not (tmp_path / "pallas" / "gpu_sm90" / "k.py").exists()


def test_a_failing_cute_sm90_target_refuses_only_the_cute_module(tmp_path: Path):
    # the CuTe design renders cute:sm90: its MMA001 error refuses its module, never the Triton one
    ls = loaded(tile={"m": 32, "n": 128, "k": 64}, targets=["triton:sm90", "cute:sm90"])
    result = render_catalogue([ls], tmp_path)
    assert result.refused == ["k"]
    assert (tmp_path / "triton" / "k.py").is_file() and not (tmp_path / "cute" / "k.py").exists()


def test_a_failing_target_refuses_only_its_module(tmp_path: Path):
    # 8 stages of 128x64 + 64x128 bf16 tiles: 262144 B > 232448 B on triton:sm90
    ls = loaded(pipeline={"ab_stages": 8}, targets=["triton:sm90", "cute:sm90"])
    result = render_catalogue([ls], tmp_path)
    assert result.refused == ["k"]
    assert not (tmp_path / "triton" / "k.py").exists()
