"""The design registry: one design per (kind, backend, MMA family), its protocol, and refusal per (spec, module)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from kernels import MINIMAL_SPEC

from specgen.registry import DESIGNS, by_key, design_for, served_targets
from specgen.render.catalogue import render_catalogue
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import TARGETS, Backend


def loaded(**overrides: object):
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update(overrides)
    (ls,) = load_text(json.dumps({"kernels": [d]}), "<designs>.json", ".json")
    return ls


def test_registry_is_keyed_by_kind_backend_and_mma_family():
    keyed = by_key()
    # every (backend, MMA family) of the target table has its design, and only those
    assert {key for key in keyed if key[0] == "gemm"} == {("gemm", info.backend, info.mma) for info in TARGETS.values()}
    # and the grouped kind's: every (backend, MMA family) too (cute:sm100's the last, kinds/grouped/designs/cute_sm100)
    assert {key for key in keyed if key[0] != "gemm"} == {("grouped", info.backend, info.mma) for info in TARGETS.values()}
    assert {d.name for d in keyed.values()} >= {"Triton", "CuTe sm90", "Pallas"}
    for key, design in keyed.items():
        assert key in design.keys
        # a rendering design answers for a key whenever one lists it
        assert design.renders or not any(d.renders and key in d.keys for d in DESIGNS)
    for design in DESIGNS:
        assert all((kind, backend) == (design.kind, design.backend) for kind, backend, _ in design.keys)
        if design.renders:
            module, _, fn = design.compile_hook.partition(":")
            assert module.startswith("specgen.kinds.") and fn.isidentifier()
            assert design.compiler_modules and design.extra
    # every target of the table has exactly one design, and it is the one its key names
    for name, info in TARGETS.items():
        design = design_for("gemm", name)
        assert design is keyed[("gemm", info.backend, info.mma)] and design.serves(info), name
        assert name in served_targets(design)


def test_the_cute_tcgen05_design_serves_cute_sm100(monkeypatch):
    """One line in DESIGN_PACKAGES (the CuTe sm100 design, issue 19) and cute:sm100 is its; a second
    design rendering the same key is refused."""
    from specgen import registry
    from specgen.design import DesignBase

    assert design_for("gemm", "cute:sm100").name == "CuTe sm100"
    assert design_for("gemm", "cute:sm100").renders
    assert design_for("gemm", "cute:sm90").name == "CuTe sm90"

    class Sm100(DesignBase):
        name = "another sm100"
        keys = (("gemm", Backend.cute, "tcgen05"),)

    monkeypatch.setattr(registry, "DESIGNS", (*registry.DESIGNS, Sm100()))
    with pytest.raises(ValueError, match="one key, one design"):
        registry._build()


def test_the_triton_design_renders_paths_to_text_from_what_check_resolved():
    ls = loaded(targets=["triton:sm90", "triton:sm100"])
    design = design_for("gemm", "triton:sm90")
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


def test_a_failing_cute_sm100_target_refuses_only_its_module(tmp_path: Path):
    # cute:sm100 fails MMA002 (tcgen05 M is 64 or 128); triton:sm90 takes it (with a warning)
    ls = loaded(tile={"m": 32, "n": 128, "k": 64}, targets=["triton:sm90", "cute:sm100"])
    result = render_catalogue([ls], tmp_path)
    assert any(d.rule == "MMA002" and d.severity == "error" and d.target == "cute:sm100" for d in result.diagnostics)
    assert result.refused == ["k"]
    assert (tmp_path / "triton" / "k.py").is_file()
    assert not (tmp_path / "cute" / "k_sm100.py").exists()
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


def test_the_design_says_its_torch_entry_and_compile_environment(monkeypatch):
    """bench times a module through its design's torch entry; tune's compile workers set the design's
    compile environment (no backend named in bench/ or tune/)."""
    import types

    from specgen.registry import design_for

    calls = []
    module = types.SimpleNamespace(k=lambda *a: calls.append(("k", a)) or 1, k_torch=lambda *a: calls.append(("k_torch", a)) or 2)
    assert design_for("gemm", "triton:sm90").torch_entry(module, "k")(3) == 1
    synced = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: synced.append(True)))
    monkeypatch.setitem(__import__("sys").modules, "torch", fake_torch)
    assert design_for("gemm", "pallas:gpu_sm90").torch_entry(module, "k")(4) == 2
    assert calls == [("k", (3,)), ("k_torch", (4,))] and synced == [True]
    assert design_for("gemm", "triton:sm90").compile_environment == {"TRITON_INTERPRET": "0"}
    assert design_for("gemm", "cute:sm90").compile_environment == {}
