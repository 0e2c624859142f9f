"""`batch = true` training on the dense CuTe sm90 design (issue 38; session 33; plan: specgen/kinds/gemm/designs/
cute_sm90/training.py, templates/gemm/cute/training.jinja) on this CPU machine, the Triton design's meaning (each
backward GEMM per batch, every batch its own B; the bias gradient summed over the batches and rows in a fixed order).
No GPU runs here (numerics: tests/gpu/test_training_cute_batch_gpu.py), so:

- check accepts [], [bias, activation] in both save modes and the gated op (halves, interleaved with a bias) batched on
  cute:sm90; the companions keep the batch; the module renders the batched host glue (the JAX entry: test_cute_jax_train_more.py);
- every kernel a batched module adds compiles for sm_90a in one test (3-D fakes: the batch mode of every TMA
  descriptor), with the plan's SMEM to the byte and no spills: forward_pre (pre by TMA beside out; the gated halves'
  gate and up subtiles; a chain's, with a batched residual), recompute (G from dOut read per batch; gated: G
  element-wise; a chain's pre), dgrad, wgrad and the columns kernels;
- the backward's host glue (`_backward`: G, dA, dB and the bias gradient into NaN-poisoned buffers, the need flags,
  batch 0, 1 and 3, M = 1, N and K off the tile and off whole vectors, an expanded gradient) with each kernel replaced
  by a torch model of its contract (its operands' layouts checked: 3-D, the majors the role's config reads, 16-byte
  strides; the columns pass over the batch x M rows), against float64 autograd of the batched op; the other chains
  likewise (test_cute_training_chain.py's forms and models), every vector's gradient summed over the batches;
- `_forward_pre` (its CUDA-only check stubbed) with forward_pre a torch model: pre per batch, staged where TMA cannot
  store it in place (halves: each half padded to 16 bytes), an empty K, no batches."""

from __future__ import annotations

import json

import pytest
import torch
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

TARGET = parse_target("cute:sm90")
ACTS = {"gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "relu": torch.relu,
        "silu": torch.nn.functional.silu}
