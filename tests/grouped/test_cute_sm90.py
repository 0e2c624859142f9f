"""The grouped CuTe sm90 design on the CPU: every form (specgen/kinds/grouped/testing/specs.py CUTE_FORMS) and the
catalogue's cute:sm90 grouped kernels pass check, render, and compile for sm_90a through `cute.compile` over fake
tensors (dynamic M, N, K, G) with exactly the SMEM the plan allocates, TMA loads, wgmma, both stores (a TMA store
of each epilogue subtile inside its group's rows, the predicated vector stores of one a group's end cuts) and no
local-memory spills, every config of a module (the default and the decode variant) compiled on its own; the launcher picks the variant by total rows; each variant's
config checked by every rule, CFG003 taking cute:sm90 variants; the spec takes cute:sm90 beside cute:sm100 (the
CuTe sm100 design's module: tests/grouped/test_cute_sm100.py); a render that skipped check refuses what the kernel
cannot do. fp8: the CUTE_FP8_FORMS check clean and render 8-bit operands with the rowwise scales first in the chain
(the catalogue's moe_fp8_rowwise compiles in tests/backends/cute/test_cute_compile.py), and its entry refuses the fp8
guard cases before the launch."""

from __future__ import annotations

import json
import os

import pytest

from specgen.check import check_all
from specgen.kinds.grouped.testing.guards import FP8_CASES, GroupedGuardTests
from specgen.kinds.grouped.testing.specs import CUTE_FORMS, CUTE_FP8_FORMS, spec
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_paths, load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def catalogue_loaded() -> dict:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return {ls.name: ls for ls in load_paths([root / "specs"]) if ls.spec.kind == "grouped"
            and any(str(t) == "cute:sm90" for t in ls.spec.targets)}


def catalogue_cute() -> list[str]:
    return list(catalogue_loaded())


def render_cute(ls, tmp_path, prefix: str, target: str = "cute:sm90"):
    """The loaded spec's cute:sm90 (or cute:sm100) module, rendered and imported."""
    from specgen.compile import load_rendered

    cute = [t for t in ls.spec.targets if str(t) == target]
    rel = f"cute/{ls.name}{'_sm100' if target == 'cute:sm100' else ''}.py"
    text = render_modules(ls, cute)[rel]
    path = tmp_path / f"{ls.name}_{target.partition(':')[2]}.py"
    path.write_text(text)
    return load_rendered(path, f"{prefix}{ls.name}"), text


def test_the_catalogue_renders_grouped_kernels_on_cute_sm90():
    assert set(catalogue_cute()) == {"moe_bf16", "moe_up_bias_silu_bf16", "moe_down_router_bf16", "moe_fp8_rowwise",
                                     "moe_gate_up_swiglu_bf16", "moe_wgrad_bf16"}


@pytest.mark.parametrize("name", sorted(CUTE_FP8_FORMS))
def test_fp8_forms_check_clean_and_render_8_bit_stages(name):
    """fp8 A and B (e4m3, or e5m2 beside e4m3) render: the module's operand dtypes are the DSL's 8-bit floats, the
    rowwise scales (scale_a (M,), scale_b (G, N)) multiply the f32 accumulator before the rest of the chain, and the
    SMEM plan counts one byte an operand element: (tile.m + tile.n) x tile.k a stage. (The catalogue's
    moe_fp8_rowwise is the fp8 module compiled for sm_90a: tests/backends/cute/test_cute_compile.py, QGMMA.)"""
    ls = load(CUTE_FP8_FORMS[name])
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    ((_, text),) = render_modules(ls, ls.spec.targets).items()
    dt = {"fp8_e4m3": "Float8E4M3FN", "fp8_e5m2": "Float8E5M2"}
    assert f"A_DTYPE, B_DTYPE, OUT_DTYPE = cutlass.{dt[ls.spec.a.dtype.value]}, cutlass.{dt[ls.spec.b.dtype.value]}," in text
    assert "scale: * scale_a[m] * scale_b[g, n], per row and per group and column" in text
    body = text.split("# 0. scale: * scale_a[m] * scale_b[g, n], per row and per group and column (rowwise fp8 scales)")[1]
    assert body.lstrip().startswith("acc = acc * r_scale_a.load() * r_scale_b.load()")  # the chain's first op
    (t,) = ls.spec.targets
    tl = ls.spec.tile
    assert resolve(ls.spec, t).budget.ab_stage_bytes == (tl.m + tl.n) * tl.k
    compile(text, f"{name}.py", "exec")


