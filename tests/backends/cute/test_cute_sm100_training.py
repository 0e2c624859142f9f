"""The CuTe sm100 backward (designs/cute_sm100/training.py) on this CPU machine: there is no Blackwell GPU here, so it is
verified by compiling every kernel of a training module for sm_100a and reading its SASS, and by its host side up to
the launch; nothing of it has run (no numerics, no speed).

- one compile of twelve training modules (both save modes; [bias, gelu], [bias, silu], [relu], [bias], a gated op
  (halves, interleaved) with and without a bias, an fp8 forward's scales, bias and GELU, and three of the other chains covering
  every op; every pair of operand majors; f16 and bf16; 1-CTA, 2-CTA of 128- and 64-row CTAs, clusters 2x1, 2x2, 1x2):
  every role's kernel, the columns kernels and the chain pass compile, UTCHMMA in every GEMM (twice in a
  gated fused role: two accumulators; UTCQMMA in an fp8 forward's, UTCHMMA in its dgrad and wgrad), no LDL / STL anywhere, the plan's SMEM and TMEM equal what each compiled kernel
  allocates, forward_pre stores pre (gated: both halves; interleaved: element-wise, out alone by TMA) by TMA beside out;
- the plan is the sm90 design's (the same orientation of every gradient, the same host) with this design's config
  rows: the companions' tile, cluster, 2-CTA MMA and stages;
- a chain module's chain pass, its launcher and `_backward` are the sm90 module's, character for character, and its
  plan the sm90 plan's (pre's op, the gradients' kinds, the residuals the pass replays);
- what TRN001 refuses a render that skipped check refuses too;
- the host side on CPU tensors: a call that requires grad takes the differentiable op (refused at the device check,
  naming the argument, where a forward-only module refuses the grad); the backward's argument checks; the JAX entry
  is a custom_vjp whose backward traces one call per kernel the torch side runs (an interleaved gated module's too).
"""

from __future__ import annotations

import copy
import json

import pytest
from kernels import MINIMAL_SPEC, load_target_module

from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN as SM90
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

SM100 = parse_target("cute:sm100")
DESIGN = design_for("gemm", "cute:sm100")


def spec(name: str, save: str = "preact", epilogue: list | None = None, a: str = "k", b: str = "k", dtype: str = "bf16",
         **more) -> dict:
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update({"name": name, "a": {"dtype": dtype, "major": a}, "b": {"dtype": dtype, "major": b}, "out": {"dtype": dtype},
              "targets": ["cute:sm100"], "schedule": {"persistent": True}, "training": {"save": save},
              "epilogue": [{"op": "bias"}, {"op": "activation", "fn": "gelu"}] if epilogue is None else epilogue, **more})
    return d