# name: (epilogue, save, a major, b major)
FORMS = {
    "cbt_bias_gelu": ([{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}], "preact", "k", "k"),
    "cbt_relu_rec": ([{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "relu"}], "recompute", "mn", "mn"),
    "cbt_plain": ([], "preact", "k", "mn"),
    "cbt_swiglu": ([{"op": "gated", "fn": "silu", "layout": "halves"}], "preact", "k", "k"),
    "cbt_geglu_il": ([{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias"}], "recompute", "mn", "k"),
}
# what the compile test compiles: each role new to a batched module, once
COMPILES = {"cbt_bias_gelu": ("forward_pre", "dgrad", "wgrad", "grad_cols", "grad_cols_bands"),
            "cbt_relu_rec": ("recompute", "grad_cols_sum"), "cbt_swiglu": ("forward_pre", "grad_cols_gated"),
            "cbt_geglu_il": ("recompute",),
            # the other chains' pre GEMMs (a batched residual read element-wise, vectors along m and n)
            "cch_col": ("forward_pre",), "cch_rowcol": ("recompute",)}


def spec(name: str, **more) -> dict:
    epilogue, save, am, bm = FORMS[name]
    return {"name": name, "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": am},
            "b": {"dtype": "bf16", "major": bm}, "out": {"dtype": "bf16"}, "targets": ["cute:sm90"],
            "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2}, "schedule": {"persistent": True},
            "epilogue": epilogue, "training": {"save": save}, **more}


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{name: (module text, module)}: each form rendered and imported."""
    folder = tmp_path_factory.mktemp("cute_batch_train")
    return {name: load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_batch_train_")[::-1]
            for name in FORMS}


# The other chains batched: test_cute_training_chain.py's forms, models and reference, each with a batch mode
CHAINS = ("cch_col", "cch_rowcol", "cch_clamp", "cch_nopre")


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    """{name: (module text, module)}: each chain form rendered batched and imported."""
    from test_cute_training_chain import spec as chain_spec

    folder = tmp_path_factory.mktemp("cute_batch_chain_train")
    return {name: load_target_module(chain_spec(name, batch=True), "cute:sm90", folder,
                                     "_specgen_test_cute_batch_chain_")[::-1] for name in CHAINS}


@pytest.mark.parametrize("name", list(FORMS))
def test_check_accepts_it_and_the_companions_keep_the_batch(name: str) -> None:
    ls = load(spec(name))
    assert [str(d) for d in check_all([ls]) if d.severity == "error"] == []
    r = resolve(ls.spec, TARGET)
    assert r.companions and all(c.spec.batch for c in r.companions)
    t = DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).training
    pre_role = [] if not FORMS[name][0] else ["forward_pre" if FORMS[name][1] == "preact" else "recompute"]
    assert list(t.gemms) == [*pre_role, "dgrad", "wgrad"]


def test_the_module_renders_batched_glue_and_its_jax_entry(rendered, chains) -> None:
    for name, (text, module) in (rendered | chains).items():
        # the JAX entry: a jax.custom_vjp (test_cute_jax_train_more.py; a chain's: test_cute_jax_train_batch_chain.py)
        assert "batched=True)" in text and "_jax_differentiable" in text, name
        # the backward GEMMs' fakes: (batch, rows, cols) tensors, the batch stride of a TMA-moved one 16 bytes whole
        fakes = module._train_fake_args("dgrad")
        assert [len(f.shape) for f in fakes[:2]] == [3, 3], name
    # a residual: the pre GEMM's has A's batch (one symbol: the compiled check ties them); dgrad's, an unread stub
    # (1, 1, 8), its own
    module = chains["cch_col"][1]
    for role, same in (("forward_pre", True), ("dgrad", False)):
        fakes = module._train_fake_args(role)
        assert (fakes[0].shape[0] is fakes[4].shape[0]) is same and len(fakes[4].shape) == 3, role


def test_every_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, chains, tmp_path, monkeypatch) -> None:
    """One test compiles (CuTe compiles are slow: under xdist a fixture would compile once per worker)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS, compile_config

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    info = target_info("cute:sm90")
    ops = (*SASS_OPS, "LDG", "STG")
    for name, roles in COMPILES.items():
        module = (rendered | chains)[name][1]
        kernels = module.METADATA["plan"][info.compute_capability]["training"]["kernels"]
        for role in roles:
            cols = role.startswith("grad_cols")
            launcher = module._cols_launcher if cols else module._train_launcher
            r = compile_config(launcher, name, role, info, 0 if cols else kernels[role]["smem_bytes"], True, False, ops=ops)
            assert not r.error, (name, role, r)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, role, r.sass)
            if cols:
                assert r.sass["LDG"] > 0 and r.sass["STG"] > 0 and r.sass["HGMMA"] == 0, (name, role, r.sass)
                continue
            cfg = module.TRAIN_CONFIGS[role]
            subs = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
            assert r.sass["HGMMA"] > 0 and r.sass["UTMALDG"] > 0, (name, role, r.sass)
            # out stored by TMA (forward_pre: pre beside it; halves: pre's gate and up); a gated recompute stores G
            # element-wise, nothing by TMA
            gated = name in FORMS and FORMS[name][0][0]["op"] == "gated"
            want = {"forward_pre": 3 if gated else 2, "recompute": 0 if gated else 1}.get(role, 1)
            assert r.sass["UTMASTG"] == want * subs, (name, role, r.sass)
            assert (r.sass["STG"] > 0) is (role == "recompute" and gated), (name, role, r.sass)


def _split(v: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) of a gated (.., 2N) matrix in its layout."""
    n = v.shape[-1] // 2
    return (v[..., :n], v[..., n:]) if layout == "halves" else (v[..., 0::2], v[..., 1::2])


def _join(gate: torch.Tensor, up: torch.Tensor, layout: str) -> torch.Tensor:
    return torch.cat([gate, up], -1) if layout == "halves" else torch.stack([gate, up], -1).flatten(-2)


def _models(name: str, module, monkeypatch, seen: list) -> None:
    """Each kernel replaced by a torch model of its contract (no GPU here): the backward GEMMs (batched f32 products;
    recompute's G = dOut * act'(acc + bias), a gated one's dgate and dup in the forward's layout) with their operands'
    layouts checked, and the columns kernels over (rows, cols) matrices (G from dOut and pre, a band's column sums of
    f32, the bands added in order)."""
    epilogue = FORMS[name][0]
    gated = epilogue[0] if epilogue and epilogue[0]["op"] == "gated" else None
    act = gated["fn"] if gated else next((op["fn"] for op in epilogue if op["op"] == "activation"), "")

    def derivative(v: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        v = v.detach().requires_grad_()
        with torch.enable_grad():
            ACTS[act](v).backward(up)
        return v.grad

    def gemm(role, x, y, dst, aux=None, bias=None):
        cfg = module.TRAIN_CONFIGS[role]
        for t, unit in ((x, -1 if cfg.a_k else -2), (y, -2 if cfg.b_k else -1), (dst, -1)):
            assert t.dim() == 3 and t.stride(unit) == 1, (role, t.shape, t.stride())
            assert all(s % 8 == 0 for d, s in enumerate(t.stride()) if d != unit % 3), (role, t.stride())
        seen.append(role)
        acc = x.float() @ y.float()
        if role == "recompute" and gated:
            gate, up = _split(acc, gated["layout"])
            dout = aux.float()
            dst.copy_(_join(derivative(gate, dout * up), dout * ACTS[act](gate), gated["layout"]).to(dst.dtype))
        elif role == "recompute":
            dst.copy_(derivative(acc + bias.float(), aux.float()).to(dst.dtype))
        elif role == "forward_pre":  # pre (TMA-stored: 16-byte rows; halves: the up half at column aux's 2N / 2)
            assert aux.stride(-1) == 1 and all(x % 8 == 0 for x in aux.stride()[:-1]), aux.stride()
            pre = acc + bias.float() if bias is not None else acc
            if gated and gated["layout"] == "halves":
                half, n = aux.shape[-1] // 2, dst.shape[-1]
                assert aux.shape[-1] % 16 == 0
                aux[..., :n], aux[..., half:half + n] = pre[..., :n], pre[..., n:]
            else:
                # a TMA store writes a row's last 16 bytes whole: the pitch holds them (the backward's own buffer)
                assert gated or aux.stride(-2) >= -(-aux.shape[-1] // 8) * 8, aux.stride()
                aux.copy_(pre.to(aux.dtype))
            if gated:
                gate, up = _split(pre, gated["layout"])
                dst.copy_((ACTS[act](gate) * up).to(dst.dtype))
            else:
                dst.copy_(ACTS[act](pre).to(dst.dtype))
        else:
            assert role in ("dgrad", "wgrad") and aux is None, role
            dst.copy_(acc.to(dst.dtype))

    def cols(variant, src, pre, g, sums, rows):
        assert src.dim() == 2 and sums.dim() == 2, variant
        seen.append(variant)
        R = src.shape[0]
        if variant == "grad_cols_bands":
            sums.copy_(src.sum(0, keepdim=True).to(sums.dtype))
            return
        n = src.shape[1]
        if variant == "grad_cols_gated":
            padded = pre.shape[1] // 2 if gated["layout"] == "halves" else n
            p = pre.float()
            gate, up = (p[:, :n], p[:, padded:padded + n]) if gated["layout"] == "halves" else _split(p[:, :2 * n], "il")
            dout = src.float()
            both = (derivative(gate, dout * up), dout * ACTS[act](gate))
            if gated["layout"] == "halves":
                g[:, :n], g[:, padded:padded + n] = (v.to(g.dtype) for v in both)
            else:
                g[:, :2 * n] = _join(*both, "il").to(g.dtype)
            summed = dout
        elif variant == "grad_cols":
            g.copy_(derivative(pre.float(), src.float()).to(g.dtype))
            summed = g.float()
        else:
            summed = src.float()
        for band in range(-(-R // rows)):
            sums[band, :n] = summed[band * rows:(band + 1) * rows].sum(0)

    monkeypatch.setattr(module, "_gemm", gemm)
    monkeypatch.setattr(module, "_cols", cols, raising=False)  # (no columns pass without a bias or pre)


def _reference(name: str, args: dict, grad: torch.Tensor) -> dict:
    """float64 autograd of the batched op: act(A @ B + bias), or act(gate) * up (+ bias)."""
    leaves = {n: v.double().requires_grad_() for n, v in args.items()}
    v = leaves["a"] @ leaves["b"]
    for op in FORMS[name][0]:
        if op["op"] == "bias":
            v = v + leaves["bias"]
        elif op["op"] == "activation":
            v = ACTS[op["fn"]](v)
        else:
            gate, up = _split(v, op["layout"])
            v = ACTS[op["fn"]](gate) * up
    v.backward(grad.double())
    return {n: x.grad for n, x in leaves.items()}


def _pre(name: str, args: dict) -> torch.Tensor | None:
    """What forward_pre stores (save = "preact"): A @ B (+ bias) rounded to the output's dtype (gated: gate and up)."""
    epilogue, save = FORMS[name][:2]
    if save != "preact" or not epilogue:
        return None
    acc = args["a"].float() @ args["b"].float()
    return (acc + args["bias"].float() if epilogue[0]["op"] == "bias" else acc).bfloat16()


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 45, 29), (1, 1, 24, 72), (3, 1, 13, 16), (0, 5, 16, 8)])
def test_the_backward_glue_gives_every_batchs_gradients(rendered, name, batch, M, N, K, monkeypatch) -> None:
    """`_backward` with each kernel a torch model, against float64 autograd: dA, dB (each batch's) and the bias
    gradient (summed over the batches and rows) into NaN-poisoned buffers; only those asked for."""
    backward_glue(rendered[name][1], name, batch, M, N, K, monkeypatch)


