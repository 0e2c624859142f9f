"""The CuTe sm90 design without a GPU: what it renders (only sm90; the epilogue chain expanded, dead
branches absent), its SMEM layout, a spec using every epilogue op compiling to spill-free SASS with
the plan's SMEM, and the launcher's guards raising before anything launches."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from kernels import MINIMAL_SPEC, catalogue, load_target_module

from specgen.kinds.gemm.designs.cute_sm90.compile import compile_module
from specgen.kinds.gemm.designs.cute_sm90.design import (
    PREFETCH_REGISTERS,
    cute_config,
    epilogue_tile,
    mma_warpgroups,
    prefetch_vectors,
)
from specgen.kinds.gemm.stages import memory
from specgen.registry import design_for
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

ROOT = Path(__file__).resolve().parents[3]
SM90, SM100 = parse_target("cute:sm90"), parse_target("cute:sm100")
DESIGN = design_for("gemm", "cute:sm90")

EVERY_OP = [
    {"op": "bias", "along": "m", "dtype": "bf16", "name": "bias_m"},
    {"op": "bias", "along": "n", "dtype": "f32", "name": "bias_n"},
    {"op": "scale", "by": "scalar"},
    {"op": "scale", "by": "scalar", "value": 0.5},
    {"op": "scale", "by": "row"},
    {"op": "scale", "by": "col"},
    {"op": "scale", "by": "rowcol"},
    {"op": "activation", "fn": "relu"},
    {"op": "activation", "fn": "gelu"},
    {"op": "activation", "fn": "gelu_tanh"},
    {"op": "activation", "fn": "silu"},
    {"op": "activation", "fn": "sigmoid"},
    {"op": "residual", "dtype": "bf16", "beta": 0.5},
    {"op": "clamp", "min": -4.0, "max": 4.0},
    {"op": "cast", "dtype": "f16"},
]


def loaded(spec: dict):
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    return ls


def render_and_import(spec: dict, tmp_path: Path):
    return load_target_module(spec, "cute:sm90", tmp_path, "_specgen_cute_test_")


def test_modules_serve_sm90_only():
    spec = loaded({**MINIMAL_SPEC, "targets": ["cute:sm90", "cute:sm100"]}).spec
    assert DESIGN.modules(spec, [SM90, SM100]) == {"cute/k.py": [SM90]}
    assert DESIGN.modules(spec, [SM100]) == {}


@pytest.mark.parametrize("name", sorted(n for n, s in catalogue().items() if "cute:sm90" in s["targets"]))
def test_catalogue_memory_is_the_struct(name):
    spec = loaded(catalogue()[name]).spec.for_target(SM90)  # cute:sm90's own config, where the kernel has one
    four = dataclasses.replace(resolve(spec, SM90), ab_stages=4, budget=memory(spec, SM90, 4))
    plan = DESIGN.plan(loaded(catalogue()[name]), [SM90], {str(SM90): four})
    em, en = epilogue_tile(spec)
    t, pingpong = spec.tile, spec.cute.schedule == "pingpong"  # ping-pong: each warpgroup its own subtiles
    expected = (1024 + 1024 + 4 * (t.m * t.k * spec.a.dtype.bytes + t.n * t.k * spec.b.dtype.bytes)
                + -(-2 * em * en * spec.out.dtype.bytes * (2 if pingpong else 1) // 1024) * 1024)
    assert DESIGN.memory(spec, target_info(SM90), 4).total == plan.smem_bytes == expected
    assert plan.threads == 128 * (1 + (2 if pingpong else mma_warpgroups(spec)))  # ping-pong: two tiles at once


def test_the_rendered_module_has_only_the_epilogue_it_needs():
    text = (ROOT / "generated" / "cute" / "gemm_bf16.py").read_text()
    assert "\n        crd = " not in text and "r_bias" not in text and "tanh" not in text  # no epilogue: no gathers
    gelu = (ROOT / "generated" / "cute" / "gemm_bias_gelu_bf16.py").read_text()
    assert "r_bias[ei] = mbias[cutlass.min(n0 + crd[ei][1], N - 1)]" in gelu and "cute.math.tanh" in gelu
    assert "erf" not in gelu and "r_scale_a" not in gelu
    fp8 = (ROOT / "generated" / "cute" / "gemm_fp8_rowwise.py").read_text()
    assert "acc = acc * r_scale_a.load() * r_scale_b.load()" in fp8 and "Float8E4M3FN" in fp8


def test_every_epilogue_op_compiles_spill_free_with_the_plans_smem(tmp_path, monkeypatch):
    """Two warpgroups share the 128x128 tile: on one, every op at once spills (REG001 refuses it; the
    compile grid's probe cprobe_c128_every_op)."""
    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    spec = {**MINIMAL_SPEC, "name": "every_op", "epilogue": EVERY_OP, "targets": ["cute:sm90"],
            "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True}, "cute": {"mma_warpgroups": 2}}
    module, text = render_and_import(spec, tmp_path)
    for op in ("cute.math.erf", "cute.math.tanh", "alpha", "0.5", "r_bias_m", "r_bias_n", "r_row_scale",
               "r_col_scale", "r_scale_a", "r_c", "cutlass.Float16).to(cutlass.Float32)"):
        assert op in text, op
    (r,) = compile_module(module, target_info(SM90), sass=True, fill_cache=False)  # one config: no variants
    assert not r.error, r.error
    assert r.compiler_smem == r.plan_smem
    assert r.sass["HGMMA"] > 0 and r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass


@pytest.mark.parametrize("name, overrides", [
    ("every_op", {"epilogue": EVERY_OP, "tile": {"m": 32, "n": 64, "k": 64}}),
    ("fp8_rowcol", {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"},
                    "tile": {"m": 16, "n": 128, "k": 128}, "epilogue": [{"op": "scale", "by": "rowcol"}]}),
    ("f32_out_mn", {"out": {"dtype": "f32"}, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
                    "tile": {"m": 16, "n": 64, "k": 64}}),
    ("bmm_pingpong_cluster", {"batch": True, "tile": {"m": 64, "n": 128, "k": 64}, "cluster": {"m": 1, "n": 2},
                              "cute": {"swap_ab": True, "schedule": "pingpong"}}),
])
def test_swap_ab_compiles_spill_free_with_the_plans_smem(name, overrides, tmp_path, monkeypatch):
    """`cute.swap_ab`: the kernel computes out^T = B^T A^T (B's (N, K) view is wgmma's A) and stores
    out^T's subtiles M-major; each compiles for sm_90a with TMA loads and stores, wgmma and no spills,
    launching with the plan's SMEM. (Its numerics: tests/gpu/test_cute_gpu.py.)"""
    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    spec = {**MINIMAL_SPEC, "name": f"swapped_{name}", "targets": ["cute:sm90"], "schedule": {"persistent": True},
            "cute": {"swap_ab": True}, **overrides}
    module, text = render_and_import(spec, tmp_path)
    assert module.CONFIG.swap_ab and (module.CONFIG.tile_m, module.CONFIG.tile_n) == (spec["tile"]["n"], spec["tile"]["m"])
    assert "mA, mB, mOut = _nkl(b), _mkl(a), _nkl(out)" in text
    (r,) = compile_module(module, target_info(SM90), sass=True, fill_cache=False)
    assert not r.error, r.error
    assert r.compiler_smem == r.plan_smem
    mma = "QGMMA" if name.startswith("fp8") else "HGMMA"
    assert r.sass["UTMALDG"] > 0 and r.sass["UTMASTG"] > 0 and r.sass[mma] > 0, r.sass
    assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass


@pytest.mark.parametrize(("name", "overrides"), [
    ("bf16_1x1x2", {"tile": {"m": 64, "n": 64, "k": 64}, "schedule": {"split_k": 2}}),
    ("bf16_swapped_2x1x3", {"tile": {"m": 16, "n": 128, "k": 64}, "cute": {"swap_ab": True},
                            "cluster": {"m": 1, "n": 2}, "schedule": {"split_k": 3}}),
    ("fp8_two_warpgroups", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3"}, "tile": {"m": 128, "n": 128, "k": 128},
                            "cute": {"mma_warpgroups": 2}, "schedule": {"split_k": 2},
                            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "gelu_tanh"}]}),
])
def test_split_k_runs_in_the_cluster_and_compiles_spill_free_with_the_plans_smem(name, overrides, tmp_path, monkeypatch):
    """`schedule.split_k` on CuTe sm90: the cluster's third dim carries the splits (launch and pipeline
    layouts), split 0's SMEM holds the others' partials (the plan counts them, to the byte), and the
    kernel compiles for sm_90a spill-free with its DSMEM stores (generic ST.E to the mapped address) and
    cluster-scope fences. (Numerics, bit-identical reruns: tests/gpu/test_cute_gpu.py.)"""
    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    spec = {**MINIMAL_SPEC, "name": f"split_{name}", "targets": ["cute:sm90"], "schedule": {"persistent": True},
            **overrides}
    module, text = render_and_import(spec, tmp_path)
    k = overrides["schedule"]["split_k"]
    cfg = module.CONFIG
    assert cfg.split_k == k and cfg.cluster_size == cfg.cluster_m * cfg.cluster_n * k
    assert "cluster=(cfg.cluster_m, cfg.cluster_n, cfg.split_k)" in text
    assert "cute.make_layout((1, cfg.cluster_m, cfg.cluster_n, cfg.split_k))" in text  # multicast within a split
    assert f"split-K partials {(k - 1) * cfg.tile_m * cfg.tile_n * 4}" in module.METADATA["plan"][90]["smem_breakdown"]
    assert module.METADATA["plan"][90]["split_k"] == k
    assert f"split between the {k} CTAs of a cluster's third dim" in " ".join(module.__doc__.split())
    (r,) = compile_module(module, target_info(SM90), sass=True, fill_cache=False)
    assert not r.error, r.error
    assert r.compiler_smem == r.plan_smem
    assert r.sass["UTMALDG"] > 0 and r.sass["UTMASTG"] > 0 and r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass


