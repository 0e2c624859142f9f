"""The grouped CuTe sm90 design on the CPU: every form (specgen/kinds/grouped/testing/specs.py CUTE_FORMS) and the
catalogue's cute:sm90 grouped kernels pass check, render, and compile for sm_90a through `cute.compile` over fake
tensors (dynamic M, N, K, G) with exactly the SMEM the plan allocates, TMA loads (no TMA store: the epilogue's
stores are predicated on the group's rows), wgmma and no local-memory spills; the spec takes cute:sm90 beside
cute:sm100 (the CuTe sm100 design's module: tests/grouped/test_cute_sm100.py); a render that skipped check refuses
what the kernel cannot do."""

from __future__ import annotations

import json
import os

import pytest

from specgen.check import check_all
from specgen.kinds.grouped.testing.specs import CUTE_FORMS, spec
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_paths, load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def catalogue_cute() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return [ls.name for ls in load_paths([root / "specs"]) if ls.spec.kind == "grouped"
            and any(str(t) == "cute:sm90" for t in ls.spec.targets)]


def test_the_catalogue_renders_grouped_kernels_on_cute_sm90():
    assert set(catalogue_cute()) == {"moe_bf16", "moe_up_bias_silu_bf16", "moe_down_router_bf16"}


@pytest.mark.parametrize("name", sorted(CUTE_FORMS))
def test_each_form_checks_clean_and_compiles_for_sm90a_with_the_plans_smem(name, tmp_path, monkeypatch):
    from specgen.compile import load_rendered
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_module

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    ls = load(CUTE_FORMS[name])
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    ((rel, text),) = render_modules(ls, ls.spec.targets).items()
    assert rel == f"cute/{name}.py" and f"def {name}(" in text
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    module = load_rendered(path, f"_specgen_test_cute_grouped_{name}")
    (r,) = compile_module(module, target_info("cute:sm90"), sass=True, fill_cache=False)
    assert not r.error, r
    assert r.compiler_smem == r.plan_smem <= 232448, r  # the design's struct, to the byte
    assert r.sass["UTMALDG"] > 0 and r.sass["HGMMA"] > 0 and r.sass["UTMASTG"] == 0, r.sass
    assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass
    assert r.cpu_seconds < 30, r


def test_the_spec_takes_cute_sm90_beside_cute_sm100_each_design_its_own_module():
    ls = load(spec("both", targets=["cute:sm90", "cute:sm100"], tile={"m": 128, "n": 128, "k": 64}))
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    assert [sorted(render_modules(ls, [t])) for t in ls.spec.targets] == [["cute/both.py"], ["cute/both_sm100.py"]]


def test_a_render_that_skipped_check_refuses_an_m_major_a():
    from specgen.kinds.grouped.designs.cute_sm90.design import DESIGN
    from specgen.resolve import resolve

    ls = load(spec("mmaj", targets=["cute:sm90"], a={"dtype": "bf16", "major": "mn"}, b={"dtype": "bf16", "major": "k"},
                   out={"dtype": "bf16"}, tile={"m": 128, "n": 128, "k": 64}))
    (t,) = ls.spec.targets
    with pytest.raises(ValueError, match="K-major A"):
        DESIGN.render(ls, [t], {str(t): resolve(ls.spec, t)})


def test_the_module_documents_its_schedule_and_epilogue():
    ls = load(CUTE_FORMS["cg_every_op"])
    ((_, text),) = render_modules(ls, ls.spec.targets).items()
    assert "bias: + bias[g] (G, N) bf16, per group and column" in text
    assert "scale: * w[g, n] (G, N) f32, per group and column" in text
    assert "predicated on the group's rows" in text and "two" not in text.split("Kernel:")[1].split("\n")[0]
    compile(text, "cg_every_op.py", "exec")
