"""`batch = true` training on the dense CuTe sm100 design (issue 38; session 34; plan: specgen/kinds/gemm/designs/
cute_sm100/training.py), the CuTe sm90 batched backward's meaning and host (test_cute_training_batch.py): each backward
GEMM per batch (every batch its own B), a vector's gradient summed over the batches and rows in a fixed order. There is
no Blackwell GPU here: nothing of it has run (no numerics, no speed), so:

- check accepts on cute:sm100 the sm90 batch test's forms ([], [bias, gelu_tanh] preact, [bias, relu] recompute with A
  and B mn-major on a 2-CTA pair, SwiGLU halves preact, GeGLU-tanh interleaved with a bias recompute) and its four other
  chains batched, on 1-CTA, 2-CTA and clustered configs; the companions keep the batch; a batched fp8 forward stays
  refused (TRN001 and a render that skipped check);
- every tcgen05 kernel a batched module adds compiles for sm_100a in one test (3-D fakes: the batch mode of every TMA
  descriptor, the kernel walking its L mode): forward_pre (pre by TMA beside out; the halves' gate and up; a chain's,
  a batched residual read element-wise), recompute (dOut per batch; gated: G's pairs element-wise; a chain's pre with
  vectors along m and n), dgrad and wgrad (the transposed operands' 3-D views): UTCHMMA (a gated fused role's twice
  a plain one's), TMA loads and stores (none in a gated recompute), each with the batch among its box's modes (3-D, a
  gated view's 4-D: no 2-D one), no LDL / STL, the plan's SMEM and TMEM to the byte.
  The columns kernels and the chain pass are the unbatched module's, to the character (the host hands them the
  batches' rows as one matrix): test_cute_sm100_training.py compiles them;
- the host side (`_forward_pre`, `_backward`, the chain pass's host, the fakes) is the sm90 batched module's, character
  for character; run with each kernel a torch model of its contract against float64 autograd (the sm90 batch test's
  bodies: batch 1 and 3, M = 1, N and K off the tile, an expanded gradient, NaN-poisoned buffers, dB alone)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kernels import load_target_module
from test_cute_training_batch import FORMS, backward_glue, chain_glue, forward_pre_glue
from test_cute_training_batch import spec as sm90_spec
from test_cute_training_chain import spec as chain_spec

from specgen.check import check_all
from specgen.registry import design_for
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

TARGET = parse_target("cute:sm100")
DESIGN = design_for("gemm", "cute:sm100")
TWO_CTA = {"cute": {"two_cta": True}, "cluster": {"m": 2, "n": 1}}
# each form's sm100 config beside the sm90 test's spec (a gated forward has no 2-CTA form: EPI003)
CONFIGS = {"cbt_bias_gelu": {}, "cbt_relu_rec": TWO_CTA, "cbt_plain": {"cluster": {"m": 1, "n": 2}},
           "cbt_swiglu": {"cluster": {"m": 2, "n": 1}}, "cbt_geglu_il": {},
           "cch_col": TWO_CTA, "cch_rowcol": {"cluster": {"m": 1, "n": 2}},
           "cch_clamp": {**TWO_CTA, "tile": {"m": 64, "n": 128, "k": 64}}, "cch_nopre": {}}
CHAINS = ("cch_col", "cch_rowcol", "cch_clamp", "cch_nopre")
# what the compile test compiles: each tcgen05 role a batched module adds, once
COMPILES = {"cbt_bias_gelu": ("forward_pre", "dgrad", "wgrad"), "cbt_relu_rec": ("recompute",),
            "cbt_swiglu": ("forward_pre",), "cbt_geglu_il": ("recompute",), "cch_col": ("forward_pre",),
            "cch_rowcol": ("recompute",)}


def spec(name: str, batch: bool = True) -> dict:
    """The sm90 batch (or chain) test's form on cute:sm100 with this test's config."""
    d = chain_spec(name, batch=batch) if name in CHAINS else {**sm90_spec(name), "batch": batch}
    return {**d, "name": f"{name}_100{'' if batch else '_unbatched'}", "targets": ["cute:sm100"], "cute": {},
            **CONFIGS[name]}


def load(d: dict):
    (ls,) = load_text(json.dumps({"kernels": [d]}), f"<test:{d['name']}>", ".json")
    return ls


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory):
    """A form's module (batched, or not: `batch`) by name, rendered and imported on its first use in this worker."""
    tmp, done = tmp_path_factory.mktemp("sm100_batch_train"), {}

    def get(name: str, batch: bool = True):
        if (name, batch) not in done:
            done[name, batch] = load_target_module(spec(name, batch), "cute:sm100", tmp, "_specgen_test_sm100_batch_")[0]
        return done[name, batch]
    return get


