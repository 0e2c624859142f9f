"""An fp8 forward's bf16 backward on the dense CuTe sm90 design (issue 38; plan: specgen/kinds/gemm/designs/cute_sm90/
training.py, templates/gemm/cute/training.jinja, grad_cols.jinja) on this CPU machine. No GPU runs here (numerics:
tests/gpu/test_training_cute_fp8_gpu.py), so:

- check accepts e4m3 (preact, scales + bias + GELU-tanh), e4m3 x e5m2 (recompute, scales + ReLU) and e5m2 x e4m3
  (scales + bias, an f16 output: no pre) on cute:sm90; the plan's dgrad and wgrad read G_b / G_a and 16-bit copies of B
  and A (configs of the output's dtype), the recompute companion's SMEM is its 16-bit pre's;
- every kernel of the preact module and the others' new ones compile for sm_90a in one test, with the plan's SMEM to
  the byte and no spills: forward_pre and recompute on fp8 wgmma (QGMMA) storing pre by TMA (forward_pre beside out),
  dgrad and wgrad on bf16 wgmma (HGMMA), the fp8 columns kernel (with and without pre) in 16-byte loads and stores,
  the bands' sum;
- the backward's host glue (`_backward`: pre recomputed or saved, G_b and G_a, the 16-bit copies, the orientations,
  dbias, NaN-poisoned buffers, M = 1, N and K off the tile) with each kernel replaced by a torch model of its contract,
  against float64 autograd of act((A sa) @ (B sb) + bias); the RuntimeErrors for a scale or an fp8 operand that
  requires grad, through the module's autograd setup;
- a render that skipped check refuses what TRN001 refuses."""

from __future__ import annotations

import json
import types

import pytest
import torch
from backends.cute.training_compiles import compile_training
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target

TARGET = parse_target("cute:sm90")
# name: (A dtype, B dtype, save, bias, activation, output)
FORMS = {"cf8_pre": ("fp8_e4m3", "fp8_e4m3", "preact", True, "gelu_tanh", "bf16"),
         "cf8_rec": ("fp8_e4m3", "fp8_e5m2", "recompute", False, "relu", "bf16"),
         "cf8_bias": ("fp8_e5m2", "fp8_e4m3", "preact", True, "", "f16")}
