"""The gated up-projection's backward on the CuTe sm90 design (training after a gated op, then at most a bias; plan:
specgen/kinds/gemm/designs/cute_sm90/training.py, templates/gemm/cute/training.jinja) on this CPU machine. No GPU runs
here (numerics: tests/gpu/test_training_cute_gated_gpu.py), so:

- check accepts it (TRN001 both sides: tests/backends/cute/rule_cases_sm90.py) and the plan keeps the gated op's
  layout and fn, dgrad and wgrad as the plain GEMMs over B's 2N columns in the operands' stored layouts;
- every new role kernel compiles for sm_90a in one module-scoped fixture (the forward is test_cute_gated.py's): a
  halves SwiGLU with a bias in preact (forward_pre, dgrad, wgrad, the gated columns kernel, its loads and stores
  16-byte vectors, and the bands' sum) and an interleaved GeGLU-tanh with a bias in recompute (recompute, dOut's
  column sum), each with the plan's SMEM to the byte, the gate's and up's wgmma chains where the role computes pre
  (one chain on dgrad and wgrad: no up tiles), TMA loads, out's TMA store beside pre's gate and up subtiles' and no
  element store (forward_pre, halves: three SMEM buffers a subtile, the plan's epilogue stages three times the
  forward's), no TMA store at all where G is stored element-wise (recompute: the tiles' view is dOut, never
  written), and no local-memory spills;
- a render that skipped check refuses what TRN001 refuses."""

from __future__ import annotations

import json

import pytest
from backends.cute.training_compiles import compile_training
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target

TARGET = parse_target("cute:sm90")
# name: (fn, layout, save, bias)
FORMS = {"cgt_halves_pre": ("silu", "halves", "preact", True),
         "cgt_il_rec": ("gelu_tanh", "interleaved", "recompute", True)}
# what each form compiles: the backward GEMMs new to a gated module, then its columns kernels
ROLES = {"cgt_halves_pre": ("forward_pre", "dgrad", "wgrad"), "cgt_il_rec": ("recompute",)}
COLS = {"cgt_halves_pre": ("grad_cols_gated", "grad_cols_bands"), "cgt_il_rec": ("grad_cols_sum",)}