@pytest.mark.parametrize("name", [*FORMS, *CHAINS])
def test_check_accepts_it_and_the_companions_keep_the_batch(name: str) -> None:
    ls = load(spec(name))
    assert [str(d) for d in check_all([ls]) if d.severity == "error"] == []
    r = resolve(ls.spec, TARGET)
    assert r.companions and all(c.spec.batch for c in r.companions)
    t = DESIGN.plan(ls, [TARGET], {"cute:sm100": r}).training
    assert list(t.gemms)[-2:] == ["dgrad", "wgrad"]
    assert all(g.config.two_cta == ("two_cta" in CONFIGS[name].get("cute", {})) for g in t.gemms.values())


def test_every_kernel_compiles_for_sm100a_spill_free_with_the_plans_smem_and_tmem(modules, tmp_path, monkeypatch) -> None:
    """One test compiles (under xdist a module-scoped fixture would compile once per worker; ~8 s of CPU). Every TMA
    load and store carries the batch: a 3-D box over (rows, cols, batch), or 4-D over a gated role's (N, K, 2, L) B
    and (M, N, 2, L) pairs (an unbatched kernel's are a rank lower: 2-D and 3-D, read by hand, 2026-11-29)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config
    from specgen.kinds.gemm.designs.cute_sm100.compile import KEEP, SASS_OPS, _tmem

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    info = target_info(TARGET)
    mma = {}
    for name, roles in COMPILES.items():
        module = modules(name)
        kernels = module.METADATA["plan"][info.compute_capability]["training"]["kernels"]
        for role in roles:
            def more(compiled, plan=kernels[role]):  # TMEM (the PTX's tcgen05.alloc) and the TMA ops' ranks
                ptx = compiled.artifacts.PTX
                text = ptx if isinstance(ptx, str) and "tcgen05" in ptx else Path(ptx).read_text()
                ranks = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.", text)
                return _tmem(plan)(compiled) | {f"tma_{d}d": ranks.count(d) for d in "2345"}
            r = compile_config(module._train_launcher, name, role, info, kernels[role]["smem_bytes"], True, False,
                               ops=SASS_OPS, keep=KEEP, more=more)
            assert not r.error, (name, role, r.error)
            gated = name in ("cbt_swiglu", "cbt_geglu_il")
            assert r.resources["tma_2d"] == 0 and r.resources["tma_3d"] > 0, (name, role, r.resources)
            assert (r.resources["tma_4d"] > 0) is (gated and role in ("forward_pre", "recompute")), (name, role, r.resources)
            assert r.sass["LDL"] == r.sass["STL"] == 0 and not r.spills.stores, (name, role, r.sass)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.resources["tmem_columns"] == r.resources["plan_tmem_columns"] > 0, (name, role, r.resources)
            assert r.sass["UTCHMMA"] > 0 and r.sass["UTCQMMA"] == 0 and r.sass["UTMALDG"] > 0, (name, role, r.sass)
            # out stored by TMA (forward_pre: pre beside it, the halves' gate and up too); a gated recompute stores G
            # element-wise, nothing by TMA
            assert (r.sass["UTMASTG"] == 0) is (gated and role == "recompute"), (name, role, r.sass)
            mma[name, role] = r.sass["UTCHMMA"]
    # a gated fused role: two accumulators (gate, up), twice the MMAs of a plain one at the same MMA tile
    assert mma["cbt_swiglu", "forward_pre"] == 2 * mma["cbt_bias_gelu", "forward_pre"] > 0


def _host(text: str) -> str:
    """A module's host side from its training fakes on (`_train_fake_args`, `_gemm`, the columns and chain passes'
    hosts, `_forward_pre`, `_backward`, the autograd registration), its spec hash (the target's options) aside."""
    start = text.index("\ndef _train_fake_args(")
    return re.sub(r'"[0-9a-f]{16}"', '"<spec hash>"', text[start:text.index("\ndef _jax_host(", start)])


@pytest.mark.parametrize("name", ["cbt_bias_gelu", "cbt_swiglu", "cbt_geglu_il", "cch_col", "cch_rowcol"])
def test_the_host_side_is_the_sm90_batched_modules(name: str) -> None:
    """The same spec rendered for cute:sm90: every host function of the backward (the fakes, `_gemm`, `_product`, the
    columns and chain passes, `_forward_pre`, `_backward`, the autograd op) is the same text in both modules; the
    passes' kernels are the unbatched sm100 module's."""
    d100 = spec(name)
    d90 = {**d100, "targets": ["cute:sm90"], "cute": {"mma_warpgroups": 2}, "cluster": {"m": 1, "n": 1},
           "tile": {"m": 128, "n": 128, "k": 64}}
    (text100,), (text90,), (unbatched,) = (render_modules(load(d), [parse_target(d["targets"][0])]).values()
                                           for d in (d100, d90, spec(name, batch=False)))
    # the JAX entry: a jax.custom_vjp (the sm90 module's: test_cute_jax_train_more.py, a chain's
    # test_cute_jax_train_batch_chain.py; traced here: test_a_batched_chains_jax_grad_traces_its_kernels)
    assert "batched=True)" in text100 and "_jax_differentiable" in text100
    assert _host(text100) == _host(text90)
    # the columns and chain passes' kernels are the unbatched module's (the host hands them (batch M, N) matrices)
    kernels = re.findall(r"\n@cute\.kernel\ndef (_(?:grad_cols|chain_pass)\w*)\(", text100)
    assert kernels and kernels == re.findall(r"\n@cute\.kernel\ndef (_(?:grad_cols|chain_pass)\w*)\(", unbatched)
    for kernel in kernels:
        assert _function(text100, kernel) == _function(unbatched, kernel), kernel


def _function(text: str, name: str) -> str:
    start = text.index(f"\ndef {name}(")
    return text[start:text.index("\n\n\n", start)]


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 45, 29), (1, 1, 24, 72), (3, 1, 13, 16)])
def test_the_backward_glue_gives_every_batchs_gradients(modules, name, batch, M, N, K, monkeypatch) -> None:
    """`_backward` with each kernel a torch model (its operands' layouts checked against this module's TRAIN_CONFIGS),
    against float64 autograd: dA, dB of each batch, the bias gradient summed over the batches and rows."""
    backward_glue(modules(name), name, batch, M, N, K, monkeypatch)


