"""Per-target configs and variants on the CuTe sm90 and Pallas TPU designs: each plans from its target's
effective spec (a per_target override reaches the rendered module and its memory and check figures),
and variants on a target whose design renders one config per module are refused (CFG003), not dropped."""

from __future__ import annotations

import json

from kernels import MINIMAL_SPEC

from specgen.check import check_specs
from specgen.registry import design_for, rendering
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

CUTE, TRITON = parse_target("cute:sm90"), parse_target("triton:sm90")
V5E, V6E = parse_target("pallas:tpu_v5e"), parse_target("pallas:tpu_v6e")


def text_of(spec: dict) -> str:
    return json.dumps({"kernels": [spec]}, indent=1)


def load(spec: dict):
    (ls,) = load_text(text_of(spec), f"<test:{spec['name']}>", ".json")
    return ls


def errors(ls, rule: str) -> list:
    return [d for d in check_specs([ls]).diagnostics if d.rule == rule and d.severity == "error"]


def line_of(spec: dict, needle: str, after: int = 0) -> int:
    return next(i for i, text in enumerate(text_of(spec).splitlines(), 1) if needle in text and i > after)


CUTE_SPEC = {**MINIMAL_SPEC, "name": "pt_cute", "tile": {"m": 128, "n": 256, "k": 64},
             "schedule": {"persistent": True}, "targets": ["triton:sm90", "cute:sm90"],
             "per_target": {"cute:sm90": {"tile": {"m": 128, "n": 128, "k": 64}, "cluster": {"m": 2},
                                          "pipeline": {"ab_stages": 3},
                                          "schedule": {"persistent": False, "raster": "along_n"},
                                          "cute": {"mma_warpgroups": 1}}}}


def test_a_cute_per_target_override_reaches_the_module_and_its_figures() -> None:
    ls = load(CUTE_SPEC)
    report = check_specs([ls])
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics
    r = report.resolved[(ls.name, "cute:sm90")]
    design = design_for("gemm", "cute:sm90")
    effective = ls.spec.for_target(CUTE)
    # memory and check figures come from the override: 3 stages of 128x128x64 (not the kernel's 128x256)
    assert r.ab_stages == 3 and r.spec.tile.n == 128
    assert r.budget.total == design.memory(effective, target_info(CUTE), 3).total
    assert r.budget.total != design.memory(ls.spec, target_info(CUTE), 3).total
    plan = design.plan(ls, [CUTE], {str(CUTE): r})
    assert (plan.tile_m, plan.tile_n, plan.tile_k, plan.cluster_m, plan.ab_stages) == (128, 128, 64, 2, 3)
    assert plan.smem_bytes == r.budget.total and plan.mma_warpgroups == 1 and plan.threads == 256
    (text,) = render_modules(ls, [CUTE]).values()
    for line in ("CONFIG = Config(tile_m=128, tile_n=128, tile_k=64, cluster_m=2, cluster_n=1, ab_stages=3,",
                 "mma_warpgroups=1, pingpong=False,", "group_rows=False, persistent=False,",
                 f"smem_bytes={r.budget.total})", f"'smem_bytes': {r.budget.total}"):
        assert line in text, line
    assert "tile 128x128x64, cluster 2x1, 3 TMA stages" in text  # the docstring too
    assert "'per_target'" in text  # SPEC is the file's spec, tables included
    # the Triton module of the same spec keeps the kernel's tile
    (triton,) = render_modules(ls, [TRITON]).values()
    assert "BLOCK_N = 256" in triton or "BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64" in triton


def test_a_cute_override_that_does_not_fit_is_reported_at_its_line() -> None:
    spec = json.loads(json.dumps(CUTE_SPEC))
    spec["per_target"]["cute:sm90"]["tile"] = {"m": 96, "n": 128, "k": 64}  # not a multiple of 64 x 1 warpgroup
    ls = load(spec)
    bad = [d for d in check_specs([ls]).diagnostics if d.severity == "error" and d.target == "cute:sm90"]
    assert [d.rule for d in bad] == ["MMA001", "CUTE001", "CUTE002"] and all("96" in d.message for d in bad)
    assert bad[0].line == bad[1].line == line_of(spec, '"m": 96')  # the overriding key
    assert bad[2].line == line_of(spec, '"m": 96') - 1  # the overriding tile (a rule on the whole tile)
    assert not [d for d in check_specs([ls]).diagnostics if d.severity == "error" and d.target == "triton:sm90"]


PALLAS_SPEC = {**MINIMAL_SPEC, "name": "pt_tpu", "tile": {"m": 128, "n": 128, "k": 128},
               "targets": ["triton:sm90", "pallas:tpu_v5e", "pallas:tpu_v6e"],
               "per_target": {key: {"tile": {"m": 256, "n": 512, "k": 256}, "pipeline": {"ab_stages": 1},
                                    "pallas": {"vmem_limit_bytes": 16 << 20}}
                              for key in ("pallas:tpu_v5e", "pallas:tpu_v6e")}}