def spec(name: str, **more) -> dict:
    fn, layout, save, bias = FORMS[name]
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 64},
            "cute": {"mma_warpgroups": 2}, "schedule": {"persistent": True},
            "epilogue": [{"op": "gated", "fn": fn, "layout": layout}] + ([{"op": "bias"}] if bias else []),
            "training": {"save": save}, **more}


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """{name: (module text, {role: CompileResult})}: each form rendered, imported and its new kernels compiled."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS

    folder = tmp_path_factory.mktemp("cute_gated_train")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECGEN_CUTE_CACHE", str(folder / "cache"))
        mp.setenv("CUTE_DSL_ARCH", "sm_90a")
        for name in FORMS:
            module, text = load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_gated_train_")
            results = compile_training(module, name, ROLES[name], dict.fromkeys(COLS[name], module._cols_launcher),
                                       (*SASS_OPS, "LDG", "STG"))
            out[name] = (text, results, module)
    return out


@pytest.mark.parametrize("name", list(FORMS))
def test_check_accepts_it_and_the_plan_runs_the_plain_gemms_over_2n(name: str) -> None:
    fn, layout, save, bias = FORMS[name]
    ls = load(spec(name))
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    r = resolve(ls.spec, TARGET)
    t = DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).training
    assert (t.gated, t.act, t.bias) == (layout, fn, "bias")
    pre_role = "forward_pre" if save == "preact" else "recompute"
    assert list(t.gemms) == [pre_role, "dgrad", "wgrad"] and t.kernels[-1] == "grad_cols"
    # dA = G (M, 2N) @ B^T; dB^T (2N, K) = G^T @ A: the (2N, K) weight's own layout
    g = t.gemms
    assert (g["dgrad"].x, g["dgrad"].y, g["dgrad"].transposed) == ("g", "b.t()", False)
    assert (g["wgrad"].x, g["wgrad"].y, g["wgrad"].transposed) == ("g.t()", "a", True)
    by_role = {c.companion: c for c in r.companions}
    for role, gemm in g.items():  # the companions SMEM001 rules: pre's with the up tiles, dgrad's and wgrad's without
        assert gemm.config.smem_bytes == by_role[role].budget.total, role
    # the pre GEMM's companion carries its kernel's epilogue: forward_pre the forward's [gated, bias]; recompute the
    # gated op and dOut (read as a residual is; G reads no bias)
    assert [op.op for op in by_role[pre_role].spec.epilogue] == (["gated", "bias"] if pre_role == "forward_pre"
                                                                 else ["gated", "residual"])
    # forward_pre stores out's, pre's gate's and pre's up's subtiles through SMEM (halves): three buffers for each of
    # the forward's epilogue stages (2); recompute stores G element-wise, out not at all: the forward's stages
    assert g[pre_role].config.epi_stages == (3 * 2 if pre_role == "forward_pre" else 2), g[pre_role].config
    assert by_role["dgrad"].spec.epilogue == [] and by_role["wgrad"].spec.epilogue == []


def test_every_new_kernel_compiles_with_the_plans_smem_and_no_spills(compiled) -> None:
    for name, (_, results, module) in compiled.items():
        assert set(results) == {*ROLES[name], *COLS[name]}, name
        for role, r in results.items():
            assert not r.error, (name, role, r)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, role, r.sass)
            if role == "grad_cols_gated":  # 16-byte vectors: a load of dOut, the gate's and the up's per row (4 rows a
                # batch, then the band's last rows one at a time), a store of dgate's and dup's, then the f32 sums (2)
                assert (r.sass["LDG"], r.sass["STG"]) == (3 * 5, 2 * 5 + 2), (name, role, r.sass)
            if role.startswith("grad_cols"):
                continue
            cfg = module.TRAIN_CONFIGS[role]
            chains = 2 if role in ("forward_pre", "recompute") else 1  # the gate's and up's wgmma over one A tile
            atoms = cfg.tile_m // (64 * cfg.mma_warpgroups)
            assert r.sass["HGMMA"] == chains * (cfg.tile_k // 16) * atoms, (name, role, r.sass)
            assert r.sass["UTMALDG"] > 0, (name, role, r.sass)
            # recompute stores G element-wise and nothing by TMA (its tiles' view is dOut); the rest store out by TMA,
            # forward_pre (halves) the gate's and up's subtiles of pre beside each of out's, no element store
            subs = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
            assert r.sass["UTMASTG"] == {"recompute": 0, "forward_pre": 3 * subs}.get(role, subs), (name, role, r.sass)
            assert (r.sass["STG"] > 0) is (role == "recompute"), (name, role, r.sass)


def test_the_module_views_pre_and_g_as_gate_and_up_pairs_and_runs_dgrad_and_wgrad_ungated(compiled) -> None:
    for name, (text, _, module) in compiled.items():
        layout = FORMS[name][1]
        strides = "(sr, sc, (n if half is None else half) * sc, 0)" if layout == "halves" else "(sr, 2 * sc, sc, 0)"
        assert f"cute.make_layout((rows, n, 2, 1), stride={strides})" in text, name
        assert "    if cutlass.const_expr(cfg.gated):\n        sU = storage.sU.get_tensor(" in text
        assert [module.TRAIN_CONFIGS[r].gated for r in module.TRAIN_CONFIGS] == [True, False, False]
        assert "M, K, N = _tr.backward_sizes(" in text and "gated=True)" in text
        assert "g = _tr.tma_empty(M, 2 * N, torch.bfloat16, a.device)" in text
        # the JAX entry is the gated backward's custom_vjp (specgen/runtime/cute_jax_train.py), the layout passed on
        assert 'return _jax_differentiable()(' in text and f'GRAD_COLS_MIN_ROWS, "{layout}"))' in text


@pytest.mark.parametrize(("changes", "says"), [
    ({"out": {"dtype": "f32"}}, "takes f16 or bf16 operands with an output of their dtype"),
    ({"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"}, "out": {"dtype": "bf16"}}, "out.dtype = bf16"),
])
def test_a_render_that_skipped_check_refuses_what_trn001_refuses(changes: dict, says: str) -> None:
    ls = load(spec("cgt_halves_pre", **changes))
    assert "TRN001" in {d.rule for d in check_all([ls]) if d.severity == "error"}
    with pytest.raises(ValueError, match=f"{says}.*TRN001"):
        DESIGN.plan(ls, [TARGET], {"cute:sm90": resolve(ls.spec, TARGET)})