# what each form compiles: every backward kernel of the preact module, the others' new ones (without an activation the
# columns kernel reads no pre)
ROLES = {"cf8_pre": ("forward_pre", "dgrad", "wgrad"), "cf8_rec": ("recompute",), "cf8_bias": ()}
COLS = {"cf8_pre": ("grad_cols_fp8", "grad_cols_bands"), "cf8_rec": ("grad_cols_fp8",), "cf8_bias": ("grad_cols_fp8",)}
TORCH = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "bf16": torch.bfloat16, "f16": torch.float16}
ACTS = {"gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "relu": torch.relu, "": lambda v: v}


def spec(name: str, **more) -> dict:
    a, b, save, bias, act, out = FORMS[name]
    return {"name": name, "kind": "gemm", "a": {"dtype": a, "major": "k"}, "b": {"dtype": b, "major": "k"},
            "out": {"dtype": out}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 128},
            "schedule": {"persistent": True},
            "epilogue": [{"op": "scale", "by": "rowcol"}] + ([{"op": "bias", "dtype": out}] if bias else [])
            + ([{"op": "activation", "fn": act}] if act else []),
            "training": {"save": save}, **more}


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{name: (module text, module)}: each form rendered and imported."""
    folder = tmp_path_factory.mktemp("cute_fp8_train")
    return {name: load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_fp8_train_")[::-1]
            for name in FORMS}


@pytest.mark.parametrize("name", list(FORMS))
def test_check_accepts_it_and_the_plan_reads_16_bit_copies(name: str) -> None:
    _, _, save, bias, act, out = FORMS[name]
    ls = load(spec(name))
    assert [d for d in check_all([ls]) if d.severity == "error"] == []
    r = resolve(ls.spec, TARGET)
    t = DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).training
    assert (t.fp8, t.act, t.bias, t.scales, t.operand_torch) == (True, act, "bias" if bias else "", ("scale_a", "scale_b"),
                                                                 {"bf16": "bfloat16", "f16": "float16"}[out])
    pre_role = ["forward_pre" if save == "preact" else "recompute"] if act else []  # without one, U = dOut: no pre
    assert list(t.gemms) == [*pre_role, "dgrad", "wgrad"]
    assert t.kernels[len(t.gemms):] == ["grad_cols_fp8", *(["grad_cols_bands"] if bias else [])]
    # dA = G_b @ B16^T (B K-major: the (N, K) weight's storage), dB^T (N, K) = G_a^T @ A16: the weight's own layout
    g = t.gemms
    assert (g["dgrad"].x, g["dgrad"].y, g["dgrad"].transposed) == ("g_b", "b16.t()", False)
    assert (g["wgrad"].x, g["wgrad"].y, g["wgrad"].transposed) == ("g_a.t()", "a16", True)
    by_role = {c.companion: c for c in r.companions}
    assert {by_role[role].spec.a.dtype.value for role in ("dgrad", "wgrad")} == {out}
    # the companions the rules check: dgrad's and wgrad's SMEM as planned; recompute ruled as the Triton chain's f32 pre
    # GEMM (conservative), planned with this kernel's bf16 pre (its subtiles half the bytes, the same stages)
    for role in ("dgrad", "wgrad") + (("forward_pre",) if save == "preact" and act else ()):
        assert g[role].config.smem_bytes == by_role[role].budget.total, role
    if save == "recompute":
        assert by_role["recompute"].spec.out.dtype.value == "f32"
        assert g["recompute"].config.ab_stages == by_role["recompute"].ab_stages
        assert g["recompute"].config.smem_bytes < by_role["recompute"].budget.total


def test_every_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, tmp_path, monkeypatch) -> None:
    """One test compiles (CuTe compiles are slow: under xdist a fixture would compile once per worker)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    for name, (_, module) in rendered.items():
        launchers = {"grad_cols_fp8": module._cols_fp8_launcher, "grad_cols_bands": module._cols_launcher}
        results = compile_training(module, name, ROLES[name], {v: launchers[v] for v in COLS[name]},
                                   (*SASS_OPS, "LDG", "STG"))
        assert set(results) == {*ROLES[name], *COLS[name]}, name
        for role, r in results.items():
            assert not r.error, (name, role, r)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, role, r.sass)
            if role == "grad_cols_fp8":  # 16-byte vectors: dOut's (and pre's) loads a row (4 rows a batch, then the
                # band's last rows one at a time), scale_a's one and scale_b's two; G_b's and G_a's stores a row, then
                # the f32 sums (2)
                loads = 2 if FORMS[name][4] else 1
                assert (r.sass["LDG"], r.sass["STG"]) == (loads * 5 + 5 + 2, 2 * 5 + 2), (name, role, r.sass)
            if role.startswith("grad_cols"):
                continue
            cfg = module.TRAIN_CONFIGS[role]
            atoms = cfg.tile_m // (64 * cfg.mma_warpgroups)
            if role in ("forward_pre", "recompute"):  # the fp8 kernel (ptxas schedules its chain over more QGMMAs)
                assert r.sass["QGMMA"] > 0 and r.sass["HGMMA"] == 0, (name, role, r.sass)
            else:  # dgrad and wgrad: bf16 wgmma over the 16-bit copies, 16 of K an instruction
                assert r.sass["HGMMA"] == cfg.tile_k // 16 * atoms and r.sass["QGMMA"] == 0, (name, role, r.sass)
            assert r.sass["UTMALDG"] > 0 and r.sass["STG"] == 0, (name, role, r.sass)
            # out stored by TMA, forward_pre's pre beside each of its subtiles; recompute stores pre as its output
            subs = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
            assert r.sass["UTMASTG"] == (2 if role == "forward_pre" else 1) * subs, (name, role, r.sass)


def test_the_module_converts_the_fp8_operands_and_refuses_their_grad(rendered) -> None:
    for name, (text, module) in rendered.items():
        dt = {"bf16": "bfloat16", "f16": "float16"}[FORMS[name][5]]
        assert f"b16 = b.to(torch.{dt})" in text and f"a16 = a.to(torch.{dt})" in text
        cfgs = module.TRAIN_CONFIGS
        assert [cfgs[r].operands[1] for r in ("dgrad", "wgrad")] == [module.OUT_DTYPE] * 2
        assert all(cfgs[r].operands[1] is module.A_DTYPE for r in cfgs if r not in ("dgrad", "wgrad"))
        # the JAX entry: a jax.custom_vjp (tests/backends/cute/test_cute_jax_train_more.py)
        assert "_tr.refuse_fp8_grad(" in text and "_jax_differentiable" in text
        for n in ("scale_a", "scale_b", "a"):  # through autograd's setup, before anything is saved
            inputs = [torch.zeros(4, 4).to(TORCH[FORMS[name][0]]), torch.zeros(4, 4).to(TORCH[FORMS[name][1]]),
                      torch.ones(4), torch.ones(4)] + ([torch.zeros(4)] if FORMS[name][3] else [])
            i = {"a": 0, "scale_a": 2, "scale_b": 3}[n]
            inputs[i] = inputs[i].requires_grad_()
            says = (r"dequantization scales are inputs without grad \(as torch._scaled_mm's\): detach it" if n != "a" else
                    rf"a \({FORMS[name][0]}\) requires grad, but autograd would round its gradient to fp8")
            with pytest.raises(RuntimeError, match=rf"{name}: .*{says}"):
                module._setup_context(types.SimpleNamespace(), tuple(inputs), None)