@pytest.mark.parametrize("name", sorted(CUTE_FORMS))
def test_each_form_checks_clean_and_compiles_for_sm90a_with_the_plans_smem(name, tmp_path, monkeypatch):
    from specgen.compile import load_rendered
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS, compile_config

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    ls = load(CUTE_FORMS[name])
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    ((rel, text),) = render_modules(ls, ls.spec.targets).items()
    assert rel == f"cute/{name}.py" and f"def {name}(" in text
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    module = load_rendered(path, f"_specgen_test_cute_grouped_{name}")
    plan = module.METADATA["plan"][90]
    configs = [(None, module.CONFIG, plan["smem_bytes"])] + [
        (i, c, v["smem_bytes"]) for i, (c, v) in enumerate(zip(module.VARIANT_CONFIGS, plan["variants"], strict=True))]
    assert len(configs) == 1 + len(CUTE_FORMS[name].get("variants", []))
    for variant, cfg, smem in configs:  # the default config, then each variant's
        r = compile_config(module._launcher, name, variant, target_info("cute:sm90"), smem, True, False,
                           ops=(*SASS_OPS, "STG"))
        assert not r.error, r
        assert r.compiler_smem == r.plan_smem <= 232448, r  # the design's struct, to the byte
        assert r.sass["UTMALDG"] > 0 and r.sass["HGMMA"] > 0, r.sass
        # one TMA store a subtile (the subtile loop is unrolled), and the predicated 16-byte stores beside them
        assert r.sass["UTMASTG"] == cfg.tile_m // cfg.epi_m * (cfg.tile_n // cfg.epi_n) and r.sass["STG"] > 0, r.sass
        assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass


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
    # the epilogue chain runs once a subtile, then the store branches: TMA inside the group's rows, else predicated
    body = text.split("r_out.store(acc.to(OUT_DTYPE))")[1]
    assert text.count("r_out.store(acc.to(OUT_DTYPE))") == 1
    assert body.index("if rows_left >= cfg.epi_m or row_end == M:") < body.index("cute.copy(tma_out, bSG_s[(None, buf)]")
    assert body.index("cute.copy(tma_out,") < body.index("else:  # the group ends inside the subtile") < \
        body.index("store_pipe.producer_commit()  # bulk group") < body.index("if rc[0] < rows_left:")
    assert body.index("stored += subs") < body.index("store_pipe.producer_tail()")
    compile(text, "cg_every_op.py", "exec")


