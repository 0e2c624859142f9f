"""The other chains' backward on the dense CuTe sm90 design (issue 38; session 33; plan: specgen/kinds/gemm/designs/
cute_sm90/training.py, templates/gemm/cute/chain_pass.jinja) on this CPU machine. No GPU runs here (numerics:
tests/gpu/test_training_cute_chain_gpu.py), so:

- check accepts four chains covering every op on cute:sm90 (scale by col, a bias, GELU-tanh, a residual with beta = 0.5,
  preact; bias along m, scale by rowcol, sigmoid, cast, recompute; a runtime scalar, clamp [-1, 2], a residual the pass
  replays, scale by row and by a constant, preact; an f32 residual with beta = 2 and bias along m: no op reads a value);
  the plan's chain, pre's op, gradient kinds and the recompute companion stored in the output's dtype;
- every kernel a chain module adds or changes compiles for sm_90a in one test, with the plan's SMEM to the byte and no
  spills: forward_pre (pre by TMA beside out), recompute, dgrad, wgrad, the chain pass of each form (16-byte loads and
  stores) and the bands' sum;
- the backward's host glue (`_forward_pre`, `_backward`: pre saved or recomputed, G, each argument's gradient, the need
  flags, NaN-poisoned buffers, M = 1, N and K off the tile and off whole vectors) with each kernel replaced by a torch
  model of its contract, against float64 autograd of the chain;
- a render that skipped check refuses what TRN001 still refuses (an output of another dtype; batch = true renders since
  session 33: test_cute_training_batch.py)."""

from __future__ import annotations