TWO_CTA = {"cute": {"two_cta": True}, "cluster": {"m": 2, "n": 1}}
FORMS = {  # name: (spec, the kernels the module compiles beside its forward)
    "t100_preact_gelu": (spec("t100_preact_gelu", b="mn"), ["forward_pre", "dgrad", "wgrad", "grad_cols", "grad_cols_bands"]),
    "t100_recompute_silu": (spec("t100_recompute_silu", "recompute", [{"op": "bias", "dtype": "f16"},
                                                                      {"op": "activation", "fn": "silu"}],
                                 a="mn", dtype="f16", **TWO_CTA),
                            ["recompute", "dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"]),
    "t100_preact_relu": (spec("t100_preact_relu", epilogue=[{"op": "activation", "fn": "relu"}], a="mn", b="mn",
                              tile={"m": 64, "n": 128, "k": 64}, cute={"two_cta": True}, cluster={"m": 2, "n": 2}),
                         ["forward_pre", "dgrad", "wgrad", "grad_cols"]),
    "t100_bias": (spec("t100_bias", epilogue=[{"op": "bias"}], cluster={"m": 1, "n": 2}),
                  ["dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"]),
    # a gated epilogue (halves): forward_pre and recompute the gated kernel (two TMEM accumulators), dgrad and wgrad
    # plain GEMMs over B's 2N columns; pre's halves by TMA, G's element-wise
    "t100_gated_preact": (spec("t100_gated_preact", epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"},
                                                              {"op": "bias"}]),
                          ["forward_pre", "dgrad", "wgrad", "grad_cols_gated", "grad_cols_bands"]),
    "t100_gated_recompute": (spec("t100_gated_recompute", "recompute", [{"op": "gated", "fn": "gelu", "layout": "halves"}],
                                  a="mn", tile={"m": 128, "n": 64, "k": 64}, cluster={"m": 2, "n": 1}),
                             ["recompute", "dgrad", "wgrad"]),
    # interleaved (gate j at column 2j, up j at 2j + 1): forward_pre stores pre's pairs element-wise (no TMA box holds
    # every other column: out's TMA stores alone), recompute G's, as the halves' recompute
    "t100_gated_il_preact": (spec("t100_gated_il_preact", epilogue=[{"op": "gated", "fn": "silu", "layout": "interleaved"},
                                                                    {"op": "bias", "dtype": "f16"}], dtype="f16"),
                             ["forward_pre", "dgrad", "wgrad", "grad_cols_gated", "grad_cols_bands"]),
    "t100_gated_il_recompute": (spec("t100_gated_il_recompute", "recompute",
                                     [{"op": "gated", "fn": "gelu", "layout": "interleaved"}], a="mn", cluster={"m": 1, "n": 2}),
                                ["recompute", "dgrad", "wgrad"]),
    # an fp8 forward (e4m3 x e5m2, rowwise scales, then a bias and a GELU; 2-CTA): forward_pre the fp8 kernel, dgrad
    # and wgrad 16-bit GEMMs over G_b / G_a and the operands' bf16 copies, the fp8 columns kernel
    "t100_fp8": (spec("t100_fp8", epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                                            {"op": "activation", "fn": "gelu_tanh"}],
                      a="k", b="k", tile={"m": 128, "n": 128, "k": 128}, **TWO_CTA) | {
                          "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"}},
                 ["forward_pre", "dgrad", "wgrad", "grad_cols_bands", "grad_cols_fp8"]),
    # the other chains (the sm90 plan and chain pass, cute_sm90/training.py): forward_pre applies the ops before pre's
    # and stores pre beside out, recompute stores pre as its output, the SIMT chain pass forms G and the arguments'
    # gradients; every op across the three (scale by col / rowcol / row / runtime scalar / constant, a bias along n
    # and m, GELU-tanh, sigmoid, a residual with beta 0.5 and one the pass replays, clamp [lo, hi], cast)
    "t100_chain_col": (spec("t100_chain_col", epilogue=[{"op": "scale", "by": "col"}, {"op": "bias", "dtype": "f16"},
                                                        {"op": "activation", "fn": "gelu_tanh"},
                                                        {"op": "residual", "dtype": "f16", "beta": 0.5}],
                            dtype="f16", **TWO_CTA),
                       ["forward_pre", "dgrad", "wgrad", "grad_cols_bands", "chain_pass"]),
    "t100_chain_rowcol": (spec("t100_chain_rowcol", "recompute", [{"op": "bias", "along": "m", "dtype": "f32"},
                                                                  {"op": "scale", "by": "rowcol"},
                                                                  {"op": "activation", "fn": "sigmoid"},
                                                                  {"op": "cast", "dtype": "f16"}],
                               a="mn", cluster={"m": 1, "n": 2}),
                          ["recompute", "dgrad", "wgrad", "grad_cols_bands", "chain_pass"]),
    "t100_chain_clamp": (spec("t100_chain_clamp", epilogue=[{"op": "scale", "by": "scalar"},
                                                            {"op": "clamp", "min": -1.0, "max": 2.0},
                                                            {"op": "residual", "dtype": "bf16"}, {"op": "scale", "by": "row"},
                                                            {"op": "scale", "by": "scalar", "value": 0.5}],
                              b="mn", tile={"m": 64, "n": 128, "k": 64}, cute={"two_cta": True}, cluster={"m": 2, "n": 1}),
                         ["forward_pre", "dgrad", "wgrad", "grad_cols_bands", "chain_pass"]),
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory):
    """A form's module by name, rendered and imported (not compiled) on its first use in this worker."""
    tmp, done = tmp_path_factory.mktemp("sm100_train"), {}

    def get(name: str):
        if name not in done:
            done[name] = load_target_module(FORMS[name][0], "cute:sm100", tmp)[0]
        return done[name]
    return get