@pytest.mark.parametrize("name", CHAINS)
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 13, 40), (1, 1, 100, 72)])
def test_the_batched_chains_glue_sums_each_vector_over_the_batches(modules, name, batch, M, N, K, monkeypatch) -> None:
    chain_glue(modules(name), name, batch, M, N, K, monkeypatch)


def test_a_batched_chains_jax_grad_traces_its_kernels(modules) -> None:
    """jax.grad under jax.jit of a batched chain's `<name>_jax` (vectors along m and n, a recompute) traces on any
    machine: the torch backward's kernels (the sm90 module's JAX backward: the same host), each gradient in its primal's
    shape and dtype."""
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    fn = modules("cch_rowcol").cch_rowcol_100_jax
    batch, M, N, K = 3, 37, 45, 29
    args = [jax.ShapeDtypeStruct((batch, M, K), jnp.float16), jax.ShapeDtypeStruct((batch, N, K), jnp.float16),
            jax.ShapeDtypeStruct((M,), jnp.float32), jax.ShapeDtypeStruct((M,), jnp.float32),
            jax.ShapeDtypeStruct((N,), jnp.float32)]  # bias along m, then scale_a and scale_b
    grad = jax.jit(jax.grad(lambda *xs: fn(*xs).astype(jnp.float32).sum(), argnums=tuple(range(len(args)))))
    jaxpr = jax.make_jaxpr(grad)(*args)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in args]
    assert cute_train_calls(jaxpr.jaxpr) == ["recompute", "chain_pass", "dgrad", "wgrad"] + ["grad_cols_bands"] * 3