def test_modules_without_split_k_carry_none_of_its_code():
    spec = {**MINIMAL_SPEC, "name": "no_split", "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 64}}
    (text,) = render_modules(loaded(spec), [SM90]).values()
    for name in ("split_k", "_store_remote", "partials", "nvvm", "kpart"):
        assert name not in text, name


def test_swap_ab_sweeps_for_decode_slots_only():
    """`specgen tune`'s CuTe space: a slot serving M <= 64 sweeps swap_ab with 16- and 32-row tiles."""
    from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
    from specgen.kinds.gemm.sections import When

    tune_space = DESIGN.tune_space

    spec = loaded({**MINIMAL_SPEC, "targets": ["cute:sm90"]}).spec
    decode, prefill = tune_space(spec, target_info(SM90), When(m_max=16)), tune_space(spec, target_info(SM90))
    assert decode["cute.swap_ab"] == (False, True) and 16 in decode["tile.m"]
    assert "cute.swap_ab" not in prefill and min(prefill["tile.m"]) == 64


def _vectors(n: int, tile_m: int = 128, wgs: int = 1) -> tuple:
    ops = [{"op": "bias", "along": "n", "dtype": "f32", "name": f"v{i}"} for i in range(n)]
    spec = loaded({**MINIMAL_SPEC, "name": "vec", "epilogue": ops, "targets": ["cute:sm90"],
                   "tile": {"m": tile_m, "n": 128, "k": 64}, "cute": {"mma_warpgroups": wgs}}).spec
    return spec, [cute_config(resolve(spec, SM90))]


def test_vector_operands_are_prefetched_while_they_fit_the_register_allowance():
    # 64x32 subtiles over one warpgroup: 16 registers per vector; the allowance is 32
    assert PREFETCH_REGISTERS == 32
    assert prefetch_vectors(*_vectors(2))  # 32 registers: at the allowance
    assert not prefetch_vectors(*_vectors(3))  # 48: over it, gathered at each subtile
    assert not prefetch_vectors(*_vectors(0))  # nothing to prefetch
    assert prefetch_vectors(*_vectors(2, tile_m=128, wgs=2))  # 128x32 subtiles over two warpgroups: 16 each
    gelu = (ROOT / "generated" / "cute" / "gemm_bias_gelu_bf16.py").read_text()
    body = gelu[gelu.index("acc_regs.fill(0.0)"):]
    # the first subtile's bias is gathered before the mainloop, the next one's after the current subtile's ops
    assert body.index("r_bias[ei] = mbias") < body.index("for k in range(k_count)")
    assert "if cutlass.const_expr(si + 1 < subs):" in body
    residual = (ROOT / "generated" / "cute" / "gemm_residual_bf16.py").read_text()  # matrix operands: at the subtile
    assert "si + 1 < subs" not in residual and "# operands read at their subtile" in residual
    # through the thread's view of the subtile, each load predicated on the bounds
    assert "g_c = thr_r2s.partition_S(cute.local_tile(mc[" in residual and "if cute.elem_less(crd[ei], (rows_left, cols_left)):" in residual


def test_guards_raise_before_launching():
    from specgen.compile import load_rendered

    module = load_rendered(ROOT / "generated" / "cute" / "gemm_bias_gelu_bf16.py")
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    b = torch.zeros(64, 64, dtype=torch.bfloat16).t()
    bias = torch.zeros(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gemm_bias_gelu_bf16: argument 'a' must be on a CUDA device, got cpu"):
        module.gemm_bias_gelu_bf16(a, b, bias)
    with pytest.raises(TypeError, match="argument 'a' must be a torch.Tensor, got list"):
        module.gemm_bias_gelu_bf16([[1.0]], b, bias)
    assert module._fake(a, b, bias).shape == (64, 64)


BORDERLINE = [
    {"tile": {"m": 128, "n": 256, "k": 64}},
    {"a": {"dtype": "f16", "major": "mn"}, "b": {"dtype": "f16", "major": "mn"}, "out": {"dtype": "f16"},
     "tile": {"m": 64, "n": 192, "k": 64}},
    {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e5m2"}, "tile": {"m": 128, "n": 128, "k": 128},
     "cluster": {"m": 2, "n": 1}},
]


@pytest.mark.parametrize("case", range(len(BORDERLINE)))
def test_check_passes_exactly_the_pipelines_that_fit(case, tmp_path):
    """At the deepest pipeline check allows, the compiled kernel reserves the plan's SMEM and fits; one
    stage deeper, check refuses (SMEM001) and the compiler's kernel would indeed need more than a block
    may have (the launch would fail)."""
    from specgen.check import check_spec
    from specgen.kinds.gemm.stages import max_ab_stages

    base = {**MINIMAL_SPEC, **BORDERLINE[case], "targets": ["cute:sm90"]}
    deepest = max_ab_stages(loaded(base).spec, SM90)
    assert deepest >= 2
    for stages, fits in ((deepest, True), (deepest + 1, False)):
        spec = {**base, "name": f"edge{case}_{stages}", "pipeline": {"ab_stages": stages}}
        errors = [d.rule for d in check_spec(loaded(spec)) if d.severity == "error"]
        assert errors == ([] if fits else ["SMEM001"]), errors
        module, _ = render_and_import(spec, tmp_path)
        (r,) = compile_module(module, target_info(SM90), fill_cache=False)
        assert not r.error, r.error
        assert r.compiler_smem == r.plan_smem
        assert (r.compiler_smem <= 232448) is fits, (stages, r.compiler_smem)


def test_a_corrupt_cache_entry_is_recompiled_and_replaced(tmp_path, monkeypatch):
    from specgen.compile import load_rendered

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path))
    launcher = load_rendered(ROOT / "generated" / "cute" / "gemm_small_bf16.py")._launcher
    path = launcher.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not an object file")
    with pytest.warns(RuntimeWarning, match="ignoring unreadable CuTe cache entry"):
        fn = launcher.load()
    assert fn is not None and launcher.load() is fn  # loaded once per process
    assert path.stat().st_size > 10_000  # the fresh compile replaced it