def test_every_kernel_of_the_backward_compiles_for_sm100a_spill_free_with_the_plans_smem_and_tmem(modules):
    """One test over every form (one compile of each kernel, ~25 s of CPU: a module-scoped fixture would compile them
    once per xdist worker): every kernel compiles, UTCHMMA in every GEMM, no spills, SMEM and TMEM as planned;
    forward_pre stores two subtiles by TMA (out's, then pre's from the SMEM buffer beside it) where the forward stores
    one at the same subtile, its SMEM holding the pair (twice the forward's epilogue stages)."""
    from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module

    for name, (_, roles) in FORMS.items():
        mod = modules(name)
        rows = {r.kernel: r for r in compile_module(mod, target_info(SM100), sass=True, fill_cache=False)}
        assert list(rows) == [name, *(f"{name}[{r}]" for r in roles)]
        for kernel, r in rows.items():
            assert not r.error, (kernel, r.error)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0 and not r.spills.stores, (kernel, r.spills)
            assert r.compiler_smem == r.plan_smem, kernel
            if "grad_cols" in kernel or "chain_pass" in kernel:  # the SIMT columns kernels: no MMA, no SMEM, no TMEM
                assert r.plan_smem == 0 and r.sass["UTCHMMA"] == 0
                continue
            stores = kernel != f"{name}[recompute]" or "gated" not in name  # a gated recompute stores G element-wise
            # 16-bit MMAs (UTCHMMA), or an fp8 forward's fp8 ones (UTCQMMA: its forward and forward_pre)
            fp8 = "fp8" in name and not kernel.endswith(("[dgrad]", "[wgrad]"))
            assert (r.sass["UTCQMMA" if fp8 else "UTCHMMA"] > 0 and r.sass["UTCHMMA" if fp8 else "UTCQMMA"] == 0
                    and r.sass["UTMALDG"] > 0 and (r.sass["UTMASTG"] > 0) == stores), (kernel, r.sass)
            assert r.resources["tmem_columns"] == r.resources["plan_tmem_columns"] > 0, kernel
        for role, meta in mod.METADATA["plan"][100]["training"]["kernels"].items():
            cfg = mod.TRAIN_CONFIGS[role]
            assert (meta["smem_bytes"], meta["tmem_columns"], meta["two_cta"]) == (cfg.smem_bytes, cfg.tmem_columns, cfg.two_cta)
            assert cfg.two_cta == mod.CONFIG.two_cta and (cfg.cluster_m, cfg.cluster_n) == (mod.CONFIG.cluster_m, mod.CONFIG.cluster_n)
        gated = "gated" in name  # the fused roles' MMAs twice the plain ones' (a gate and an up accumulator)
        mma = {role: rows[f"{name}[{role}]"].sass["UTCHMMA"] for role in roles if role in mod.TRAIN_CONFIGS}
        assert "fp8" in name or all(n == (2 if gated and role in ("forward_pre", "recompute") else 1) * mma["dgrad"]
                                    for role, n in mma.items())
        if "forward_pre" in roles:
            fwd, pre = mod.CONFIG, mod.TRAIN_CONFIGS["forward_pre"]
            # out's subtile, and pre's (gated: its gate's and up's halves; interleaved: none, pre stored element-wise)
            per = 1 if "_il_" in name else 3 if gated else 2
            assert pre.epi_stages == max(per, 2) * fwd.epi_stages  # (interleaved: the companion's, all out's)
            if (pre.epi_m, pre.epi_n) == (fwd.epi_m, fwd.epi_n):
                assert rows[f"{name}[forward_pre]"].sass["UTMASTG"] == per * rows[name].sass["UTMASTG"], name


def loaded(d: dict):
    (ls,) = load_text(json.dumps({"kernels": [d]}), "<test>", ".json")
    return ls