import json

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
# name: (epilogue, save)
FORMS = {
    "cch_col": ([{"op": "scale", "by": "col"}, {"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "gelu_tanh"},
                 {"op": "residual", "dtype": "f16", "beta": 0.5}], "preact"),
    "cch_rowcol": ([{"op": "bias", "along": "m", "dtype": "f32"}, {"op": "scale", "by": "rowcol"},
                    {"op": "activation", "fn": "sigmoid"}, {"op": "cast", "dtype": "bf16"}], "recompute"),
    "cch_clamp": ([{"op": "scale", "by": "scalar"}, {"op": "clamp", "min": -1.0, "max": 2.0}, {"op": "residual", "dtype": "f16"},
                   {"op": "scale", "by": "row"}, {"op": "scale", "by": "scalar", "value": 0.5}], "preact"),
    "cch_nopre": ([{"op": "residual", "dtype": "f32", "beta": 2.0}, {"op": "bias", "along": "m"}], "recompute"),
}
# (start: pre's op, the gradients and how the chain pass writes them, the residuals it replays)
PLANS = {"cch_col": (0, (("col_scale", "cols"), ("bias", "cols"), ("c", "matrix")), ()),
         "cch_rowcol": (1, (("bias", "rows"), ("scale_a", "rows"), ("scale_b", "cols")), ()),
         "cch_clamp": (1, (("c", "matrix"), ("row_scale", "rows")), ("c",)),
         "cch_nopre": (-1, (("c", "matrix"), ("bias", "rows")), ())}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
ACTS = {"gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "sigmoid": torch.sigmoid}


def spec(name: str, **more) -> dict:
    epilogue, save = FORMS[name]
    return {"name": name, "kind": "gemm", "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
            "out": {"dtype": "f16"}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 64},
            "cute": {"mma_warpgroups": 2}, "schedule": {"persistent": True}, "epilogue": epilogue,
            "training": {"save": save}, **more}


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def plan(name: str):
    ls = load(spec(name))
    return DESIGN.plan(ls, [TARGET], {"cute:sm90": resolve(ls.spec, TARGET)}).training, ls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{name: (module text, module)}: each form rendered and imported."""
    folder = tmp_path_factory.mktemp("cute_chain_train")
    return {name: load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_chain_train_")[::-1]
            for name in FORMS}


@pytest.mark.parametrize("name", list(FORMS))
def test_check_accepts_it_and_the_plan_replays_the_chain(name: str) -> None:
    start, kinds, replayed = PLANS[name]
    t, ls = plan(name)
    assert [d for d in check_all([ls]) if d.severity == "error"] == []
    assert (t.start, t.grad_kinds, t.replayed, t.bias) == (start, kinds, replayed, "")
    assert [op.op for op in t.chain] == [op["op"] for op in FORMS[name][0]]
    save = FORMS[name][1]
    pre_role = [] if start < 0 else ["forward_pre" if save == "preact" else "recompute"]
    assert list(t.gemms) == [*pre_role, "dgrad", "wgrad"] and t.kernels[-2:] == ["chain_pass", "grad_cols_bands"]
    assert t.forms_g == (name != "cch_nopre")
    by_role = {c.companion: c for c in resolve(ls.spec, TARGET).companions}
    if pre_role == ["recompute"]:  # ruled as the Triton chain's f32 pre GEMM, planned with this kernel's f16 pre
        assert by_role["recompute"].spec.out.dtype.value == "f32"
        assert t.gemms["recompute"].config.smem_bytes < by_role["recompute"].budget.total


def test_the_module_renders_the_chain_pass_and_a_differentiable_jax_entry(rendered) -> None:
    for name, (text, module) in rendered.items():
        t = plan(name)[0]
        assert list(module.TRAIN_CONFIGS) == list(t.gemms) and module._chain_launcher.configs == ("chain_pass",)
        assert module._cols_launcher.configs == ("grad_cols_bands",)  # the columns pass: its bands kernel only
        assert "return _jax_differentiable()(" in text  # the JAX entry: a jax.custom_vjp (test_cute_jax_train_more.py)
        assert ("def _forward_pre(" in text) == t.stores_pre


# what each form compiles: every role of cch_col, the recompute of cch_rowcol, each form's chain pass
ROLES = {"cch_col": ("forward_pre", "dgrad", "wgrad"), "cch_rowcol": ("recompute",), "cch_clamp": (), "cch_nopre": ()}


def test_every_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, tmp_path, monkeypatch) -> None:
    """One test compiles (CuTe compiles are slow: under xdist a fixture would compile once per worker)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    for name, (_, module) in rendered.items():
        passes = {"chain_pass": module._chain_launcher, **({"grad_cols_bands": module._cols_launcher} if name == "cch_col" else {})}
        results = compile_training(module, name, ROLES[name], passes, (*SASS_OPS, "LDG", "STG"))
        for role, r in results.items():
            assert not r.error, (name, role, r)
            assert r.compiler_smem == r.plan_smem, (name, role, r)
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, role, r.sass)
            if role in ("chain_pass", "grad_cols_bands"):
                assert r.sass["LDG"] > 0 and r.sass["STG"] > 0 and r.sass["HGMMA"] == 0, (name, role, r.sass)
                continue
            cfg = module.TRAIN_CONFIGS[role]
            subs = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
            assert r.sass["HGMMA"] > 0 and r.sass["UTMALDG"] > 0, (name, role, r.sass)
            # out stored by TMA, forward_pre's pre beside each of its subtiles; recompute stores pre as its output
            assert r.sass["UTMASTG"] == (2 if role == "forward_pre" else 1) * subs, (name, role, r.sass)
        if name == "cch_col":  # 16-byte vectors: dOut's and pre's loads a row (4 rows a batch, then the band's last
            # rows one at a time) and the f32 column scale's two and the bias's one; G's and c's gradient stores a row,
            # the two column sums' (f32: two each)
            assert (results["chain_pass"].sass["LDG"], results["chain_pass"].sass["STG"]) == (2 * 5 + 3, 2 * 5 + 4)


def _apply(ops: list, v: torch.Tensor, args: dict) -> torch.Tensor:
    """The chain's ops (spec dicts) on v, in v's dtype (a cast rounds through its dtype), as eager torch applies them."""
    for op in ops:
        names = _names(op)
        if op["op"] == "bias":
            x = args[names[0]].to(v.dtype)
            v = v + (x[:, None] if op.get("along") == "m" else x[None, :])
        elif op["op"] == "scale" and op["by"] == "scalar":
            v = v * (op["value"] if "value" in op else args[names[0]])
        elif op["op"] == "scale":
            if op["by"] in ("row", "rowcol"):
                v = v * args[names[0]].to(v.dtype)[:, None]
            if op["by"] in ("col", "rowcol"):
                v = v * args[names[-1]].to(v.dtype)[None, :]
        elif op["op"] == "activation":
            v = ACTS[op["fn"]](v)
        elif op["op"] == "residual":
            v = v + op.get("beta", 1.0) * args[names[0]].to(v.dtype)
        elif op["op"] == "clamp":
            v = v.clamp(op.get("min"), op.get("max"))
        else:
            v = v.to(TORCH[op["dtype"]]).to(v.dtype)
    return v


def _names(op: dict) -> list[str]:
    """An op's runtime arguments' names (the spec's defaults)."""
    if op["op"] != "scale":
        return {"bias": ["bias"], "residual": ["c"]}.get(op["op"], [])
    return [] if "value" in op else {"scalar": ["alpha"], "row": ["row_scale"], "col": ["col_scale"],
                                     "rowcol": ["scale_a", "scale_b"]}[op["by"]]