def backward_glue(module, name: str, batch: int, M: int, N: int, K: int, monkeypatch) -> None:
    """The glue test's body, shared with the CuTe sm100 batched backward's (the same host: test_cute_sm100_training_batch.py)."""
    seen: list = []
    _models(name, module, monkeypatch, seen)
    epilogue, _, am, bm = FORMS[name]
    cols = 2 * N if epilogue and epilogue[0]["op"] == "gated" else N
    gen = torch.Generator().manual_seed(batch + M + N + K)
    a = torch.randn(batch, M, K, generator=gen) if am == "k" else torch.randn(batch, K, M, generator=gen).mT
    b = torch.randn(batch, cols, K, generator=gen).mT if bm == "k" else torch.randn(batch, K, cols, generator=gen)
    args = {"a": a.bfloat16(), "b": (b / K**0.5).bfloat16()}
    if any(op["op"] == "bias" for op in epilogue):
        dtype = torch.bfloat16 if any(op.get("dtype") == "bf16" for op in epilogue) else torch.float32
        args["bias"] = torch.randn(N, generator=gen).to(dtype)
    grad = torch.randn(batch, M, N, generator=gen).bfloat16()
    if batch == 3 and M == 1:  # autograd's gradient of a sum over the batches: batch stride 0, copied
        grad = grad[:1].expand(batch, M, N)
    want = _reference(name, args, grad)
    bufs = {f"d{n}": torch.full_like(v, float("nan")) for n, v in args.items()}
    got = module._backward(grad, *args.values(), _pre(name, args), **bufs)
    assert len(got) == len(args)
    for (n, w), g in zip(want.items(), got, strict=True):
        assert g.data_ptr() == bufs[f"d{n}"].data_ptr() or not g.numel(), n
        assert g.shape == w.shape and not g.isnan().any(), (n, g)
        assert (g.double() - w).abs().max().item() <= 2e-2 * w.abs().max().item() + 1e-3 if g.numel() else True, n
    if batch and "bias" in args:  # the columns pass saw the batch x M rows as one matrix, its bands added in order
        assert "grad_cols_bands" in seen
    # only what is asked for: dB alone
    flags = [n == "b" for n in args]
    only = module._backward(grad, *args.values(), _pre(name, args), *flags)
    assert all(x.numel() == 0 for n, x in zip(args, only, strict=True) if n != "b")
    assert only[1].shape == args["b"].shape and torch.equal(only[1], got[1])


