"""The CuTe designs' gated epilogue (SwiGLU, GeGLU) on this CPU machine: the dense sm90 design and both sm100 designs
(dense and grouped; the grouped sm90 design's forms are tests/grouped/test_cute_sm90.py's). No GPU runs here, so:

- every form (tests/backends/cute/gated_forms.py: the catalogue's mlp_up_swiglu_bf16 and moe_gate_up_swiglu_bf16 on
  the CuTe targets, and forms of both layouts, SiLU / GELU / GELU-tanh, ping-pong, a cluster, a batch) checks clean,
  renders B as (K, 2N) and compiles for sm_90a / sm_100a with exactly the plan's SMEM (and TMEM), two MMA chains over
  one A tile (HGMMA / UTCHMMA twice an ungated tile's count), TMA loads, and no local-memory spills; each arch's
  forms compile once, in one module-scoped fixture read by one test;
- a render that skipped check refuses what EPI003 refuses;
- the JAX entry traces a gated call to one custom call over B's padded gate and up halves, and the padding keeps
  each half's columns where the kernel reads them;
- the C export reads B as (K, 2N); the torch.compile fake gives (M, N). (The launcher's guards need CUDA tensors:
  tests/gpu/test_gated_cute_gpu.py.)

The dense sm90 forms' numerics run on the GPU: tests/gpu/test_gated_cute_gpu.py. The sm100 designs are compiled
only: no Blackwell GPU has run them."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backends.cute.gated_forms import dense_sm90, sm100
from kernels import load_target_module

from specgen.check import check_all
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import target_info

SMEM_PER_BLOCK = 232448


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def compile_forms(forms: dict[str, dict], target: str, folder: Path, monkeypatch) -> dict[str, tuple]:
    """Each form checked, rendered, imported and compiled (every config): {name: (spec, module text, results)}."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_module as sm90
    from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module as sm100_

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(folder / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a" if target == "cute:sm90" else "sm_100a")
    out = {}
    for name, s in forms.items():
        ls = load(s)
        assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == [], name
        module, text = load_target_module(s, target, folder, "_specgen_test_cute_gated_")
        hook = sm90 if target == "cute:sm90" else sm100_
        out[name] = (ls.spec, text, hook(module, target_info(target), sass=True, fill_cache=False), module)
    return out


@pytest.fixture(scope="module")
def sm90_compiled(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        yield compile_forms(dense_sm90(), "cute:sm90", tmp_path_factory.mktemp("gated90"), mp)


@pytest.fixture(scope="module")
def sm100_compiled(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        yield compile_forms(sm100(), "cute:sm100", tmp_path_factory.mktemp("gated100"), mp)


def configs(spec, module) -> list:
    """The spec's tile per compiled config: the default's, then each variant's (a variant's spec overrides)."""
    (t,) = spec.targets
    r = resolve(spec, t)
    return [r.spec, *(v.spec for v in r.variants)]


def test_dense_sm90_gated_forms_compile_two_wgmma_chains_with_the_plans_smem(sm90_compiled):
    """Every dense cute:sm90 form: B documented as (K, 2N) with its layout, the up tiles' SMEM buffer and the gated
    op in the epilogue; each config compiled with the plan's SMEM to the byte, TMA loads and stores, and twice an
    ungated tile's wgmma (the gate's and the up's chain over one A tile: 2 x tile.k / 16 x the 64-row atoms a
    warpgroup stacks), spill-free."""
    for name, (spec, text, results, module) in sm90_compiled.items():
        op = spec.epilogue[0]
        words = "gate columns [0, N), up columns [N, 2N)" if op.layout == "halves" else "column 2j gate j, 2j + 1 up j"
        assert f"{'(batch, K, 2N)' if spec.batch else '(K, 2N)'} {spec.b.dtype}, k-major: {words}" in text, name
        assert "sU: cute.struct.Align" in text and "acc = acc * r_up.load()  # act(gate) * up" in text
        assert "_gated_view(b, out.shape[-1])" in text and "matrix(B_DTYPE, K, N2, major_rows=True)" in text
        assert len(results) == 1 + len(module.VARIANT_CONFIGS)
        for r, cfg in zip(results, configs(spec, module), strict=True):
            assert not r.error, (name, r)
            assert r.compiler_smem == r.plan_smem <= SMEM_PER_BLOCK, (name, r)
            wgs = 1 if cfg.cute.schedule == "pingpong" else (cfg.cute.mma_warpgroups or 1)
            atoms = cfg.tile.m // (64 * wgs)  # the 64-row wgmma atoms one warpgroup issues per K block
            assert r.sass["HGMMA"] == 2 * (cfg.tile.k // 16) * atoms, (name, r.sass)
            assert r.sass["UTMALDG"] > 0 and r.sass["UTMASTG"] > 0, (name, r.sass)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, r.sass)


def test_sm100_gated_forms_compile_two_tmem_accumulators_with_the_plans_smem_and_tmem(sm100_compiled):
    """Every cute:sm100 form, dense and grouped: each config compiled with the plan's SMEM and TMEM (a gate and an
    up accumulator a stage, 2 tile.n columns: a 128-column tile's two stages fill the 512), one TMA load site per
    128 bytes of K for A, the gate tile and the up tile, twice an ungated tile's tcgen05 MMAs (UTCHMMA: 2 x tile.k
    / 16), TMA stores on the dense kernel and predicated vector stores on the grouped one, spill-free."""
    for name, (spec, text, results, module) in sm100_compiled.items():
        assert "acc = acc * r_up.load()  # act(gate) * up" in text and "2 * acc_state.index + 1" in text
        grouped = spec.kind == "grouped"
        assert ("(G, K, 2N)" if grouped else "(K, 2N)") in text, name
        for r, cfg in zip(results, configs(spec, module), strict=True):
            assert not r.error, (name, r)
            assert r.compiler_smem == r.plan_smem <= SMEM_PER_BLOCK, (name, r)
            cols = 2 * cfg.tile.n * (2 if 2 * cfg.tile.n * 2 <= 512 else 1)  # two stages where they fit
            assert r.resources["tmem_columns"] == r.resources["plan_tmem_columns"] == cols, (name, r.resources)
            assert r.sass["UTMALDG"] == 3 * -(-cfg.tile.k * 2 // 128), (name, r.sass)  # A, gate, up
            assert r.sass["UTCHMMA"] == 2 * (cfg.tile.k // 16), (name, r.sass)
            assert (r.sass["UTMASTG"] == 0) is grouped, (name, r.sass)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, r.sass)


@pytest.mark.parametrize(("target", "kind", "changes", "says"), [
    ("cute:sm90", "gemm", {"cute": {"swap_ab": True}, "tile": {"m": 128, "n": 64, "k": 64}}, "cute.swap_ab"),
    ("cute:sm90", "gemm", {"b": {"dtype": "bf16", "major": "mn"}}, 'b.major = "mn"'),
    ("cute:sm100", "gemm", {"cute": {"two_cta": True}, "cluster": {"m": 2, "n": 1}}, "cute.two_cta"),
    ("cute:sm100", "grouped", {"b": {"dtype": "bf16", "major": "mn"}}, 'b.major = "mn"'),
])
def test_a_render_that_skipped_check_refuses_what_epi003_refuses(target, kind, changes, says):
    from specgen.registry import design_for

    s = {"name": "refused", "kind": kind, "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
         "out": {"dtype": "bf16"}, "tile": {"m": 128, "n": 128, "k": 64}, "targets": [target],
         "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}], **changes}
    ls = load(s)
    assert "EPI003" in {d.rule for d in check_all([ls]) if d.severity == "error"}
    (t,) = ls.spec.targets
    with pytest.raises(ValueError, match=f"{says}.*EPI003"):
        design_for(kind, t).render(ls, [t], {str(t): resolve(ls.spec, t)})


@pytest.fixture(scope="module")
def mlp_sm90(tmp_path_factory):
    return load_target_module(dense_sm90()["cg_mlp_up_swiglu"], "cute:sm90", tmp_path_factory.mktemp("gated_jax"),
                              "_specgen_test_cute_gated_jax_")[0]


@pytest.mark.parametrize(("m", "n", "k", "padded_n"), [(64, 256, 128, 256), (5, 100, 40, 104)])
def test_the_jax_entry_traces_a_gated_call_over_b_halves_padded_to_the_outputs(mlp_sm90, m, n, k, padded_n):
    """B stored (2N, K) (the (K, 2N) weight K-major) gives N outputs; an N that is no whole 16 bytes pads out to
    `padded_n` columns and each of B's halves to as many (the kernel finds the up columns out's N after the gate's)."""
    from specgen.runtime import cute_jax

    fn = mlp_sm90.cg_mlp_up_swiglu_jax
    a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((2 * n, k), jnp.bfloat16)
    out = jax.eval_shape(fn, a, b)
    assert out.shape == (m, n) and out.dtype == jnp.bfloat16
    calls = [e for e in jax.make_jaxpr(fn)(a, b).jaxpr.eqns if e.primitive is cute_jax.cute_call_p]
    if not calls:  # under the entry's jit: the call is one level down
        (jit,) = jax.make_jaxpr(fn)(a, b).jaxpr.eqns
        calls = [e for e in jit.params["jaxpr"].jaxpr.eqns if e.primitive is cute_jax.cute_call_p]
    (call,) = calls
    kp = -(-k // 8) * 8
    assert [tuple(v.aval.shape) for v in call.invars] == [(m, kp), (2 * padded_n, kp)]
    assert call.params["shape"] == (m, padded_n)
    with pytest.raises(ValueError, match=r"b.shape\[0\] = 201 must be even: the gated epilogue reads gate and up"):
        jax.eval_shape(fn, a, jax.ShapeDtypeStruct((201, k), jnp.bfloat16))


def test_the_fake_gives_n_columns(mlp_sm90):
    """The torch.compile fake (meta) implementation: out (M, N) from B's 2N columns."""
    import torch

    a, b = torch.empty(5, 64, device="meta", dtype=torch.bfloat16), torch.empty(64, 80, device="meta", dtype=torch.bfloat16)
    assert mlp_sm90._fake(a, b).shape == (5, 40)


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_gated_padding_keeps_each_half_where_the_kernel_reads_it(mlp_sm90, layout):
    """pad_gated: (2N, K) -> (2 np_, K) with the gate rows at [0, N) and the up rows at [np_, np_ + N) (halves), or
    gate j at 2j and up j at 2j + 1 (interleaved), zeros elsewhere."""
    from specgen.runtime.cute_jax import Problem

    e = mlp_sm90._jax_entry()
    e.gated = layout  # the same entry with the other layout (the pad is the entry's, not the module's)
    n, npad, kk = 3, 8, 4
    b = np.arange(1, 2 * n * kk + 1, dtype=np.float32).reshape(2 * n, kk)
    got = np.asarray(e.pad_gated(jnp.asarray(b), Problem((), 1, n, kk, 1, npad, kk, None)))
    want = np.zeros((2 * npad, kk), np.float32)
    if layout == "halves":
        want[:n], want[npad:npad + n] = b[:n], b[n:]
    else:
        want[: 2 * n] = b
    np.testing.assert_array_equal(got, want)


def test_the_c_export_reads_b_as_k_by_2n():
    """The C entry's B descriptor is (K, 2 N) and its empty-K zeros hold 2N columns (kernel.cpp, rendered only)."""
    from specgen.kinds.gemm.designs.cute_export.abi import c_kernel, render_files
    from specgen.registry import design_for

    ls = load(dense_sm90()["cg_mlp_up_swiglu"])
    (t,) = ls.spec.targets
    k = c_kernel(design_for("gemm", t).plan(ls, [t], {str(t): resolve(ls.spec, t)}))
    b = next(o for o in k.operands if o.role == "b")
    assert (b.rows, b.cols, k.b_columns) == ("K", "2 * N", 2)
    cpp = render_files([k], "test")[f"src/{ls.name}.cpp"]
    assert "{ K, 2 * N }" in cpp and "zbatch_b = 32 * pad_n" in cpp