@pytest.mark.parametrize(("a", "b"), [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
def test_the_plan_is_the_sm90_backwards_with_this_designs_config_rows(a: str, b: str) -> None:
    """Every gradient in its operand's stored layout, as the sm90 backward orients it (the same `_backward`); each
    role's config the companion's tile, cluster, 2-CTA MMA, stages and SMEM (a fused role's companion carries its
    kernel's epilogue, the chain and pre or dOut beside it, so its subtile is the one check ruled)."""
    d = spec("orient", "recompute", a=a, b=b, training={"save": "recompute", "dgrad": {"tile": {"m": 128, "n": 64, "k": 64}}},
             **TWO_CTA)
    ls = loaded(d)
    r = resolve(ls.spec, SM100)
    t = DESIGN.plan(ls, [SM100], {"cute:sm100": r}).training
    d90 = {**d, "targets": ["cute:sm90"], "cute": {}, "cluster": {"m": 1, "n": 1}}
    t90 = SM90.plan(loaded(d90), [parse_target("cute:sm90")], {"cute:sm90": resolve(loaded(d90).spec, parse_target("cute:sm90"))}).training
    assert list(t.gemms) == list(t90.gemms) == ["recompute", "dgrad", "wgrad"]
    for role, g in t.gemms.items():
        g90 = t90.gemms[role]
        assert (g.x, g.y, g.a_major, g.b_major, g.transposed) == (g90.x, g90.y, g90.a_major, g90.b_major, g90.transposed)
        c = next(c for c in r.companions if c.companion == role)
        cfg = g.config
        assert (cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.ab_stages) == (c.spec.tile.m, c.spec.tile.n, c.spec.tile.k, c.ab_stages)
        assert cfg.two_cta and (cfg.cluster_m, cfg.cluster_n) == (2, 1) and cfg.persistent and cfg.index is None
        assert cfg.smem_bytes == c.budget.total  # every role's config row is its companion's, as check ruled it
    assert (t.gemms["dgrad"].config.tile_m, t.gemms["dgrad"].config.tile_n) == (128, 64)  # training.dgrad.tile


@pytest.mark.parametrize("name", ["t100_chain_col", "t100_chain_rowcol", "t100_chain_clamp"])
def test_a_chains_backward_is_the_sm90_modules_host_and_chain_pass(name: str) -> None:
    """The same spec rendered for cute:sm90 (its options aside): the chain pass's kernel, host and fake, its launcher,
    `_chain_pass` and `_backward` are the same text in both modules (one host, the sm90 one's macros), the plans the same
    chain, pre's op, gradient kinds and replayed residuals, the GEMMs the same orientation; recompute stores pre in the
    output's dtype (the shared companion is the Triton chain's f32 pre GEMM)."""
    from specgen.render.catalogue import render_modules

    d = FORMS[name][0]
    d90 = {**d, "targets": ["cute:sm90"], "cute": {}, "cluster": {"m": 1, "n": 1}, "tile": {"m": 128, "n": 128, "k": 64}}
    t100, t90 = (design.plan(loaded(x), [target], {str(target): resolve(loaded(x).spec, target)}).training
                 for design, x, target in ((DESIGN, d, SM100), (SM90, d90, parse_target("cute:sm90"))))
    assert (t100.chain, t100.start, t100.grad_kinds, t100.replayed, t100.kernels) == (
        t90.chain, t90.start, t90.grad_kinds, t90.replayed, t90.kernels) and t100.chain
    assert [(g.x, g.y, g.transposed) for g in t100.gemms.values()] == [(g.x, g.y, g.transposed) for g in t90.gemms.values()]
    if "recompute" in t100.gemms:
        r = resolve(loaded(d).spec, SM100)
        assert next(c for c in r.companions if c.companion == "recompute").spec.out.dtype.value == "f32"
        assert t100.gemms["recompute"].config.smem_bytes < next(c.budget.total for c in r.companions if c.companion == "recompute")
    (text100,), (text90,) = (render_modules(loaded(x), [parse_target(x["targets"][0])]).values() for x in (d, d90))
    start, end = text90.index("@cute.kernel\ndef _chain_pass_kernel("), text90.index("\ndef _operands(")
    assert text90[start:end] in text100
    start = text90.index("\ndef _backward(")
    assert text90[start:text90.index("\n\n\n", start)] in text100


@pytest.mark.parametrize(("changes", "says"), [
    ({"out": {"dtype": "f32"}}, "the CuTe sm100 backward takes f16 or bf16 operands"),
    ({"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
      "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "clamp", "min": 0.0}], "tile": {"m": 128, "n": 128, "k": 128}},
     "training with fp8_e4m3 operands and epilogue ['scale', 'clamp']"),
    ({"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"}, "batch": True,
      "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}], "tile": {"m": 128, "n": 128, "k": 128}},
     "training with batch = true and fp8_e4m3 x fp8_e5m2 operands"),
], ids=["f32_out", "fp8", "fp8_batch"])
def test_a_render_that_skipped_check_refuses_what_trn001_refuses(changes: dict, says: str) -> None:
    ls = loaded({**spec("refused"), **changes})
    with pytest.raises(ValueError, match="TRN001") as info:
        DESIGN.plan(ls, [SM100], {"cute:sm100": resolve(ls.spec, SM100)})
    assert says in str(info.value)


def test_the_host_side_is_the_sm90_ones_up_to_the_launch(modules) -> None:
    """On CPU tensors: a call that requires grad takes the differentiable op (`_train_op`, forward_pre: refused at its
    device check, naming the argument) where a forward-only module refuses the grad itself; the backward refuses an
    output gradient of the wrong dtype or shape, naming the kernel; forward_pre (on tensors that answer as CUDA ones)
    refuses a wrong operand dtype and mismatched shapes before it launches."""
    import torch

    from specgen.kinds.gemm.testing.autograd import cuda_like

    mod = modules("t100_preact_gelu")
    a = torch.randn(64, 32, dtype=torch.bfloat16)
    b = torch.randn(32, 48, dtype=torch.bfloat16)  # mn-major B: N contiguous
    bias = torch.randn(48)
    with pytest.raises(ValueError, match="t100_preact_gelu: argument 'a' must be on a CUDA device"):
        mod.t100_preact_gelu(a.requires_grad_(), b, bias)
    a = a.detach()
    with pytest.raises(TypeError, match="t100_preact_gelu: the output's gradient must have dtype torch.bfloat16"):
        mod._backward(torch.randn(64, 48), a, b, bias, None)
    with pytest.raises(ValueError, match=r"the output's gradient must have shape \(64, 48\)"):
        mod._backward(torch.randn(64, 47, dtype=torch.bfloat16), a, b, bias, None)
    with pytest.raises(TypeError, match="t100_preact_gelu: argument 'a' must have dtype torch.bfloat16"):
        mod._forward_pre(cuda_like(a.half()), cuda_like(b), cuda_like(bias))
    with pytest.raises(ValueError, match=r"b.shape\[0\] \(K\) = 48 must equal a.shape\[1\] = 32"):
        mod._forward_pre(cuda_like(a), cuda_like(b.t().contiguous()), cuda_like(bias))


def test_the_jax_entry_is_a_custom_vjp_whose_backward_calls_the_modules_kernels(modules) -> None:
    """jax.grad of `<name>_jax` traces on any machine: one call per backward kernel the torch side runs (recompute,
    dgrad, wgrad, the columns sums of G), each gradient in its operand's layout and dtype, odd M, N and K."""
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    mod = modules("t100_recompute_silu")
    M, N, K = 37, 100, 75
    args = [jax.ShapeDtypeStruct((K, M), jnp.float16), jax.ShapeDtypeStruct((N, K), jnp.float16),
            jax.ShapeDtypeStruct((N,), jnp.float16)]
    grad = jax.jit(jax.grad(lambda *xs: mod.t100_recompute_silu_jax(*xs).astype(jnp.float32).sum(), argnums=(0, 1, 2)))
    jaxpr = jax.make_jaxpr(grad)(*args)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in args]
    assert cute_train_calls(jaxpr.jaxpr) == ["recompute", "dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"]


def test_an_fp8_forwards_jax_backward_compiles_for_sm100a(modules, monkeypatch) -> None:
    """The JAX entry's backward of an fp8 forward (2-CTA) in cutlass.jax's convention compiles for sm_100a: forward_pre
    (the fp8 tcgen05 kernel storing pre beside out), dgrad (16-bit operands, the scales' and the bias's stubs) and the
    fp8 columns kernel (G_b, G_a and U's band sums)."""
    import jax.numpy as jnp
    from test_cute_jax_train_more import backward_of

    from specgen.runtime import cute_jax_train as jt

    bw = backward_of(modules("t100_fp8"), monkeypatch)
    kern = jt.kernels(bw)
    assert bw.fp8 is not None and bw.train_launcher.arch == "sm_100a"
    bf, f32, f8 = jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32), (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))
    for role, ins, outs in (("forward_pre", (*f8, f32, f32, bf), (bf, bf)), ("dgrad", (bf, bf, f32, f32, bf), (bf,)),
                            ("grad_cols_fp8", (bf, bf, f32, f32), (bf, bf, f32))):
        assert len(kern[role].compile(ins + outs, len(ins), 148)) > 1000, role