def test_the_jax_backwards_gemms_compile_for_sm100a(modules, monkeypatch) -> None:
    """The JAX entry's backward GEMMs in cutlass.jax's convention (3-D arrays: the batch mode) compile for sm_100a:
    a batched 16-bit module's forward_pre and dgrad, a 2-CTA recompute reading dOut (A and B mn-major), and a batched
    chain's forward_pre with a (batch, M, N) residual and dgrad with its (1, 1, 8) stub. (The columns and chain passes
    are the sm90 modules' kernels, compiled for sm_90a by test_cute_jax_train_more.py.)"""
    import jax.numpy as jnp
    from test_cute_jax_train_more import backward_of

    from specgen.runtime import cute_jax_train as jt

    for name, roles in (("cbt_bias_gelu", ("forward_pre", "dgrad")), ("cbt_relu_rec", ("recompute",)),
                        ("cch_col", ("forward_pre", "dgrad"))):
        module = modules(name)
        bw, entry = backward_of(module, monkeypatch), module._jax_entry()
        assert bw.batch and bw.train_launcher.arch == "sm_100a", name
        kern = jt.kernels(bw, tuple((o.name, o.role) for o in entry.operands[2:]))
        ins = tuple(jnp.dtype(o.jnp_dtype) for o in entry.operands if o.role != "scalar")
        out = jnp.dtype(entry.out.jnp_dtype)
        for role in roles:
            assert all(len(mode) == 3 for mode, _ in kern[role].layouts if len(mode) > 1), (name, role)
            args = ins + ((out,) if role == "recompute" and not bw.chain else ())  # a 16-bit recompute reads dOut
            outs = (out, out) if role == "forward_pre" else (out,)
            assert len(kern[role].compile(args + outs, len(args), 148)) > 1000, (name, role)


@pytest.mark.parametrize("name", ["cbt_bias_gelu", "cbt_swiglu"])
def test_forward_pre_stores_each_batchs_pre(modules, name, monkeypatch) -> None:
    forward_pre_glue(modules(name), name, 3, 37, 45, 40, monkeypatch)


@pytest.mark.parametrize("where", ["check", "plan"])
def test_a_batched_fp8_forward_stays_refused(where: str) -> None:
    """An fp8 forward's backward renders unbatched only on cute:sm100: TRN001 (check), and a render that skipped check
    raises the same, naming the batch and the fp8 dtypes."""
    d = {**spec("cbt_bias_gelu"), "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
         "tile": {"m": 128, "n": 128, "k": 128},
         "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu"}]}
    ls = load(d)
    if where == "check":
        (trn,) = [x for x in check_all([ls]) if x.rule == "TRN001"]
        assert trn.target == "cute:sm100" and trn.severity == "error", str(trn)
        message = trn.message
    else:
        with pytest.raises(ValueError, match="TRN001") as info:
            DESIGN.plan(ls, [TARGET], {"cute:sm100": resolve(ls.spec, TARGET)})
        message = str(info.value)
    assert "training with batch = true and fp8_e4m3 operands (a batched fp8 forward's backward: this design renders an fp8 " \
           "forward's backward unbatched only)" in message, message