@pytest.mark.parametrize(("rule", "change"), [
    ("MAJ001", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": {"m": 128, "n": 128, "k": 128}}),
    ("MMA001", {"tile": {"m": 128, "n": 264, "k": 64}, "cute": {"mma_warpgroups": 2}}),
])
def test_what_check_refuses_the_compiler_refuses_too(rule, change, tmp_path):
    """wgmma majors and shapes: the spec check refuses is one `cute.compile` cannot build either."""
    from specgen.check import check_spec

    spec = {**MINIMAL_SPEC, **change, "name": f"refused_{rule.lower()}", "targets": ["cute:sm90"]}
    assert rule in [d.rule for d in check_spec(loaded(spec)) if d.severity == "error"]
    module, _ = render_and_import(spec, tmp_path)
    (r,) = compile_module(module, target_info(SM90), fill_cache=False)
    assert r.error


def test_variants_are_baked_listed_and_selected_by_integer_compares(tmp_path):
    """Each size-selected variant's config is a Config row of VARIANT_CONFIGS (its own stages and SMEM,
    ping-pong or cooperative), listed in the docstring and METADATA; the launcher picks one with an
    if/elif chain of integer compares before launching, and `specgen compile` compiles every config."""
    spec = {**MINIMAL_SPEC, "name": "sized", "targets": ["cute:sm90"], "tile": {"m": 128, "n": 256, "k": 64},
            "variants": [{"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 64}},
                         {"when": {"n_max": 4096, "k_max": 8192}, "tile": {"m": 128, "n": 128, "k": 64},
                          "cluster": {"m": 2, "n": 1}, "cute": {"schedule": "pingpong"}}]}
    module, text = render_and_import(spec, tmp_path)
    r = resolve(loaded(spec).spec, SM90)
    assert [c.tile_n for c in module.VARIANT_CONFIGS] == [128, 128]
    assert [c.pingpong for c in (module.CONFIG, *module.VARIANT_CONFIGS)] == [False, False, True]
    assert [c.smem_bytes for c in module.VARIANT_CONFIGS] == [v.budget.total for v in r.variants]
    assert [c.ab_stages for c in module.VARIANT_CONFIGS] == [v.ab_stages for v in r.variants]
    assert module.VARIANT_CONFIGS[1].threads == 384 and module.VARIANT_CONFIGS[0].threads == 256
    assert "    if M <= 64:\n        variant = 0\n    elif N <= 4096 and K <= 8192:\n        variant = 1\n" in text
    doc = " ".join(module.__doc__.split())
    assert "0. M <= 64: tile 64x128x64" in doc and "1. N <= 4096 and K <= 8192: tile 128x128x64, cluster 2x1" in doc
    assert "two ping-pong wgmma warpgroups" in doc
    variants = module.METADATA["plan"][90]["variants"]
    assert [v["when"] for v in variants] == [{"M": 64}, {"N": 4096, "K": 8192}] and variants[1]["pingpong"]
    results = compile_module(module, target_info(SM90), sass=True, fill_cache=False)
    assert [x.kernel for x in results] == ["sized", "sized[variant 0]", "sized[variant 1]"]
    for x in results:
        assert not x.error and x.compiler_smem == x.plan_smem, x
        assert x.sass["HGMMA"] > 0 and x.sass["LDL"] == 0 and x.sass["STL"] == 0, x