DECODE = {"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 1}}


@pytest.mark.parametrize("name", ["moe_bf16", "moe_up_bias_silu_bf16", "moe_down_router_bf16"])
def test_catalogue_modules_carry_a_decode_variant_with_its_own_plan(name, tmp_path):
    """The catalogue's cute:sm90 kernels carry a decode variant (M <= 64: a 64-row tile on one warpgroup): a Config
    row of its own (its stages and SMEM as check resolved them), listed in the docstring and METADATA. Each config's
    compile for sm_90a (exactly the SMEM its plan allocates, TMA loads, wgmma, no spills) is
    tests/backends/cute/test_cute_compile.py's, which compiles every catalogue config through `specgen compile`."""
    ls = catalogue_loaded()[name]
    module, text = render_cute(ls, tmp_path, "_specgen_test_cute_catalogue_")
    (t,) = [t for t in ls.spec.targets if str(t) == "cute:sm90"]
    r = resolve(ls.spec, t)
    (v,) = r.variants
    (cfg,) = module.VARIANT_CONFIGS
    assert (cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.mma_warpgroups) == (64, 128, 128, 1)
    assert (cfg.ab_stages, cfg.smem_bytes) == (v.ab_stages, v.budget.total) and cfg.threads == 256
    assert (module.CONFIG.tile_m, module.CONFIG.mma_warpgroups, module.CONFIG.smem_bytes) == (128, 2, r.budget.total)
    assert "    if M <= 64:\n        variant = 0\n    else:\n        variant = None\n" in text
    assert "0. M <= 64: tile 64x128x128" in " ".join(module.__doc__.split())
    (meta,) = module.METADATA["plan"][90]["variants"]
    assert meta["when"] == {"M": 64} and meta["tile"] == [64, 128, 128] and meta["smem_bytes"] == v.budget.total


@pytest.mark.parametrize("target", ["cute:sm90", "cute:sm100"])
def test_the_launcher_picks_the_decode_variant_by_total_rows(target, tmp_path, monkeypatch):
    """The launcher compares M, every group's rows (a's row count: the group sizes stay on the device, so no sync),
    with the variant's bound after the guards ran, and launches that config's compiled function: M <= 64 the
    decode variant whatever the groups hold, M = 65 the default. (The compiled function is replaced by a recorder:
    the CPU box has no GPU; tests/gpu/test_grouped_cute_gpu.py runs both sm90 configs; no Blackwell GPU runs the
    sm100 ones.)"""
    import torch

    decode = DECODE if target == "cute:sm90" else {k: v for k, v in DECODE.items() if k != "cute"}  # 1-CTA tcgen05
    ls = load(spec("pick", targets=[target], tile={"m": 128, "n": 256, "k": 64}, variants=[decode]))
    module, _ = render_cute(ls, tmp_path, f"_specgen_test_cute_pick_{target[-5:]}_", target)
    launched = []

    def entry(device, variant, cfg):
        def fn(*args):
            launched.append((variant, cfg, args[0].shape[0]))
        return fn, 132

    monkeypatch.setattr(module._launcher, "entry", entry)
    k, n = 64, 128
    b = torch.zeros(4, n, k, dtype=torch.float16).transpose(-2, -1)
    for rows, sizes in ((64, [64, 0, 0, 0]), (64, [2, 0, 1, 3]), (1, [1, 0, 0, 0]), (65, [65, 0, 0, 0]), (300, [2, 0, 1, 3])):
        a = torch.zeros(rows, k, dtype=torch.float16)
        offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)
        module.pick(a, b, offs)
    assert [(v, rows) for v, _, rows in launched] == [(0, 64), (0, 64), (0, 1), (None, 65), (None, 300)]
    assert [cfg for v, cfg, _ in launched] == [module.VARIANT_CONFIGS[0]] * 3 + [module.CONFIG] * 2