def test_a_pallas_per_target_override_reaches_the_module_and_its_figures() -> None:
    ls = load(PALLAS_SPEC)
    report = check_specs([ls])
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics
    design = design_for("gemm", "pallas:tpu_v5e")
    r = report.resolved[(ls.name, "pallas:tpu_v5e")]
    effective = ls.spec.for_target(V5E)
    assert r.ab_stages == 1 and r.budget.total == design.memory(effective, target_info(V5E), 1).total
    assert r.budget.total > design.memory(ls.spec, target_info(V5E), 2).total  # larger blocks than the kernel's
    plan = design.plan(ls, [V5E, V6E], {str(t): report.resolved[(ls.name, str(t))] for t in (V5E, V6E)})
    assert (plan.tile_m, plan.tile_n, plan.tile_k, plan.ab_stages) == (256, 512, 256, 1)
    assert plan.vmem_bytes == r.budget.total and plan.vmem_limit_bytes == 16 << 20
    (text,) = render_modules(ls, [V5E, V6E]).values()
    for line in ("BLOCK_M, BLOCK_N, BLOCK_K = 256, 512, 256", "AB_BUFFERS = 1", f"VMEM_LIMIT_BYTES = {16 << 20}",
                 f"# VMEM the blocks need: {r.budget.total} B"):
        assert line in text, line
    (triton,) = render_modules(ls, [TRITON]).values()
    assert "128, 128, 128" in triton or "BLOCK_K = 128" in triton


def test_tpu_targets_of_one_pallas_module_share_its_blocks_cfg001() -> None:
    spec = json.loads(json.dumps(PALLAS_SPEC))
    spec["per_target"]["pallas:tpu_v6e"]["tile"] = {"m": 256, "n": 256, "k": 256}
    ls = load(spec)
    (d,) = errors(ls, "CFG001")
    assert d.target == "pallas:tpu_v6e" and "pallas/pt_tpu.py" in d.message and "tile" in d.message
    assert d.line == line_of(spec, '"tile"', after=line_of(spec, '"pallas:tpu_v6e": {'))  # v6e's override
    spec["per_target"]["pallas:tpu_v6e"]["tile"] = {"m": 256, "n": 512, "k": 256}
    spec["per_target"]["pallas:tpu_v6e"]["pipeline"] = {"ab_stages": 2}
    (d,) = errors(load(spec), "CFG001")
    assert "pipeline.ab_stages" in d.message
    del spec["per_target"]["pallas:tpu_v6e"]  # the kernel's own config on v6e: blocks differ from v5e's
    assert [d.target for d in errors(load(spec), "CFG001")] == ["pallas:tpu_v6e"]
    spec["per_target"]["pallas:tpu_v6e"] = spec["per_target"]["pallas:tpu_v5e"]
    assert not errors(load(spec), "CFG001")


VARIANTS = [{"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 128}}]
# the designs that render size-selected variants, as CFG003 lists them (asked: a new design needs no edit)
_NAMES = [d.variants_label or d.name for d in rendering("gemm") if d.renders_variants or d.variants_label]
VARIANT_DESIGNS = ", ".join(_NAMES[:-1]) + " and " + _NAMES[-1]
BASE = {**MINIMAL_SPEC, "name": "v", "tile": {"m": 128, "n": 128, "k": 128}}


def test_variants_on_a_tpu_target_are_refused_cfg003() -> None:
    for target, rel in (("pallas:tpu_v5e", "pallas/v.py"),):
        spec = {**BASE, "targets": ["triton:sm90", target], "variants": VARIANTS}
        ls = load(spec)
        (d,) = errors(ls, "CFG003")
        assert d.target == target and rel in d.message and "M <= 64" in d.message
        assert f"rendered by the {VARIANT_DESIGNS} designs only" in d.message
        assert d.line == line_of(spec, '"variants"')
        # the same variants listed for that target alone point at its per_target table
        spec = {**BASE, "targets": ["triton:sm90", target],
                "per_target": {target: {"variants": VARIANTS}}}
        ls = load(spec)
        (d,) = errors(ls, "CFG003")
        assert d.line == line_of(spec, '"variants"') and d.line > line_of(spec, '"per_target"')


def test_variants_on_a_cute_sm90_target_are_rendered_not_refused() -> None:
    """The CuTe sm90 design renders size-selected variants (kinds/gemm/designs/cute_sm90/design.py): no CFG003, and
    the module carries each variant's config and the launcher's integer compares."""
    spec = {**BASE, "targets": ["triton:sm90", "cute:sm90"], "variants": VARIANTS}
    ls = load(spec)
    assert not errors(ls, "CFG003")
    (text,) = [t for rel, t in render_modules(ls, [parse_target("cute:sm90")]).items() if rel == "cute/v.py"]
    assert "    if M <= 64:\n        variant = 0\n    else:\n        variant = None\n" in text
    assert "VARIANT_CONFIGS = (\n    # 0: M <= 64;" in text


def test_variants_on_triton_only_or_on_checked_only_targets_pass() -> None:
    # the kernel's variants serve the Triton target; the CuTe and TPU targets say they take none
    spec = {**BASE, "targets": ["triton:sm90", "cute:sm90", "pallas:tpu_v5e", "cute:sm100"],
            "variants": VARIANTS, "per_target": {"cute:sm90": {"variants": []}, "pallas:tpu_v5e": {"variants": []}}}
    ls = load(spec)
    report = check_specs([ls])
    assert not [d for d in report.diagnostics if d.severity == "error"], report.diagnostics
    # cute:sm100 renders size-selected variants (the CuTe sm100 design): its variant is kept
    assert len(report.resolved[(ls.name, "cute:sm100")].variants) == 1
    assert len(report.resolved[(ls.name, "triton:sm90")].variants) == 1
    assert not report.resolved[(ls.name, "cute:sm90")].variants
    (triton,) = render_modules(ls, [TRITON]).values()
    assert "M <= 64" in triton