def _models(module, act: str, monkeypatch) -> None:
    """Each kernel of the backward replaced by a torch model of its contract (the CPU has no GPU to run them): the
    GEMMs (f32 sums, rounded to the output; recompute's epilogue the scales and the bias), the fp8 columns kernel (U in
    f32, G_b, G_a rounded, U's band sums; a thread's last vector writes up to the padded pitch) and the bands' sum."""
    fn = ACTS[act]

    def gemm(role, x, y, dst, aux=None, scale_a=None, scale_b=None, bias=None):
        assert role not in ("dgrad", "wgrad") or x.dtype == y.dtype == dst.dtype, role
        acc = x.float() @ y.float()
        if role == "recompute":
            acc = acc * scale_a[:, None] * scale_b[None, :] + (bias.float() if bias is not None else 0)
        dst.copy_(acc.to(dst.dtype))

    def cols(src, pre, g_b, g_a, sa, sb, partial, rows):
        M, N = src.shape
        assert g_b.stride(0) % 8 == 0 and g_a.stride(0) % 8 == 0 and sb.shape[1] % 8 == 0
        assert act or pre is src  # without an activation the kernel reads no pre
        with torch.enable_grad():  # (also when autograd's backward calls it, grad mode off)
            p = pre.float().requires_grad_()
            fn(p).backward(src.float())
        u = p.grad
        g_b.copy_((u * sb[0, :N]).to(g_b.dtype))
        g_a.copy_((sa[:, None] * u).to(g_a.dtype))
        for i in range(partial.shape[0]):
            partial[i] = u[i * rows:(i + 1) * rows].sum(0)

    def bands(src, pre, g, sums, rows):
        sums.copy_(src.sum(0, keepdim=True).to(sums.dtype))

    monkeypatch.setattr(module, "_gemm", gemm)
    monkeypatch.setattr(module, "_cols_fp8_launcher", types.SimpleNamespace(ready={(-1, "grad_cols_fp8"): (cols, None)}))
    monkeypatch.setattr(module, "_cols_launcher", types.SimpleNamespace(ready={(-1, "grad_cols_bands"): (bands, None)}))


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("M", "N", "K"), [(96, 64, 80), (1, 100, 72), (37, 13, 40)])
def test_the_backward_glue_gives_the_dequantized_operands_gradients(rendered, name, M, N, K, monkeypatch) -> None:
    """`_backward` with each kernel a torch model, against float64 autograd of act((A sa) @ (B sb) + bias): dA and dB
    (bf16, A's and B's shapes and strides) into NaN-poisoned buffers, the bias's too; the scales get empty tensors."""
    _, _, save, bias, act, out = FORMS[name]
    dt = TORCH[out]
    module = rendered[name][1]
    _models(module, act, monkeypatch)
    gen = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=gen).to(TORCH[FORMS[name][0]])
    b = torch.randn(N, K, generator=gen).to(TORCH[FORMS[name][1]]).t()  # K-major: the (N, K) weight's storage
    sa, sb = torch.rand(M, generator=gen) / 10 + 0.05, torch.rand(N, generator=gen) / 10 + 0.05
    vec = torch.randn(N, generator=gen).to(dt)
    grad = torch.randn(M, N, generator=gen).to(dt)
    deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
    deq_b = (b.double() * sb.double()[None, :]).requires_grad_()
    bias64 = vec.double().requires_grad_()
    pre64 = deq_a @ deq_b + (bias64 if bias else 0)
    ACTS[act](pre64).backward(grad.double())
    args = (a, b, sa, sb, vec) if bias else (a, b, sa, sb)
    pre = pre64.detach().to(dt) if save == "preact" and act else None  # forward_pre's pre, rounded
    bufs = {"da": torch.full((M, K), float("nan"), dtype=dt), "db": torch.full((N, K), float("nan"), dtype=dt).t()}
    if bias:
        bufs["dbias"] = torch.full((N,), float("nan"), dtype=dt)
    got = module._backward(grad, *args, pre, **bufs)
    assert len(got) == len(args) and got[2].numel() == got[3].numel() == 0  # the scales: no gradient
    for g, want, n in ((got[0], deq_a.grad, "da"), (got[1], deq_b.grad, "db")) + (((got[4], bias64.grad, "dbias"),) if bias else ()):
        assert g.data_ptr() == bufs[n].data_ptr() and g.dtype is dt and g.shape == want.shape, n
        assert not g.isnan().any(), n
        assert (g.double() - want).abs().max().item() <= 2e-2 * want.abs().max().item() + 1e-6, n
    assert got[1].stride() == b.stride()  # dB in B's layout (dB^T stored as the weight's (N, K))
    need = module._backward(grad, *args, pre, True, *[False] * (len(args) - 1))
    assert need[1].numel() == 0 and torch.equal(need[0], got[0])  # dA alone: the same bits


@pytest.mark.parametrize(("changes", "says"), [
    ({"epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "relu"}, {"op": "clamp", "max": 4.0}]},
     "training with fp8_e4m3 operands and epilogue"),
    ({"cute": {"swap_ab": True}}, "no swap_ab forward"),
])
def test_a_render_that_skipped_check_refuses_what_trn001_refuses(changes: dict, says: str) -> None:
    ls = load(spec("cf8_pre", **changes))
    assert "TRN001" in {d.rule for d in check_all([ls]) if d.severity == "error"}
    with pytest.raises(ValueError, match=f"{says}.*TRN001"):
        DESIGN.plan(ls, [TARGET], {"cute:sm90": resolve(ls.spec, TARGET)})