def test_cfg003_takes_variants_on_both_cute_designs_and_mosaic_gpu():
    """A size-selected variant on cute:sm90, cute:sm100 (session 24) and Mosaic GPU is rendered: no CFG003 (the TPU
    design's refusal: tests/grouped/test_kind.py)."""
    ls = load(spec("cfg3", a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "k"}, out={"dtype": "bf16"},
                   targets=["cute:sm90", "pallas:gpu_sm90", "cute:sm100"], tile={"m": 128, "n": 256, "k": 64},
                   variants=[{"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 64}}]))
    assert [d for d in check_all([ls]) if d.severity == "error"] == []


@pytest.mark.parametrize(("variant", "rule", "words"), [
    ({"tile": {"m": 64, "n": 256, "k": 64}, "pipeline": {"ab_stages": 6}}, "SMEM001", "6"),
    ({"tile": {"m": 64, "n": 128, "k": 64}, "cluster": {"m": 2, "n": 1}}, "GRP302", "cluster = 2x1"),
    ({"tile": {"m": 64, "n": 128, "k": 64}, "cute": {"swap_ab": True}}, "GRP302", "swap_ab"),
    ({"tile": {"m": 32, "n": 128, "k": 64}}, "MMA001", "32"),
])
def test_each_variant_is_checked_by_every_rule(variant, rule, words):
    """A variant is its own compiled kernel: a config the kernel cannot run is refused at the variant (its bounds
    named), while the default config passes."""
    ls = load(spec("vrule", targets=["cute:sm90"], tile={"m": 128, "n": 256, "k": 64},
                   variants=[{"when": {"m_max": 64}, **variant}]))
    found = [d for d in check_all([ls]) if d.severity == "error"]
    assert found and all(d.variant == "variant 0 (M <= 64)" for d in found), found
    assert any(d.rule == rule and words in d.message for d in found), found


def test_a_gated_epilogue_renders_on_cute_sm90_with_a_k_major_b_only():
    """A gated epilogue is rendered here (no EPI001): B (G, K, 2N) documented as the spec lays it out, a gate and an
    up tile a stage (the SMEM plan counts both: the compile tests compare it with the compiler's), two accumulators
    (REG001 counts both); an N-major B is refused (EPI003, the CuTe kernels' gated limits), and a render that skipped
    check refuses it too."""
    from specgen.kinds.grouped.designs.cute_sm90.design import DESIGN

    for name, words in (("cg_gated_halves", "gate columns [0, N), up columns [N, 2N)"),
                        ("cg_gated_il_f16", "column 2j gate j, 2j + 1 up j")):
        ls = load(CUTE_FORMS[name])
        assert not [d for d in check_all([ls]) if d.severity == "error"]
        ((_, text),) = render_modules(ls, ls.spec.targets).items()
        assert f"(G, K, 2N) {ls.spec.b.dtype}, K-major: one weight per group, {words}" in text
        assert "sU: cute.struct.Align" in text and "acc = acc * r_up.load()  # act(gate) * up" in text
        (t,) = ls.spec.targets
        r = resolve(ls.spec, t)
        t_ = ls.spec.tile
        assert r.budget.ab_stage_bytes == (t_.m * t_.k + 2 * t_.n * t_.k) * 2
    nmajor = {**CUTE_FORMS["cg_gated_halves"], "name": "gated_nmaj", "b": {"dtype": "bf16", "major": "mn"}}
    ls = load(nmajor)
    found = [d for d in check_all([ls]) if d.severity == "error"]
    assert [d.rule for d in found] == ["EPI003"] and 'b.major = "mn"' in found[0].message, found
    (t,) = ls.spec.targets
    with pytest.raises(ValueError, match="K-major B"):
        DESIGN.render(ls, [t], {str(t): resolve(ls.spec, t)})


def test_a_gated_tile_counts_both_accumulators_in_reg001():
    """Gate and up accumulators of a 128x128 tile on one warpgroup (128 registers each) do not fit the 232 a
    consumer thread gets: REG001 refuses it (it spilled 2 KB when compiled, nvidia-cutlass-dsl 4.8.1); on two
    warpgroups it passes."""
    base = CUTE_FORMS["cg_gated_halves"]
    one = load({**base, "name": "gated_one_wg", "cute": {"mma_warpgroups": 1}})
    found = [d for d in check_all([one]) if d.rule == "REG001"]
    assert found and found[0].severity == "error" and "256 accumulator" in found[0].message, found
    assert not [d for d in check_all([load(base)]) if d.rule == "REG001" and d.severity == "error"]


@pytest.fixture(scope="module")
def sm90_modules(tmp_path_factory: pytest.TempPathFactory):
    from kernels import load_target_module

    folder = tmp_path_factory.mktemp("cute90_grouped_guards")
    cache: dict = {}

    def get(s: dict):
        if s["name"] not in cache:
            cache[s["name"]] = load_target_module(s, "cute:sm90", folder, "_specgen_cute90_grouped_guard_")[0]
        return cache[s["name"]]

    return get


class TestCuteSm90GroupedFp8Guards(GroupedGuardTests):
    """The fp8 guard cases (an operand of another dtype, an N-major B, scale_a and scale_b of the wrong dtype, shape
    or device) on this design's e4m3 rowwise entry, refused before the launch (CPU tensors: under TRITON_INTERPRET=1
    the guards take the CPU as the device, 'meta' stands for another)."""

    SPEC = CUTE_FP8_FORMS["cg_fp8_rowcol"]
    CASES = FP8_CASES

    @pytest.fixture
    def module(self, sm90_modules):
        return sm90_modules
