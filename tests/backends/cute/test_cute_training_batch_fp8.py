"""A batched fp8 forward's bf16 backward on the dense CuTe sm90 design (issue 38; session 34; plan: specgen/kinds/gemm/
designs/cute_sm90/training.py, templates/gemm/cute/fp8_backward.jinja), the Triton design's meaning: the rowwise scales
scale_a (M,) and scale_b (N,) shared by the batches, dA[i] and dB[i] the gradients of the dequantized A[i] scale_a and
B[i] scale_b, the bias gradient U's column sum over every batch's rows, the scales none. No GPU runs here (numerics:
tests/gpu/test_training_cute_batch_gpu.py's fp8 cases), so:

- check accepts e4m3 (preact, scales + bias + GELU-tanh), e4m3 x e5m2 (recompute, scales + ReLU) and e5m2 x e4m3 (scales
  + bias, an f16 output) batched on cute:sm90 (TRN001 lifted: `renders_batched_fp8_training`); the companions keep the
  batch; the plan is the unbatched one's (dgrad and wgrad over 16-bit copies);
- the batched module's forward_pre and recompute (the fp8 kernel, QGMMA, over 3-D fakes), dgrad and wgrad (bf16 HGMMA
  over 3-D copies) compile for sm_90a in one test, at the plan's SMEM to the byte, no spills (the fp8 columns kernel is
  the unbatched one's, 2-D: test_cute_training_fp8.py compiles it);
- `_backward` with each kernel a torch model of its contract (the GEMMs' operands 3-D, in the role's majors, 16-byte
  strides; the columns pass over the batch x M rows with scale_a repeated for each batch), against float64 autograd
  of act((A[i] sa) @ (B[i] sb) + bias) at batch 3 and 1, M = 1, N and K off the tile and whole vectors, an expanded
  gradient (batch stride 0), no batches; NaN-poisoned buffers; dA alone;
- `_forward_pre` (its CUDA-only check stubbed) with forward_pre a torch model: pre per batch through a 16-byte-row
  staging buffer (N = 45), the scales and the bias as 1-D vectors, an empty K, no batches."""

from __future__ import annotations

import pytest
import torch
from backends.cute.test_cute_training_fp8 import ACTS, TORCH, load
from backends.cute.test_cute_training_fp8 import FORMS as UNBATCHED
from backends.cute.test_cute_training_fp8 import spec as unbatched_spec
from backends.cute.training_compiles import compile_training
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.resolve import resolve
from specgen.spec.models import parse_target

TARGET = parse_target("cute:sm90")
# name: the unbatched fp8 test's form it batches (its FORMS: A dtype, B dtype, save, bias, activation, output)
BATCHED = {"cbf8_pre": "cf8_pre", "cbf8_rec": "cf8_rec", "cbf8_bias": "cf8_bias"}
FORMS = {name: UNBATCHED[form] for name, form in BATCHED.items()}
COMPILES = {"cbf8_pre": ("forward_pre", "dgrad", "wgrad"), "cbf8_rec": ("recompute",)}