@pytest.mark.parametrize("name", CHAINS)
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 13, 40), (1, 1, 100, 72), (2, 24, 16, 8)])
def test_the_batched_chains_glue_sums_each_vector_over_the_batches(chains, name, batch, M, N, K, monkeypatch) -> None:
    """`_backward` of a batched chain with each kernel a torch model (the chain pass sees the batch x M rows as one
    matrix, a vector along m repeated for each batch), against float64 autograd: dA, dB, a residual's (batch, M, N)
    gradient, every vector's summed over the batches and rows; into NaN-poisoned buffers."""
    chain_glue(chains[name][1], name, batch, M, N, K, monkeypatch)


def chain_glue(module, name: str, batch: int, M: int, N: int, K: int, monkeypatch) -> None:
    """The batched chains' glue test's body, shared with the CuTe sm100 batched backward's."""
    from test_cute_training_chain import _inputs, _models, checked, plan

    _models(name, module, monkeypatch)
    t, ls = plan(name)
    gen = torch.Generator().manual_seed(batch + M + N + K)
    a = torch.randn(batch, M, K, generator=gen).half()
    b = torch.randn(batch, N, K, generator=gen).half().mT  # K-major: each batch's (N, K) weight
    args = _inputs(ls, M, N, gen)
    names = [x.name for x in ls.spec.runtime_args()]
    for arg in ls.spec.runtime_args():  # a residual per batch
        if arg.shape == "matrix":
            args[arg.name] = torch.randn(batch, M, N, generator=gen).to(args[arg.name].dtype)
    grad = torch.randn(batch, M, N, generator=gen).half()
    checked(name, module, t, names, args, a, b, grad, {"da": torch.full((batch, M, K), float("nan")).half(),
                                                         "db": torch.full((batch, N, K), float("nan")).half().mT})