def _models(name: str, module, monkeypatch) -> None:
    """Each kernel replaced by a torch model of its contract (the CPU has no GPU to run them): the GEMMs (f32 sums;
    forward_pre's pre after the ops before `start`, rounded, out the rest; recompute's pre), the chain pass (G and the
    gradients from dOut and pre by torch autograd of the chain from pre, the ops before pre straight through; its
    operands' layouts checked: whole-vector pitches, zero-padded vectors along n, each gradient's buffer) and the bands'
    sum."""
    ops, start = FORMS[name][0], PLANS[name][0]
    t, ls = plan(name)
    arg_names = [a.name for a in ls.spec.runtime_args()]
    roles = {a.name: a.shape for a in ls.spec.runtime_args()}

    def gemm(role, x, y, dst, aux=None, *args):
        acc = x.float() @ y.float()
        if role in ("forward_pre", "recompute"):
            given = dict(zip(arg_names, args, strict=True))
            acc = _apply(ops[:start], acc, given)
            if role == "forward_pre":
                aux.copy_(acc.to(aux.dtype))
                acc = _apply(ops[start:], acc, given)
        dst.copy_(acc.to(dst.dtype))

    def chain(src, pre, g, *rest):
        M, N = src.shape
        kernel_args = [n for n in arg_names if roles[n] != "matrix"] + list(t.replayed)
        params, bufs, (rows, wants) = rest[:len(kernel_args)], rest[len(kernel_args):-2], rest[-2:]
        assert src.stride(0) % 8 == 0 and pre.stride(0) % 8 == 0 and g.stride(0) % 8 == 0
        assert src.shape == pre.shape == g.shape  # one (M, N) in the fake
        for n, p in zip(kernel_args, params, strict=True):  # an (M,) row vector, a replayed residual (M, N)
            assert roles[n] != "vec_m" or p.shape == (M,), n
            assert roles[n] != "matrix" or (p.shape == (M, N) and p.stride(0) * p.element_size() % 16 == 0), n
        assert len(bufs) == len(t.grad_kinds) and rows >= 32
        given = {}
        for n, p in zip(kernel_args, params, strict=True):
            if roles[n] == "vec_n":  # zero-padded to whole vectors
                assert p.shape[0] == 1 and p.shape[1] % 8 == 0 and not p[0, N:].any(), n
                p = p[0, :N]
            given[n] = p if isinstance(p, float) else p.float().requires_grad_()
        for n in arg_names:  # a residual the pass does not replay: not read (its gradient needs no value)
            given.setdefault(n, torch.zeros(M, N).requires_grad_())
        acc = torch.zeros(M, N, requires_grad=True)
        with torch.enable_grad():
            v = _apply(ops[:start] if start >= 0 else ops, acc, given)
            if start >= 0:  # the value pre holds, the gradient straight through the ops before it
                v = _apply(ops[start:], pre.float() + (v - v.detach()), given)
            v.backward(src.float())
        if t.forms_g:
            g.copy_(acc.grad.to(g.dtype))
        bands = -(-M // rows)
        for i, ((n, kind), buf) in enumerate(zip(t.grad_kinds, bufs, strict=True)):
            if not (wants >> i) & 1:
                continue
            grad = given[n].grad
            if kind == "matrix":
                assert buf.stride(0) % 8 == 0 and buf.shape == (M, N), n
                buf.copy_(grad.to(buf.dtype))
            else:  # partial sums: the whole sum in the first row, the other partials zero
                assert buf.shape == ((bands, -(-N // 8) * 8) if kind == "cols" else (-(-N // 8), M)), (n, buf.shape)
                assert buf.stride(0) % 4 == 0 and buf.stride(1) == 1, n  # 16-byte pitches, as its fake says
                buf.zero_()
                buf[0, :grad.numel()] = grad.reshape(-1)

    def bands(src, pre, g, sums, rows):
        assert src.shape[0] == rows
        sums.copy_(src.sum(0, keepdim=True).to(sums.dtype))

    monkeypatch.setattr(module, "_gemm", gemm)
    monkeypatch.setattr(module, "_chain_launcher", type("L", (), {"ready": {(-1, "chain_pass"): (chain, None)}})())
    monkeypatch.setattr(module, "_cols_launcher", type("L", (), {"ready": {(-1, "grad_cols_bands"): (bands, None)}})())


def _inputs(ls, M: int, N: int, gen: torch.Generator) -> dict:
    """Each runtime argument (a scale's values in [0.5, 1.5), the rest normal; a runtime scalar 0.75)."""
    out = {}
    for arg in ls.spec.runtime_args():
        if arg.shape == "scalar":
            out[arg.name] = 0.75
            continue
        shape = {"matrix": (M, N), "vec_m": (M,), "vec_n": (N,)}[arg.shape]
        v = torch.rand(shape, generator=gen) + 0.5 if "scale" in arg.name else torch.randn(shape, generator=gen)
        out[arg.name] = v.to(TORCH[arg.dtype.value])
    return out


def checked(name: str, module, t, names: list, args: dict, a, b, grad, bufs: dict) -> tuple:
    """`_backward` (pre as forward_pre stores it) into NaN-poisoned buffers (`bufs`: dA's and dB's; each gradient's
    added), against float64 autograd of the chain: (its gradients, them by buffer name, pre). Shared by the batched
    chains' test (test_cute_training_batch.py)."""
    leaves = {n: (v if isinstance(v, float) else v.double().requires_grad_()) for n, v in args.items()}
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    # the reference rounds the value at pre to the output's dtype (as forward_pre stores it and the backward reads it:
    # a clamp's step where f16 and float64 differ would move a gradient by a whole dOut), its gradient straight through
    ops, start = FORMS[name][0], t.start
    v = _apply(ops[:start] if start >= 0 else ops, a64 @ b64, leaves)
    if start >= 0:
        v = _apply(ops[start:], v + (v.half().double() - v).detach(), leaves)
    v.backward(grad.double())
    # forward_pre's pre (its host, `_forward_pre`, checks for a CUDA device: the GPU tests run it): the ops before
    # `start` on the f32 product, rounded to the output's dtype
    pre = _apply(ops[:start], a.float() @ b.float(), args).half() if t.stores_pre else None
    for n, _ in t.grad_kinds:
        bufs[f"d{n}"] = torch.full_like(args[n], float("nan"))
    got = module._backward(grad, a, b, *(args[n] for n in names), pre, **bufs)
    assert len(got) == 2 + len(names)
    wants = {"da": a64.grad, "db": b64.grad} | {f"d{n}": leaves[n].grad for n, _ in t.grad_kinds}
    results = {"da": got[0], "db": got[1]} | {f"d{n}": got[2 + names.index(n)] for n, _ in t.grad_kinds}
    for n, want in wants.items():
        g = results[n]
        assert g.data_ptr() == bufs[n].data_ptr() and g.shape == want.shape and not g.isnan().any(), n
        assert (g.double() - want).abs().max().item() <= 2e-2 * want.abs().max().item() + 1e-3, n
    return got, results, pre


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("M", "N", "K"), [(96, 64, 80), (1, 100, 72), (37, 13, 40)])
def test_the_backward_glue_gives_the_chains_gradients(rendered, name, M, N, K, monkeypatch) -> None:
    """`_forward_pre` / `_backward` with each kernel a torch model, against float64 autograd of the chain: dA, dB and
    every argument's gradient (a scalar's none) into NaN-poisoned buffers; only those asked for."""
    module = rendered[name][1]
    _models(name, module, monkeypatch)
    t, ls = plan(name)
    gen = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(N, K, generator=gen).half().t()  # K-major: the (N, K) weight's storage
    args = _inputs(ls, M, N, gen)
    names = [x.name for x in ls.spec.runtime_args()]
    grad = torch.randn(M, N, generator=gen).half()
    got, results, pre = checked(name, module, t, names, args, a, b, grad,
                                {"da": torch.full((M, K), float("nan")).half(),
                                 "db": torch.full((N, K), float("nan")).half().t()})
    if "alpha" in names:
        assert got[2 + names.index("alpha")].numel() == 0  # a runtime scalar: no gradient
    # only what is asked for: the first gradient argument alone, the rest empty
    first = t.grad_kinds[0][0]
    flags = [False, False] + [n == first for n in names]
    only = module._backward(grad, a, b, *(args[n] for n in names), pre, *flags)
    assert only[0].numel() == only[1].numel() == 0
    assert torch.equal(only[2 + names.index(first)], results[f"d{first}"])
    assert all(x.numel() == 0 for i, x in enumerate(only[2:]) if names[i] != first)


def test_a_render_that_skipped_check_refuses_what_trn001_refuses() -> None:
    ls = load(spec("cch_col", out={"dtype": "f32"}))
    assert "TRN001" in {d.rule for d in check_all([ls]) if d.severity == "error"}
    with pytest.raises(ValueError, match=r"with an output of their dtype.*TRN001"):
        DESIGN.plan(ls, [TARGET], {"cute:sm90": resolve(ls.spec, TARGET)})