def spec(name: str) -> dict:
    return {**unbatched_spec(BATCHED[name], batch=True), "name": name}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{name: (module text, module)}: each form rendered and imported."""
    folder = tmp_path_factory.mktemp("cute_batch_fp8_train")
    return {name: load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_batch_fp8_")[::-1]
            for name in FORMS}


@pytest.mark.parametrize("name", list(FORMS))
def test_check_accepts_it_and_the_plan_is_the_unbatched_ones(name: str) -> None:
    _, _, save, bias, act, out = FORMS[name]
    ls = load(spec(name))
    assert [str(d) for d in check_all([ls]) if d.severity == "error"] == []
    r = resolve(ls.spec, TARGET)
    assert r.companions and all(c.spec.batch for c in r.companions)
    t = DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).training
    pre_role = ["forward_pre" if save == "preact" else "recompute"] if act else []
    assert (t.fp8, t.scales, list(t.gemms)) == (True, ("scale_a", "scale_b"), [*pre_role, "dgrad", "wgrad"])
    g = t.gemms
    assert (g["dgrad"].x, g["dgrad"].y, g["wgrad"].x, g["wgrad"].y) == ("g_b", "b16.t()", "g_a.t()", "a16")
    assert {c.spec.a.dtype.value for c in r.companions if c.companion in ("dgrad", "wgrad")} == {out}


def test_the_module_renders_batched_fp8_glue(rendered) -> None:
    for name, (text, module) in rendered.items():
        assert "batched=True)" in text and "sa_rows = scale_a.reshape(-1).repeat(batch)" in text, name
        assert "_product(\"dgrad\", g_b, b16.mT, da)" in text and "_product(\"wgrad\", g_a.mT, a16, db.mT)" in text, name
        assert "_jax_differentiable" in text, name  # the JAX entry: a jax.custom_vjp (test_cute_jax_train_more.py)
        fakes = module._train_fake_args("dgrad")
        assert [len(f.shape) for f in fakes[:2]] == [3, 3] and fakes[0].element_type is module.OUT_DTYPE, name
        fakes = module._train_fake_args("wgrad" if name == "cbf8_bias" else next(iter(module.TRAIN_CONFIGS)))
        assert len(fakes[0].shape) == 3, name


def test_every_batched_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, tmp_path, monkeypatch) -> None:
    """One test compiles (CuTe compiles are slow: under xdist a fixture would compile once per worker)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    for name, roles in COMPILES.items():
        module = rendered[name][1]
        results = compile_training(module, name, roles, {}, SASS_OPS)
        for role, r in results.items():
            assert not r.error, (name, role, r)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, role, r.sass)
            cfg = module.TRAIN_CONFIGS[role]
            atoms = cfg.tile_m // (64 * cfg.mma_warpgroups)
            if role in ("forward_pre", "recompute"):  # the fp8 kernel
                assert r.sass["QGMMA"] > 0 and r.sass["HGMMA"] == 0, (name, role, r.sass)
            else:  # bf16 wgmma over the 16-bit copies, 16 of K an instruction
                assert r.sass["HGMMA"] == cfg.tile_k // 16 * atoms and r.sass["QGMMA"] == 0, (name, role, r.sass)
            subs = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
            assert r.sass["UTMALDG"] > 0, (name, role, r.sass)
            assert r.sass["UTMASTG"] == (2 if role == "forward_pre" else 1) * subs, (name, role, r.sass)


