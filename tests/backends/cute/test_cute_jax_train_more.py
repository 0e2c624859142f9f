"""The differentiable JAX entry (`<name>_jax`, a jax.custom_vjp: specgen/runtime/cute_jax_train.py) of `batch = true`
CuTe sm90 training modules (issue 38; session 34) on this CPU machine. No GPU runs here (numerics on the device:
tests/gpu/test_training_cute_jax_more_gpu.py), so:

- jax.grad under jax.jit traces: one XLA call per kernel the torch backward runs, each gradient in its primal's
  (batch, ...) stored shape and dtype, and every new kernel (3-D arrays: the batch mode) compiles for sm_90a;
- the JAX-side glue (zero-padding every matrix to 16-byte rows, the columns pass over the batch x M rows, the
  gradients sliced back, the bias gradient summed over the batches) with each kernel replaced by a jnp model of its
  contract (its arrays' padded extents checked), under jax.jit and a one-device jax.shard_map, against float64 autograd
  of the batched op: the forms of test_cute_training_batch.py, batch 3 and 1, M = 1, N and K off whole vectors."""

from __future__ import annotations

import pytest
import torch
from kernels import load_target_module
from test_cute_training_batch import FORMS, _reference, spec

jax = pytest.importorskip("jax")
jnp = jax.numpy