@pytest.mark.parametrize("name", ["cbt_bias_gelu", "cbt_swiglu"])
@pytest.mark.parametrize(("batch", "M", "N", "K"), [(3, 37, 45, 40), (2, 8, 16, 0), (0, 4, 8, 8)])
def test_forward_pre_stores_each_batchs_pre(rendered, name, batch, M, N, K, monkeypatch) -> None:
    """`_forward_pre` with forward_pre a torch model (its arguments' check, CUDA only, stubbed: A and B with 16-byte
    strides, out with 16-byte rows, as it stages them): pre (batch, M, N), or (batch, M, 2N) of gate and up, through a
    staging buffer of 16-byte rows where TMA cannot store pre in place (the halves each padded to whole 16 bytes: N
    off 8), zeros of K = 16 for an empty K, nothing for no batches."""
    forward_pre_glue(rendered[name][1], name, batch, M, N, K, monkeypatch)


def forward_pre_glue(module, name: str, batch: int, M: int, N: int, K: int, monkeypatch) -> None:
    """The forward_pre glue test's body, shared with the CuTe sm100 batched backward's."""
    _models(name, module, monkeypatch, [])
    gated = FORMS[name][0][0]["op"] == "gated"
    gen = torch.Generator().manual_seed(batch + M + N + K)
    cols = 2 * N if gated else N
    args = {"a": torch.randn(batch, M, K, generator=gen).bfloat16(),
            "b": torch.randn(batch, cols, K, generator=gen).bfloat16().mT}
    if not gated:
        args["bias"] = torch.randn(N, generator=gen)

    def check(*xs):
        out = module._tr.tma_empty(M, N, torch.bfloat16, "cpu", batch)
        return -1, batch, M, N, K, xs[:-1], out, out

    monkeypatch.setattr(module, "_check", check)
    out, pre = module._forward_pre(*args.values())
    want = args["a"].float() @ args["b"].float() + (args["bias"] if not gated else 0)
    assert pre.shape == (batch, M, cols) and pre.dtype == torch.bfloat16 and out.shape == (batch, M, N)
    assert torch.equal(pre, want.bfloat16())