def _models(name: str, module, monkeypatch, seen: list) -> None:
    """Each kernel a torch model of its contract: the unbatched fp8 test's columns and bands kernels (2-D: the batches'
    rows as one matrix), and the GEMMs over (batch, rows, cols) operands, their layouts checked (3-D, the role's majors,
    16-byte strides; dgrad and wgrad 16-bit), recompute's epilogue the shared scales and the bias."""
    from backends.cute.test_cute_training_fp8 import _models as fp8_models

    fp8_models(module, FORMS[name][4], monkeypatch)
    cols = module._cols_fp8_launcher.ready[(-1, "grad_cols_fp8")][0]

    def checked_cols(src, pre, g_b, g_a, sa, sb, partial, rows):
        assert src.dim() == 2 and sa.shape == (src.shape[0],), (src.shape, sa.shape)
        seen.append("grad_cols_fp8")
        cols(src, pre, g_b, g_a, sa, sb, partial, rows)

    module._cols_fp8_launcher.ready[(-1, "grad_cols_fp8")] = (checked_cols, None)

    def gemm(role, x, y, dst, aux=None, scale_a=None, scale_b=None, bias=None):
        cfg = module.TRAIN_CONFIGS[role]
        for t, unit in ((x, -1 if cfg.a_k else -2), (y, -2 if cfg.b_k else -1), (dst, -1)):
            assert t.dim() == 3 and t.stride(unit) == 1, (role, t.shape, t.stride())
            assert all(s % 16 == 0 if t.element_size() == 1 else s % 8 == 0 for d, s in enumerate(t.stride()) if d != unit % 3), (role, t.stride())
        assert role not in ("dgrad", "wgrad") or x.dtype == y.dtype == dst.dtype, role
        seen.append(role)
        acc = x.float() @ y.float()
        if role in ("forward_pre", "recompute"):
            acc = acc * scale_a[:, None] * scale_b[None, :] + (bias.float() if bias is not None else 0)
        if role == "forward_pre":  # pre stored by TMA: 16-byte rows and batch strides (the staging buffer's)
            assert aux.dim() == 3 and aux.stride(-1) == 1 and all(s % 8 == 0 for s in aux.stride()[:-1]), aux.stride()
            assert scale_a.dim() == scale_b.dim() == bias.dim() == 1 and scale_a.shape == (x.shape[1],), role
            aux.copy_(acc.to(aux.dtype))
            acc = ACTS[FORMS[name][4]](acc)
        dst.copy_(acc.to(dst.dtype))

    monkeypatch.setattr(module, "_gemm", gemm)


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 45, 40), (1, 1, 24, 72), (3, 1, 13, 16), (0, 5, 16, 8)])
def test_the_backward_glue_gives_every_batchs_dequantized_gradients(rendered, name, batch, M, N, K, monkeypatch) -> None:
    """`_backward` with each kernel a torch model, against float64 autograd of act((A sa) @ (B sb) + bias) per batch:
    dA, dB (each batch's, in A's and B's layouts) and the bias gradient (over every batch's rows) into NaN-poisoned
    buffers, the scales' empty; dA alone gives the same bits."""
    a_dt, b_dt, save, bias, act, out = FORMS[name]
    dt = TORCH[out]
    module = rendered[name][1]
    seen: list = []
    _models(name, module, monkeypatch, seen)
    gen = torch.Generator().manual_seed(batch + M + N + K)
    a = torch.randn(batch, M, K, generator=gen).to(TORCH[a_dt])
    b = torch.randn(batch, N, K, generator=gen).to(TORCH[b_dt]).mT  # K-major: each batch's (N, K) weight
    sa, sb = torch.rand(M, generator=gen) / 10 + 0.05, torch.rand(N, generator=gen) / 10 + 0.05
    vec = torch.randn(N, generator=gen).to(dt)
    grad = torch.randn(batch, M, N, generator=gen).to(dt)
    if batch == 3 and M == 1:  # autograd's gradient of a sum over the batches: batch stride 0, copied
        grad = grad[:1].expand(batch, M, N)
    deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
    deq_b = (b.double() * sb.double()[None, :]).requires_grad_()
    bias64 = vec.double().requires_grad_()
    pre64 = deq_a @ deq_b + (bias64 if bias else 0)
    ACTS[act](pre64).backward(grad.double())
    args = (a, b, sa, sb, vec) if bias else (a, b, sa, sb)
    pre = pre64.detach().to(dt) if save == "preact" and act else None  # forward_pre's pre, rounded
    bufs = {"da": torch.full((batch, M, K), float("nan"), dtype=dt),
            "db": torch.full((batch, N, K), float("nan"), dtype=dt).mT}
    if bias:
        bufs["dbias"] = torch.full((N,), float("nan"), dtype=dt)
    got = module._backward(grad, *args, pre, **bufs)
    assert len(got) == len(args) and got[2].numel() == got[3].numel() == 0  # the scales: no gradient
    wants = [(got[0], deq_a.grad, "da"), (got[1], deq_b.grad, "db")] + ([(got[4], bias64.grad, "dbias")] if bias else [])
    for g, want, n in wants:
        assert g.data_ptr() == bufs[n].data_ptr() and g.dtype is dt and g.shape == want.shape, n
        assert not g.isnan().any(), n
        assert (g.double() - want).abs().max().item() <= 2e-2 * want.abs().max().item() + 1e-6 if g.numel() else True, n
    assert got[1].stride() == bufs["db"].stride()  # dB in B's layout: each batch's dB^T stored as its (N, K) weight
    if batch:
        assert "grad_cols_fp8" in seen and {"dgrad", "wgrad"} <= set(seen), seen
        assert ("recompute" in seen) is (save == "recompute" and bool(act)), seen
    need = module._backward(grad, *args, pre, True, *[False] * (len(args) - 1))
    assert need[1].numel() == 0 and torch.equal(need[0], got[0])  # dA alone: the same bits


@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 45, 48), (2, 8, 16, 0), (0, 4, 8, 16)])
def test_forward_pre_stores_each_batchs_pre(rendered, batch, M, N, K, monkeypatch) -> None:
    """`_forward_pre` of the batched fp8 module with forward_pre a torch model (its arguments' check, CUDA only,
    stubbed: A and B as it stages them, 16-byte strides): pre (batch, M, N) = (A[i] @ B[i]) sa sb + bias rounded to bf16, through a 16-byte-row staging buffer where
    TMA cannot store it in place (N = 45), the scales and the bias passed to the kernel as 1-D vectors; zeros of K = 16
    for an empty K; nothing for no batches."""
    module = rendered["cbf8_pre"][1]
    _models("cbf8_pre", module, monkeypatch, [])
    gen = torch.Generator().manual_seed(batch + M + N + K)
    a = torch.randn(batch, M, K, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(batch, N, K, generator=gen).to(torch.float8_e4m3fn).mT
    sa, sb, bias = torch.rand(M, generator=gen) + 0.5, torch.rand(N, generator=gen) + 0.5, torch.randn(N, generator=gen).bfloat16()

    def check(*xs):
        out = module._tr.tma_empty(M, N, torch.bfloat16, "cpu", batch)
        return -1, batch, M, N, K, xs[:-1], out, out

    monkeypatch.setattr(module, "_check", check)
    out, pre = module._forward_pre(a, b, sa, sb, bias)
    want = (a.float() @ b.float()) * sa[:, None] * sb[None, :] + bias.float()
    assert pre.shape == (batch, M, N) and pre.dtype == torch.bfloat16 and out.shape == (batch, M, N)
    assert torch.equal(pre, want.bfloat16())