JACTS = {"gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "relu": jax.nn.relu, "silu": jax.nn.silu}
CALLS = {  # the kernels jax.grad calls, in order (the torch backward's)
    "cbt_bias_gelu": ["forward_pre", "grad_cols", "dgrad", "wgrad", "grad_cols_bands"],
    "cbt_relu_rec": ["recompute", "dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"],
    "cbt_plain": ["dgrad", "wgrad"],
    "cbt_swiglu": ["forward_pre", "grad_cols_gated", "dgrad", "wgrad"],
    "cbt_geglu_il": ["recompute", "dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"],
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cute_jax_batch_train")
    return {name: load_target_module(spec(name), "cute:sm90", folder, "_specgen_test_cute_jax_batch_")[0] for name in FORMS}


def stored_args(name: str, batch: int, M: int, N: int, K: int, dtype=None) -> list:
    """The JAX entry's arguments (stored layouts) as ShapeDtypeStructs, or random arrays where `dtype` is given."""
    epilogue, _, am, bm = FORMS[name]
    cols = 2 * N if epilogue and epilogue[0]["op"] == "gated" else N
    bias = next((op for op in epilogue if op["op"] == "bias"), None)
    shapes = [((batch, M, K) if am == "k" else (batch, K, M), jnp.bfloat16),
              ((batch, cols, K) if bm == "k" else (batch, K, cols), jnp.bfloat16)]
    if bias:
        shapes.append(((N,), jnp.bfloat16 if bias.get("dtype") == "bf16" else jnp.float32))
    if dtype is None:
        return [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    gen = torch.Generator().manual_seed(batch + M + N + K)
    return [jnp.asarray((torch.randn(s, generator=gen) / (K**0.5 if i == 1 else 1)).numpy()).astype(d)
            for i, (s, d) in enumerate(shapes)]


@pytest.mark.parametrize("name", list(FORMS))
def test_jax_grad_traces_one_call_per_kernel_in_the_primals_shapes(modules, name: str) -> None:
    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    fn = getattr(modules[name], f"{name}_jax")
    args = stored_args(name, 3, 37, 45, 29)
    grad = jax.jit(jax.grad(lambda *xs: fn(*xs).astype(jnp.float32).sum(), argnums=tuple(range(len(args)))))
    jaxpr = jax.make_jaxpr(grad)(*args)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in args]
    assert cute_train_calls(jaxpr.jaxpr) == CALLS[name]


def backward_of(module, monkeypatch) -> object:
    """The module's jt.Backward (what its template passes to `differentiable`)."""
    from specgen.runtime import cute_jax_train as jt

    seen = []
    real = jt.differentiable
    monkeypatch.setattr(jt, "differentiable", lambda entry, bw: seen.append(bw) or real(entry, bw))
    monkeypatch.setattr(module, "_JAX_TRAIN", {})
    module._jax_differentiable()
    return seen[0]


def test_every_new_kernel_of_the_jax_backward_compiles_for_sm90a(modules, fp8_modules, chain_modules, monkeypatch) -> None:
    """One test compiles each kernel new to the JAX backward once: the batched ones (3-D arrays in cutlass.jax's
    convention), and a batched fp8 forward's recompute (the fp8 kernel storing pre), fp8 columns kernel (2-D: the
    batches' rows) and dgrad (16-bit operands, the scales' and the bias's stubs), and another chain's forward_pre,
    dgrad and chain pass (a runtime scalar compiled in)."""
    from specgen.runtime import cute_jax_train as jt

    bf = jnp.dtype(jnp.bfloat16)
    todo = {"cbt_bias_gelu": ("forward_pre", "dgrad", "wgrad"), "cbt_relu_rec": ("recompute",)}
    for name, roles in todo.items():
        bw = backward_of(modules[name], monkeypatch)
        assert bw.batch
        kern = jt.kernels(bw)
        bias = ((jnp.dtype(jt._jnp(bw.bias_dtype)),) if bw.bias else ())
        for role in roles:
            ins = {"forward_pre": (bf, bf, *bias), "recompute": (bf, bf, *bias, bf)}.get(role, (bf, bf, *bias))
            outs = {"forward_pre": (bf, bf)}.get(role, (bf,))
            assert all(len(mode) == 3 for mode, _ in kern[role].layouts if len(mode) > 1), (name, role)
            obj = kern[role].compile(ins + outs, len(ins), 132)
            assert len(obj) > 1000, (name, role)
    bw = backward_of(fp8_modules["cjf8_rec_b"], monkeypatch)
    kern, f32, f8 = jt.kernels(bw), jnp.dtype(jnp.float32), (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))
    assert bw.fp8 is not None and bw.batch and set(kern) == {"recompute", "grad_cols_fp8", "dgrad", "wgrad"}
    for role, ins, outs in (("recompute", (*f8, f32, f32), (bf,)), ("grad_cols_fp8", (bf, bf, f32, f32), (bf, bf, f32)),
                            ("dgrad", (bf, bf, f32, f32), (bf,))):
        assert len(kern[role].compile(ins + outs, len(ins), 132)) > 1000, role
    # another chain's: forward_pre and dgrad with a runtime scalar compiled in and a residual read element-wise (dgrad's
    # a (1, 8) stub), the chain pass (a replayed residual, a row vector's partials)
    bw = backward_of(chain_modules["cch_clamp"], monkeypatch)
    ops = chain_modules["cch_clamp"]._jax_entry().operands[2:]
    kern, f16 = jt.kernels(bw, tuple((o.name, o.role) for o in ops)), jnp.dtype(jnp.float16)
    assert set(kern) == {"forward_pre", "chain_pass", "grad_cols_bands", "dgrad", "wgrad"} and kern["chain_pass"].scalars
    for role, ins, outs in (("forward_pre", (f16, f16, f16, f32), (f16, f16)), ("dgrad", (f16, f16, f16, f32), (f16,)),
                            ("chain_pass", (f16, f16, f32, f16), (f16, f16, f32))):
        assert len(kern[role].compile(ins + outs, len(ins), 132, scalars=(0.75,))) > 1000, role


def _models(module, name: str, monkeypatch) -> list:
    """Each kernel call replaced by a jnp model of its contract (f32 math, outputs in their dtypes), its arrays'
    contiguous extents checked (whole 16-byte rows); the forward entry (no backward of its own) a jnp model too."""

    epilogue, _, am, bm = FORMS[name]
    gated = epilogue[0] if epilogue and epilogue[0]["op"] == "gated" else None
    act = JACTS[gated["fn"] if gated else next((op["fn"] for op in epilogue if op["op"] == "activation"), "relu")]
    has_act = bool(gated) or any(op["op"] == "activation" for op in epilogue)
    seen: list = []

    def split(v):
        n = v.shape[-1] // 2
        return (v[..., :n], v[..., n:]) if gated["layout"] == "halves" else (v[..., 0::2], v[..., 1::2])

    def join(g, u):
        return jnp.concatenate([g, u], -1) if gated["layout"] == "halves" else jnp.stack([g, u], -1).reshape(g.shape[:-1] + (-1,))

    def deriv(v, up):
        return jax.vjp(act, v)[1](up)[0]

    def model(kernel, ins, outs, scalars=()):
        f = _checked(kernel, ins, seen)
        v = kernel.variant
        if v in ("forward_pre", "recompute", "dgrad", "wgrad"):
            acc = _logical(f[0], kernel.layouts[0]) @ _logical(f[1], kernel.layouts[1])
            bias = f[2] if len(ins) > (2 if v != "recompute" else 3) and v in ("forward_pre", "recompute") else None
            if v == "forward_pre":
                pre = acc + bias if bias is not None and not gated else acc
                if gated:
                    g_, u_ = split(pre)
                    out = act(g_) * u_ + (bias if bias is not None else 0)
                else:
                    out = act(pre)
                res = [pre, out]
            elif v == "recompute":
                dout = f[-1]
                if gated:
                    g_, u_ = split(acc)
                    res = [join(deriv(g_, dout * u_), dout * act(g_))]
                else:
                    res = [deriv(acc + bias if bias is not None else acc, dout)]
            else:
                res = [acc]
        else:
            src = f[0]
            if v == "grad_cols_bands":
                res = [src.sum(0, keepdims=True)]
            else:
                rows = max(module.GRAD_COLS_MIN_ROWS, -(-src.shape[0] // module.GRAD_COLS_BANDS))
                if v == "grad_cols":
                    g = deriv(f[1], src)
                    summed, res = g, [g]
                elif v == "grad_cols_gated":
                    g_, u_ = split(f[1])
                    res, summed = [join(deriv(g_, src * u_), src * act(g_))], src
                else:
                    res, summed = [], src
                bands = -(-src.shape[0] // rows)
                pad = jnp.pad(summed, ((0, bands * rows - src.shape[0]), (0, 0)))
                res.append(pad.reshape(bands, rows, -1).sum(1))
        assert [tuple(r.shape) for r in res] == [tuple(s) for s, _ in outs], (v, [r.shape for r in res], outs)
        return [r.astype(d) for r, (_, d) in zip(res, outs, strict=True)]

    def forward(a, b, *vec):
        A = a.astype(jnp.float32) if am == "k" else jnp.swapaxes(a, -1, -2).astype(jnp.float32)
        B = jnp.swapaxes(b, -1, -2).astype(jnp.float32) if bm == "k" else b.astype(jnp.float32)
        v = A @ B
        if gated:
            g_, u_ = split(v)
            v = act(g_) * u_
        if vec:
            v = v + vec[0].astype(jnp.float32)
        if has_act and not gated:
            v = act(v)
        return v.astype(jnp.bfloat16)

    _install(module, model, forward, monkeypatch)
    return seen


def _install(module, model, forward, monkeypatch) -> None:
    """jt.call replaced by `model` (kernel, inputs, outputs -> arrays), the module's forward entry by one that keeps
    its checks (`problem`) and runs `forward` (a jnp model of its kernel); the differentiable entry built afresh."""
    from specgen.runtime import cute_jax_train as jt

    class Entry:
        def __init__(self, real):
            self.real, self.problem, self.operands = real, real.problem, real.operands

        def __call__(self, *args):
            return forward(*args)

    entry = Entry(module._jax_entry())
    monkeypatch.setattr(jt, "call", model)
    monkeypatch.setattr(module, "_jax_entry", lambda: entry)
    monkeypatch.setattr(module, "_JAX_TRAIN", {})


def _logical(x, layout):
    """An array as the kernel's logical view of it: the last two dims swapped where its layout's mode swaps them."""
    mode = layout[0]
    return jnp.swapaxes(x, -1, -2) if mode[-2:] != tuple(sorted(mode))[-2:] else x


def _checked(kernel, ins, seen: list) -> list:
    """A modelled call's inputs cast to vary as jt.call casts them (under shard_map), their contiguous extents checked
    (whole 16-byte rows), then in f32; the call recorded in `seen`."""
    from specgen.runtime import jax as _rt

    seen.append(kernel.variant)
    ins = _rt.vary(_rt.varying_axes(*ins), *ins)
    for x, (mode, div) in zip(ins, kernel.layouts, strict=False):
        assert x.shape[-1] % div == 0 and x.ndim == len(mode), (kernel.variant, x.shape, mode, div)
    return [x.astype(jnp.float32) for x in ins]


@pytest.mark.parametrize("name", list(FORMS))
def test_the_jax_glue_gives_every_batchs_gradients_under_jit_and_shard_map(modules, name: str, monkeypatch) -> None:
    """jax.grad of <name>_jax with the kernels modelled, against float64 autograd of the batched op: dA and dB per
    batch, the bias gradient over every batch's rows, each in its primal's shape and dtype (batch 3 off every tile and
    vector; batch 1 with M = 1 and K = 72; an empty K and no batches for two forms); a one-device shard_map (the batch axis sharded, the bias replicated) gives
    the same gradients."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    module = modules[name]
    seen = _models(module, name, monkeypatch)
    fn = getattr(module, f"{name}_jax")
    epilogue, _, am, bm = FORMS[name]
    mesh = Mesh(jax.devices("cpu")[:1], ("x",))
    edges = ((2, 5, 13, 0), (0, 5, 16, 8)) if name in ("cbt_bias_gelu", "cbt_geglu_il") else ()  # an empty K; no batches
    for batch, M, N, K in ((3, 37, 45, 29), (1, 1, 13, 72), *edges):
        args = stored_args(name, batch, M, N, K, jnp.bfloat16)
        gen = torch.Generator().manual_seed(7)
        dout = torch.randn(batch, M, N, generator=gen).bfloat16()

        def loss(*xs, f=fn, dout=dout):
            return (f(*xs).astype(jnp.float32) * jnp.asarray(dout.float().numpy())).sum()

        argnums = tuple(range(len(args)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*args)
        specs = (P("x"), P("x"), *([P()] if len(args) > 2 else []))
        sharded = got if batch == 1 else jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh,
                                                                in_specs=specs, out_specs=specs))(*args)
        named = dict(zip(("a", "b", "bias"), (to_torch(x) for x in args), strict=False))
        named["a"] = named["a"] if am == "k" else named["a"].mT
        named["b"] = named["b"].mT if bm == "k" else named["b"]
        want = _reference(name, named, dout.float())
        for (n, w), g, s, x in zip(want.items(), got, sharded, args, strict=True):
            assert g.shape == x.shape and g.dtype == x.dtype, (name, n)
            t = to_torch(g).double()
            t = t.mT if (n == "a" and am != "k") or (n == "b" and bm == "k") else t
            if not w.numel():
                continue
            err, scale = (t - w).abs().max().item(), w.abs().max().item()
            assert err <= 2e-2 * scale + 1e-3, f"{name} d{n} at {(batch, M, N, K)}: {err:.4g} vs {scale:.4g}"
            assert jnp.array_equal(g, s), f"{name} d{n}: shard_map's gradient differs"
    assert set(seen) == set(CALLS[name]), seen


def to_torch(x) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.array(x.astype(jnp.float32)))


# ---- an fp8 forward (rowwise scales first, then [bias], [activation]; both K-major), batched or not ----------------
# name: (test_cute_training_fp8.py's form, batched)
# (the unbatched preact form's glue is the batched one's with no batch dim: its module is not rendered here)
FP8 = {"cjf8_rec": ("cf8_rec", False), "cjf8_bias": ("cf8_bias", False), "cjf8_pre_b": ("cf8_pre", True),
       "cjf8_rec_b": ("cf8_rec", True)}
FP8_CALLS = {"cf8_pre": ["forward_pre", "grad_cols_fp8", "dgrad", "wgrad", "grad_cols_bands"],
             "cf8_rec": ["recompute", "grad_cols_fp8", "dgrad", "wgrad"],
             "cf8_bias": ["grad_cols_fp8", "dgrad", "wgrad", "grad_cols_bands"]}


@pytest.fixture(scope="module")
def fp8_modules(tmp_path_factory):
    from backends.cute.test_cute_training_fp8 import spec as fp8_spec

    folder = tmp_path_factory.mktemp("cute_jax_fp8_train")
    return {name: load_target_module({**fp8_spec(form, **({"batch": True} if batched else {})), "name": name},
                                     "cute:sm90", folder, "_specgen_test_cute_jax_fp8_")[0]
            for name, (form, batched) in FP8.items()}


def _fp8_models(module, form: str, monkeypatch) -> list:
    """The fp8 backward's kernels as jnp models: forward_pre and recompute (pre = (A @ B) sa sb + bias; out = act(pre)),
    the fp8 columns kernel (U = dOut * act'(pre); G_b = U sb, G_a = sa U; U's bands' column sums), dgrad and wgrad over
    16-bit operands, the bands kernel; the forward entry a jnp model too."""
    from backends.cute.test_cute_training_fp8 import FORMS as FP8_FORMS


    _, _, _, _, act_name, _ = FP8_FORMS[form]
    out_dtype = module._jax_entry().out.jnp_dtype
    act = JACTS.get(act_name, lambda v: v)
    seen: list = []

    def model(kernel, ins, outs, scalars=()):
        f = _checked(kernel, ins, seen)
        v = kernel.variant
        if v in ("dgrad", "wgrad"):
            assert ins[0].dtype == ins[1].dtype == outs[0][1], (v, ins[0].dtype, ins[1].dtype)  # 16-bit operands
            res = [_logical(f[0], kernel.layouts[0]) @ _logical(f[1], kernel.layouts[1])]
        elif v in ("forward_pre", "recompute"):
            pre = (_logical(f[0], kernel.layouts[0]) @ _logical(f[1], kernel.layouts[1])) * f[2][:, None] * f[3]
            pre = pre + f[4] if len(f) > 4 else pre
            res = [pre, act(pre)] if v == "forward_pre" else [pre]
        elif v == "grad_cols_fp8":
            src, pre, sa, sb = f
            u = jax.vjp(act, pre)[1](src)[0] if act_name else src
            rows = max(module.GRAD_COLS_MIN_ROWS, -(-src.shape[0] // module.GRAD_COLS_BANDS))
            bands = -(-src.shape[0] // rows)
            sums = jnp.pad(u, ((0, bands * rows - src.shape[0]), (0, 0))).reshape(bands, rows, -1).sum(1)
            res = [u * sb, sa[:, None] * u, sums]
        else:
            assert v == "grad_cols_bands", v
            res = [f[0].sum(0, keepdims=True)]
        assert [tuple(r.shape) for r in res] == [tuple(s) for s, _ in outs], (v, [r.shape for r in res], outs)
        return [r.astype(d) for r, (_, d) in zip(res, outs, strict=True)]

    def forward(a, b, sa, sb, *bias):
        v = (a.astype(jnp.float32) @ jnp.swapaxes(b, -1, -2).astype(jnp.float32)) * sa[:, None] * sb
        return act(v + bias[0].astype(jnp.float32) if bias else v).astype(out_dtype)

    _install(module, model, forward, monkeypatch)
    return seen


@pytest.mark.parametrize("name", list(FP8))
def test_an_fp8_forwards_jax_grad_is_the_dequantized_operands_and_the_scales_get_zeros(fp8_modules, name: str,
                                                                                       monkeypatch) -> None:
    """jax.grad under jax.jit of <name>_jax after an fp8 forward, the kernels modelled: dA and dB the gradients of the
    dequantized A sa and B sb in the output's dtype (JAX takes the rule's cotangent dtype), in A's and B's stored shapes,
    the bias U's column sum (over every batch's rows), the scales zeros (the rule gives None); against float64 autograd;
    a one-device shard_map (batched: the batch sharded) gives the same gradients. The traced calls are the torch
    backward's."""
    from backends.cute.test_cute_training_fp8 import FORMS as FP8_FORMS
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    form, batched = FP8[name]
    a_dt, b_dt, _, has_bias, act_name, out_dt = FP8_FORMS[form]
    module = fp8_modules[name]
    seen = _fp8_models(module, form, monkeypatch)
    fn = getattr(module, f"{name}_jax")
    jd = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2, "bf16": jnp.bfloat16, "f16": jnp.float16}
    batch, M, N, K = (3, 37, 45, 29) if batched else (1, 37, 45, 29)
    lead = (batch,) if batched else ()
    gen = torch.Generator().manual_seed(5)
    a = jnp.asarray(torch.randn(lead + (M, K), generator=gen).numpy()).astype(jd[a_dt])
    b = jnp.asarray(torch.randn(lead + (N, K), generator=gen).numpy()).astype(jd[b_dt])
    sa = jnp.asarray((torch.rand(M, generator=gen) / 10 + 0.05).numpy())
    sb = jnp.asarray((torch.rand(N, generator=gen) / 10 + 0.05).numpy())
    args = [a, b, sa, sb] + ([jnp.asarray(torch.randn(N, generator=gen).numpy()).astype(jd[out_dt])] if has_bias else [])
    dout = jnp.asarray(torch.randn(lead + (M, N), generator=gen).numpy()).astype(jd[out_dt])

    def loss(*xs):
        return (fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32)).sum()

    argnums = tuple(range(len(args)))
    got = jax.jit(jax.grad(loss, argnums=argnums))(*args)
    assert seen == FP8_CALLS[form], seen  # traced once by jax.jit: the torch backward's kernels, in its order
    mesh = Mesh(jax.devices("cpu")[:1], ("x",))
    specs = (P("x") if batched else P(), P("x") if batched else P(), P(), P(), *([P()] if has_bias else []))
    sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs, out_specs=specs))(*args)
    deq_a = (to_torch(a).double() * to_torch(sa).double()[:, None]).requires_grad_()
    deq_b = (to_torch(b).double().mT * to_torch(sb).double()).requires_grad_()
    bias64 = to_torch(args[4]).double().requires_grad_() if has_bias else None
    v = deq_a @ deq_b + (bias64 if has_bias else 0)
    ACT64 = {"gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "relu": torch.relu, "": lambda t: t}
    ACT64[act_name](v).backward(to_torch(dout).double())
    want = [deq_a.grad, deq_b.grad.mT, None, None] + ([bias64.grad] if has_bias else [])
    for i, (g, s, w, x) in enumerate(zip(got, sharded, want, args, strict=True)):
        assert g.shape == x.shape and s.shape == x.shape, (name, i)
        if w is None:  # a scale: no gradient (zeros)
            assert g.dtype == x.dtype and not jnp.any(g), (name, i)
            continue
        assert g.dtype == jd[out_dt], (name, i, g.dtype)  # dA, dB: the output's dtype
        err, scale = (to_torch(g).double() - w).abs().max().item(), w.abs().max().item()
        assert err <= 2e-2 * scale + 1e-3, f"{name} grad {i}: {err:.4g} vs {scale:.4g}"
        assert jnp.array_equal(g, s), f"{name} grad {i}: shard_map's gradient differs"


# ---- the other chains (scale, residual, clamp, cast, bias along m; unbatched): test_cute_training_chain.py's forms ----
CHAIN_CALLS = {"cch_col": ["forward_pre", "chain_pass", "dgrad", "wgrad", "grad_cols_bands", "grad_cols_bands"],
               "cch_rowcol": ["recompute", "chain_pass", "dgrad", "wgrad"] + ["grad_cols_bands"] * 3,
               "cch_clamp": ["forward_pre", "chain_pass", "dgrad", "wgrad", "grad_cols_bands"],
               "cch_nopre": ["chain_pass", "dgrad", "wgrad", "grad_cols_bands"]}


@pytest.fixture(scope="module")
def chain_modules(tmp_path_factory):
    from backends.cute.test_cute_training_chain import spec as chain_spec

    folder = tmp_path_factory.mktemp("cute_jax_chain_train")
    return {name: load_target_module(chain_spec(name), "cute:sm90", folder, "_specgen_test_cute_jax_chain_")[0]
            for name in CHAIN_CALLS}


def _japply(ops: list, v, args: dict):
    """test_cute_training_chain.py's `_apply` in jnp (f32; a cast rounds through its dtype)."""
    from backends.cute.test_cute_training_chain import _names

    for op in ops:
        names = _names(op)
        if op["op"] == "bias":
            x = args[names[0]].astype(v.dtype)
            v = v + (x[:, None] if op.get("along") == "m" else x[None, :])
        elif op["op"] == "scale" and op["by"] == "scalar":
            v = v * (op["value"] if "value" in op else args[names[0]])
        elif op["op"] == "scale":
            if op["by"] in ("row", "rowcol"):
                v = v * args[names[0]].astype(v.dtype)[:, None]
            if op["by"] in ("col", "rowcol"):
                v = v * args[names[-1]].astype(v.dtype)[None, :]
        elif op["op"] == "activation":
            v = {"gelu_tanh": lambda t: jax.nn.gelu(t, approximate=True), "sigmoid": jax.nn.sigmoid}[op["fn"]](v)
        elif op["op"] == "residual":
            v = v + op.get("beta", 1.0) * args[names[0]].astype(v.dtype)
        elif op["op"] == "clamp":
            # the kernel's derivative: 1 inside [min, max], bounds included (jnp.clip's is 1/2 at a bound)
            lo, hi = (-jnp.inf if op.get("min") is None else op["min"]), (jnp.inf if op.get("max") is None else op["max"])
            v = jnp.where((v >= lo) & (v <= hi), v, jax.lax.stop_gradient(jnp.clip(v, lo, hi)))
        else:
            v = v.astype({"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}[op["dtype"]]).astype(v.dtype)
    return v


def _chain_models(module, name: str, monkeypatch) -> list:
    """The chain backward's kernels as jnp models: the GEMMs (forward_pre's pre after the ops before `start`, rounded,
    out the rest; recompute's pre), the chain pass (G and each argument's gradient by jax.vjp of the chain from pre,
    the ops before it straight through; a vector's whole sum in its partials' first row) and the bands' sum."""
    from backends.cute.test_cute_training_chain import FORMS as CHAIN_FORMS
    from backends.cute.test_cute_training_chain import PLANS

    ops, start = CHAIN_FORMS[name][0], PLANS[name][0]
    real = module._jax_entry()
    operands = real.operands[2:]
    role = {o.name: o.role for o in operands}
    tensors = [o.name for o in operands if o.role != "scalar"]
    scalar_names = [o.name for o in operands if o.role == "scalar"]
    kinds, chain_args = PLANS[name][1], [n for n in [o.name for o in operands] if role[n] != "matrix"] + list(PLANS[name][2])
    seen: list = []

    def model(kernel, ins, outs, scalars=()):
        f = _checked(kernel, ins, seen)
        v = kernel.variant
        if v in ("forward_pre", "recompute", "dgrad", "wgrad"):
            acc = _logical(f[0], kernel.layouts[0]) @ _logical(f[1], kernel.layouts[1])
            if v in ("dgrad", "wgrad"):
                res = [acc]
            else:
                given = dict(zip(tensors, f[2:], strict=True)) | dict(zip(scalar_names, scalars, strict=True))
                pre = _japply(ops[:start], acc, given)
                res = [pre, _japply(ops[start:], pre, given)] if v == "forward_pre" else [pre]
        elif v == "grad_cols_bands":
            res = [f[0].sum(0, keepdims=True)]
        else:
            assert v == "chain_pass", v
            src, pre, params = f[0], f[1], f[2:]
            given = {n: p for n, p in zip([n for n in chain_args if role[n] != "scalar"], params, strict=True)}
            given = {n: (p[0] if role[n] == "vec_n" else p) for n, p in given.items()}  # a (1, N) row
            given |= dict(zip(scalar_names, scalars, strict=True))
            # zeros varying as src does (under jax.shard_map: a vjp's input that does not vary gets its gradient summed
            # over the mesh)
            zero = src * 0.0
            for n in tensors:  # a residual the pass does not replay: not read
                given.setdefault(n, zero)
            diff = {n: given[n] for n, _ in kinds}

            def chain(acc, d):
                vals = given | d
                u = _japply(ops[:start] if start >= 0 else ops, acc, vals)
                if start >= 0:
                    u = _japply(ops[start:], pre + (u - jax.lax.stop_gradient(u)), vals)
                return u

            _, pull = jax.vjp(chain, zero, diff)
            dacc, dargs = pull(src)
            res = [dacc]
            for (n, k), (shape, _) in zip(kinds, outs[1:], strict=True):
                grad = dargs[n]
                res.append(grad if k == "matrix" else jnp.zeros(shape, jnp.float32).at[0, : grad.size].set(grad))
        assert [tuple(r.shape) for r in res] == [tuple(s) for s, _ in outs], (v, [r.shape for r in res], outs)
        return [r.astype(d) for r, (_, d) in zip(res, outs, strict=True)]

    def forward(a, b, *rest):
        given = dict(zip([o.name for o in operands], rest, strict=True))
        given = {n: (x if role[n] == "scalar" else x.astype(jnp.float32)) for n, x in given.items()}
        acc = a.astype(jnp.float32) @ jnp.swapaxes(b, -1, -2).astype(jnp.float32)
        return _japply(ops, acc, given).astype(real.out.jnp_dtype)

    _install(module, model, forward, monkeypatch)
    return seen


@pytest.mark.parametrize("name", list(CHAIN_CALLS))
def test_another_chains_jax_grad_gives_every_arguments_gradient(chain_modules, name: str, monkeypatch) -> None:
    """jax.grad under jax.jit of <name>_jax for the other chains (unbatched), the kernels modelled, against float64
    autograd of the chain (pre rounded to the output's dtype, as forward_pre stores it): dA, dB (their stored
    layouts), a residual's, a vector's (column or row sums) gradients; a runtime scalar is compiled in (a
    nondiff argument: no gradient); M, N and K off the tiles; a one-device shard_map gives the same gradients."""
    from backends.cute.test_cute_training_chain import FORMS as CHAIN_FORMS
    from backends.cute.test_cute_training_chain import PLANS, _apply, _inputs, load
    from backends.cute.test_cute_training_chain import spec as chain_spec
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    module = chain_modules[name]
    seen = _chain_models(module, name, monkeypatch)
    fn = getattr(module, f"{name}_jax")
    ls = load(chain_spec(name))
    names = [x.name for x in ls.spec.runtime_args()]
    M, N, K = 37, 45, 29
    gen = torch.Generator().manual_seed(11)
    a, b = torch.randn(M, K, generator=gen).half(), torch.randn(N, K, generator=gen).half()  # b: the (N, K) weight
    targs = _inputs(ls, M, N, gen)
    dout = torch.randn(M, N, generator=gen).half()
    scalars = {n: v for n, v in targs.items() if isinstance(v, float)}
    arrays = [n for n in names if n not in scalars]

    def jx(t):
        return jnp.asarray(t.float().numpy()).astype({torch.float16: jnp.float16, torch.bfloat16: jnp.bfloat16,
                                                      torch.float32: jnp.float32}[t.dtype])

    def loss(a_, b_, *xs):
        given = dict(zip(arrays, xs, strict=True)) | scalars
        return (fn(a_, b_, *(given[n] for n in names)).astype(jnp.float32) * jx(dout).astype(jnp.float32)).sum()

    args = [jx(a), jx(b), *(jx(targs[n]) for n in arrays)]
    argnums = tuple(range(len(args)))
    got = jax.jit(jax.grad(loss, argnums=argnums))(*args)
    assert seen == CHAIN_CALLS[name], seen
    if scalars:  # a traced scalar: the forward entry's TypeError (the kernels take it compiled in)
        with pytest.raises(TypeError, match="must be a concrete number"):
            jax.jit(lambda x, *xs: fn(*xs[:2], x, *xs[2:]))(0.5, *args)
    mesh = Mesh(jax.devices("cpu")[:1], ("x",))
    specs = tuple(P() for _ in args)
    sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs, out_specs=specs))(*args)
    leaves = {n: (v if isinstance(v, float) else v.double().requires_grad_()) for n, v in targs.items()}
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    ops, start = CHAIN_FORMS[name][0], PLANS[name][0]
    v = _apply(ops[:start] if start >= 0 else ops, a64 @ b64.t(), leaves)
    if start >= 0:
        v = _apply(ops[start:], v + (v.half().double() - v).detach(), leaves)
    v.backward(dout.double())
    grad_names = {n for n, _ in PLANS[name][1]}
    want = [a64.grad, b64.grad] + [leaves[n].grad if n in grad_names else torch.zeros(targs[n].shape) for n in arrays]
    for n, g, s, w, x in zip(["a", "b", *arrays], got, sharded, want, args, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype, (name, n)
        err, scale = (to_torch(g).double() - w.double()).abs().max().item(), w.abs().max().item()
        assert err <= 2e-2 * scale + 1e-3, f"{name} d{n}: {err:.4g} vs {scale:.4g}"
        assert jnp.array_equal(g, s), f"{name} d{n}: shard_map's gradient differs"