@pytest.mark.parametrize(("name", "calls"), [
    ("t100_gated_il_preact", ["forward_pre", "grad_cols_gated", "dgrad", "wgrad", "grad_cols_bands"]),
    ("t100_gated_il_recompute", ["recompute", "dgrad", "wgrad"])])
def test_an_interleaved_gated_modules_jax_entry_traces_its_kernels(modules, name: str, calls: list) -> None:
    """The interleaved layout's custom_vjp (the sm90 module's, B's 2N columns interleaved): one call per kernel the torch
    side runs, each gradient in its operand's shape, layout and dtype, odd M and N."""
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    mod = modules(name)
    M, N, K = 37, 100, 72
    dt = jnp.float16 if name.endswith("preact") else jnp.bfloat16
    args = [jax.ShapeDtypeStruct((M, K) if name.endswith("preact") else (K, M), dt), jax.ShapeDtypeStruct((2 * N, K), dt),
            *([jax.ShapeDtypeStruct((N,), dt)] if name.endswith("preact") else [])]
    fn = getattr(mod, f"{name}_jax")
    grad = jax.jit(jax.grad(lambda *xs: fn(*xs).astype(jnp.float32).sum(), argnums=tuple(range(len(args)))))
    jaxpr = jax.make_jaxpr(grad)(*args)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in args]
    assert cute_train_calls(jaxpr.jaxpr) == calls
