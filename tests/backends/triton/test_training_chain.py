"""Training on the Triton dense design for the other chains (issue 38): `residual`, `scale` (a constant, a runtime
scalar, a row, a column or a rowcol vector pair), `clamp`, `cast` and bias along m, in the order the forward applies
them, under the CPU interpreter (f32, f16). Gradients of A, B and of every tensor argument against float64 autograd
of the reference (specgen/kinds/gemm/testing/reference.py), NaN-poisoned gradient buffers, odd shapes, a NaN in the
output's gradient and at a clamp, `torch.autograd.gradcheck`; and an fp8 e4m3 forward's backward (f16 here: the
interpreter's bf16 dots are wrong; e4m3, e5m2 and e4m3 A x e5m2 B), whose dA and dB are the gradients of the
dequantized operands and whose scales get none."""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.gemm.testing.reference import REFERENCES, TORCH_DTYPES

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Input #. requires gradient and is not a double:UserWarning")]

BIAS_M = {"op": "bias", "along": "m", "name": "row_bias"}
RES = {"op": "residual", "dtype": "f32", "beta": 0.5}
CHAINS = {
    # each new op alone, then in chains with an activation before and after it
    "residual": [RES],
    "scale_const": [{"op": "scale", "by": "scalar", "value": -1.5}],
    "scale_alpha_relu": [{"op": "scale", "by": "scalar"}, {"op": "activation", "fn": "relu"}],
    "bias_m": [BIAS_M],
    "cast": [{"op": "cast", "dtype": "f16"}],
    "clamp": [{"op": "clamp", "min": -1.0, "max": 1.5}],
    "bias_gelu_residual": [{"op": "bias"}, {"op": "activation", "fn": "gelu"}, RES],
    "residual_silu_clamp": [RES, {"op": "activation", "fn": "silu"}, {"op": "clamp", "max": 0.5}],
    "col_tanh_row": [{"op": "scale", "by": "col"}, {"op": "activation", "fn": "gelu_tanh"},
                     {"op": "scale", "by": "row"}],
    "biasm_rowcol_sigmoid_cast": [BIAS_M, {"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "sigmoid"},
                                  {"op": "cast", "dtype": "f16"}],
    "clamp_min_relu_bias": [{"op": "clamp", "min": -0.5}, {"op": "activation", "fn": "relu"}, {"op": "bias"}],
}
SAVES = ("preact", "recompute")
ODD = (37, 45, 29)  # M, N, K: none a multiple of the 32 x 32 x 16 tiles


def chain_spec(chain: str, save: str, dtype: str = "f32", **extra: object) -> dict:
    return {
        "name": f"trc_{chain}_{save}_{dtype}", "kind": "gemm",
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": "k"}, "out": {"dtype": dtype},
        "epilogue": CHAINS[chain], "training": {"save": save}, "tile": {"m": 32, "n": 32, "k": 16},
        "triton": {"num_warps": 4}, "targets": ["triton:sm90"], **extra,
    }


def arguments(spec: dict) -> list[tuple[str, str, str]]:
    """(name, shape, spec dtype) of each runtime argument, in the chain's order (GemmSpec.runtime_args's)."""
    out = []
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            out.append((op.get("name", "bias"), f"vec_{op.get('along', 'n')}", op.get("dtype", "f32")))
        elif op["op"] == "scale" and op["by"] == "scalar" and "value" not in op:
            out.append((op.get("name", "alpha"), "scalar", "f32"))
        elif op["op"] == "scale" and op["by"] == "row":
            out.append((op.get("name", "row_scale"), "vec_m", "f32"))
        elif op["op"] == "scale" and op["by"] == "col":
            out.append((op.get("name", "col_scale"), "vec_n", "f32"))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            out += [("scale_a", "vec_m", "f32"), ("scale_b", "vec_n", "f32")]
        elif op["op"] == "residual":
            out.append((op.get("name", "c"), "matrix", op["dtype"]))
    return out


def inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> dict[str, object]:
    M, N, K = shape
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[spec["a"]["dtype"]]
    args: dict[str, object] = {"a": torch.randn(M, K, generator=gen).to(dt),
                               "b": torch.randn(N, K, generator=gen).to(dt).t()}
    for name, shape_kind, dtype in arguments(spec):
        n = {"vec_m": M, "vec_n": N}.get(shape_kind)
        if shape_kind == "scalar":
            args[name] = 0.75
        elif shape_kind == "matrix":
            args[name] = torch.randn(M, N, generator=gen).to(TORCH_DTYPES[dtype])
        else:  # scales of either sign, away from 0
            args[name] = (torch.rand(n, generator=gen) + 0.5) * (torch.randint(0, 2, (n,), generator=gen) * 2 - 1)
    return args


def reference(spec: dict, args: dict[str, object], grad: torch.Tensor):
    leaves = {n: t.detach().double().requires_grad_() if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    epilogue = [{"name": {"bias": "bias", "residual": "c"}.get(op["op"]), "along": "n", "value": None, "beta": 1.0,
                 "min": None, "max": None, **op} for op in spec["epilogue"]]
    rest = {n: t for n, t in leaves.items() if n not in ("a", "b")}
    out = REFERENCES["gemm"](epilogue, leaves["a"], leaves["b"], rest)
    out.backward(grad.double())
    return out.detach(), {n: t.grad for n, t in leaves.items() if isinstance(t, torch.Tensor)}


def run(fn, args: dict[str, object], grad: torch.Tensor):
    leaves = {n: t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    out = fn(*leaves.values())
    assert out.grad_fn is not None, "the op's output has no grad_fn"
    out.backward(grad)
    return out.detach(), {n: t.grad for n, t in leaves.items() if isinstance(t, torch.Tensor)}


def close(got: torch.Tensor, want: torch.Tensor, rel: float, what: str) -> None:
    assert got is not None, f"{what}: no gradient"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN where float64 has none (or not)"
    scale = max(want.nan_to_num(0).abs().max().item(), 1.0) if want.numel() else 1.0
    err = (got.double() - want).nan_to_num(0).abs().max().item() if want.numel() else 0.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


# every chain with save = "preact"; with "recompute" those that read a value (their pre is recomputed in f32; the
# others run the same kernels in both modes)
CASES = [(c, "preact") for c in CHAINS] + [(c, "recompute") for c in
                                           ("scale_alpha_relu", "clamp", "residual_silu_clamp", "col_tanh_row",
                                            "biasm_rowcol_sigmoid_cast", "clamp_min_relu_bias")]


@pytest.mark.parametrize(("chain", "save"), CASES)
def test_gradients_equal_float64_autograd(chain: str, save: str, load_kernel) -> None:
    spec = chain_spec(chain, save)
    mod = load_kernel(spec)
    args = inputs(spec, ODD)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(1))
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 1e-3 if "cast" in chain else 1e-5, "out")  # a cast rounds: one f16 ulp from f32 or float64
    for name in want:
        close(grads[name], want[name], 1e-5, f"d{name}")
        assert grads[name].dtype == args[name].dtype and grads[name].shape == args[name].shape, name


LONG = "biasm_rowcol_sigmoid_cast"  # every kind of gradient: a row bias, a row and a column scale, G through a cast


@pytest.mark.parametrize("save", SAVES)
def test_poisoned_buffers_and_odd_shapes(save: str, load_kernel) -> None:
    """NaN-filled dA, dB and argument-gradient buffers are written everywhere, at M = 1, N = 1, K = 1, 1x1x1 and a
    shape with every dimension off the tiles and past one column block and row band."""
    spec = chain_spec("residual_silu_clamp" if save == "recompute" else LONG, save)
    mod = load_kernel(spec)
    for shape in ((1, 45, 29), (37, 1, 29), (37, 45, 1), (1, 1, 1), (70, 66, 20)):
        args = inputs(spec, shape, seed=sum(shape))
        grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(3))
        pre = mod._forward_pre(*args.values())[1] if save == "preact" else None
        poisoned = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items() if isinstance(t, torch.Tensor)}
        got = mod._backward(grad, *args.values(), pre, **poisoned)
        _, want = reference(spec, args, grad)
        for name, g in zip(args, got, strict=True):
            if name in want:
                assert g is poisoned[f"d{name}"], name
                close(g, want[name], 1e-5, f"d{name} at {shape}")


def test_nan_in_the_output_gradient_and_at_a_clamp(load_kernel) -> None:
    """A NaN in dOut reaches float64's elements (a clamp's 0 derivative stops it, as torch's clamp backward selects 0);
    a NaN value at a clamp selects a 0 gradient there, as torch's (times silu's NaN derivative: NaN, as float64's); relu
    selects too."""
    spec = chain_spec("residual_silu_clamp", "preact")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=5)
    args["c"][2, 3] = float("nan")  # before silu and the clamp
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(6))
    grad[5, 7] = grad[9, 1] = float("nan")
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    for name in want:
        close(grads[name], want[name], 1e-5, f"d{name}")
    assert want["c"].isnan().any() and want["c"].isnan().sum() < want["c"].numel() // 10
    # relu selects (torch's threshold_backward): a NaN dOut where the input is <= 0 gives 0, not 0 x NaN
    spec = chain_spec("scale_alpha_relu", "preact")
    args = inputs(spec, ODD, seed=5)
    negative = ((args["a"].double() @ args["b"].double()) < 0).nonzero()[0]
    grad[negative[0], negative[1]] = float("nan")
    _, grads = run(getattr(load_kernel(spec), spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    for name in want:
        close(grads[name], want[name], 1e-5, f"d{name}")


def test_only_the_gradients_asked_for_and_gradcheck(load_kernel) -> None:
    """A frozen argument gets no gradient; torch.autograd.gradcheck's finite differences (f32: the spec dtypes have no
    float64) pass over every
    tensor argument of a chain with a column scale, an activation and a row scale."""
    spec = chain_spec("col_tanh_row", "preact")
    fn = getattr(load_kernel(spec), spec["name"])
    args = inputs(spec, ODD, seed=7)
    leaves = {n: t.detach().clone().requires_grad_(n in ("b", "row_scale")) for n, t in args.items()}
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(8))
    fn(*leaves.values()).backward(grad)
    _, want = reference(spec, args, grad)
    for n, t in leaves.items():
        if n in ("b", "row_scale"):
            close(t.grad, want[n], 1e-5, f"d{n}")
        else:
            assert t.grad is None, n
    small = [t.detach().clone().requires_grad_() for t in inputs(spec, (4, 5, 3), seed=9).values()]
    # fast mode: the Jacobian's projection on random vectors (a full one is ~60 calls of the interpreted kernels)
    assert torch.autograd.gradcheck(fn, small, eps=1e-2, atol=2e-2, rtol=2e-2, nondet_tol=1e-6, fast_mode=True)


def test_f16_chain(load_kernel) -> None:
    """f16 operands: G rounds to f16 for the dots, every sum in f32."""
    spec = chain_spec("bias_gelu_residual", "recompute", "f16")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=10)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(11)).half()
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 4e-3, "out")
    for name in want:
        close(grads[name], want[name], 1e-2, f"d{name}")


FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def quantize(t: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise fp8 quantization: (t / s) in `dtype` and s = amax / its largest finite value (e4m3 448, e5m2 57344)."""
    s = t.float().abs().amax(1).clamp(min=1e-12) / torch.finfo(dtype).max
    return (t.float() / s[:, None]).to(dtype), s


class Fp8Linear(torch.autograd.Function):
    """What a user of an fp8 forward writes (docs/training/triton.md): quantize x (M, K) and w (N, K) rowwise to e4m3, call
    the op, and hand the bf16 backward's dA and dB, the dequantized operands' gradients, to x and w (the
    quantization's straight-through step). `dtypes`: x's and w's fp8 formats (e4m3 both by default)."""

    @staticmethod
    def forward(ctx, x, w, bias, mod, name, dtypes=(torch.float8_e4m3fn, torch.float8_e4m3fn)):
        (a, sx), (w8, sw) = quantize(x, dtypes[0]), quantize(w, dtypes[1])
        b = w8.t()
        out, pre = mod._forward_pre(a, b, sx, sw, bias) if hasattr(mod, "_forward_pre") else (getattr(mod, name)(a, b, sx, sw, bias), None)
        ctx.save_for_backward(a, b, sx, sw, bias, pre)
        ctx.mod = mod
        return out

    @staticmethod
    def backward(ctx, grad):
        da, db, _, _, dbias = ctx.mod._backward(grad, *ctx.saved_tensors)
        return da, db.t(), dbias, None, None, None


def fp8_spec(save: str, a: str = "fp8_e4m3", b: str = "fp8_e4m3") -> dict:
    """An fp8 forward (A and B each e4m3 or e5m2) with rowwise scales (torch._scaled_mm's), then a bias and GELU; f16
    output and backward here (the interpreter's bf16 dots are wrong: the GPU test runs bf16)."""
    tag = "" if a == b == "fp8_e4m3" else f"_{a[4:]}_{b[4:]}"
    return {"name": f"trc_fp8{tag}_{save}", "kind": "gemm", "a": {"dtype": a, "major": "k"},
            "b": {"dtype": b, "major": "k"}, "out": {"dtype": "f16"},
            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "gelu"}],
            "training": {"save": save}, "tile": {"m": 32, "n": 32, "k": 32}, "triton": {"num_warps": 4},
            "targets": ["triton:sm90"]}


# e4m3 in both modes; e5m2 (preact: TMA forms) and e4m3 A x e5m2 B (recompute: pointer forms), tl.dot taking the mix
FP8_CASES = [("preact", "fp8_e4m3", "fp8_e4m3"), ("recompute", "fp8_e4m3", "fp8_e4m3"),
             ("preact", "fp8_e5m2", "fp8_e5m2"), ("recompute", "fp8_e4m3", "fp8_e5m2")]


@pytest.mark.parametrize(("save", "a_dtype", "b_dtype"), FP8_CASES)
def test_fp8_forward_backward_is_the_dequantized_operands_gradient(save: str, a_dtype: str, b_dtype: str,
                                                                   load_kernel) -> None:
    """dA and dB (f16) are the gradients of the dequantized operands A scale_a and B scale_b: float64 autograd of
    gelu((A scale_a) @ (B scale_b) + bias) w.r.t. those; the bias gets its gradient through autograd, the scales none
    (a clear error where one requires grad), and an fp8 operand that requires grad is refused with how to get it."""
    spec = fp8_spec(save, a_dtype, b_dtype)
    fa, fb = FP8[a_dtype], FP8[b_dtype]
    mod = load_kernel(spec)
    # preact: rows 16-byte aligned (the GEMMs' TMA forms, fp8 boxes converted in registers); recompute: odd (pointers)
    M, N, K = (40, 56, 48) if save == "preact" else (37, 45, 40)
    gen = torch.Generator().manual_seed(12)
    a, b = torch.randn(M, K, generator=gen).to(fa), torch.randn(N, K, generator=gen).to(fb).t()
    sa, sb = torch.rand(M, generator=gen) + 0.5, torch.rand(N, generator=gen) + 0.5
    bias = torch.randn(N, generator=gen).half()
    grad = torch.randn(M, N, generator=gen).half()
    fn = getattr(mod, spec["name"])
    deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
    deq_b = (b.double() * sb.double()[None, :]).requires_grad_()
    bias64 = bias.double().requires_grad_()
    torch.nn.functional.gelu(deq_a @ deq_b + bias64).backward(grad.double())
    pre = mod._forward_pre(a, b, sa, sb, bias)[1] if save == "preact" else None
    poisoned = {"da": torch.full((M, K), float("nan"), dtype=torch.half), "db": torch.full((N, K), float("nan"), dtype=torch.half).t(),
                "dbias": torch.full((N,), float("nan"), dtype=torch.half)}
    da, db, dsa, dsb, dbias = mod._backward(grad, a, b, sa, sb, bias, pre, **poisoned)
    assert da.dtype == db.dtype == torch.half and dsa.numel() == dsb.numel() == 0
    close(da, deq_a.grad, 1e-2, "dA (dequantized)")
    close(db, deq_b.grad, 1e-2, "dB (dequantized)")
    close(dbias, bias64.grad, 1e-2, "dbias")
    # one operand's gradient alone (frozen fp8 weights: dA only): its G alone is formed, the other GEMM not run
    da1, db1, *_ = mod._backward(grad, a, b, sa, sb, bias, pre, True, False, False, False, True)
    db2, da2 = mod._backward(grad, a, b, sa, sb, bias, pre, False, True, False, False, False)[1::-1]
    assert db1.numel() == da2.numel() == 0
    close(da1, deq_a.grad, 1e-2, "dA alone")
    close(db2, deq_b.grad, 1e-2, "dB alone")
    leaf = bias.clone().requires_grad_()
    fn(a, b, sa, sb, leaf).backward(grad)
    close(leaf.grad, bias64.grad, 1e-2, "dbias (autograd)")
    # the straight-through use: bf16 / f16 leaves quantized outside the op, their gradients the dequantized operands'
    x, w = torch.randn(M, K, generator=gen).half().requires_grad_(), torch.randn(N, K, generator=gen).half().requires_grad_()
    Fp8Linear.apply(x, w, bias, mod, spec["name"], (fa, fb)).backward(grad)
    (qx, sx), (qw, sw) = quantize(x.detach(), fa), quantize(w.detach(), fb)
    deq_x = (qx.double() * sx.double()[:, None]).requires_grad_()
    deq_w = (qw.double() * sw.double()[:, None]).requires_grad_()
    torch.nn.functional.gelu(deq_x @ deq_w.t() + bias.double()).backward(grad.double())
    close(x.grad, deq_x.grad, 1e-2, "x.grad (straight-through)")
    close(w.grad, deq_w.grad, 1e-2, "w.grad (straight-through)")
    with pytest.raises(RuntimeError, match="scale_a requires grad, but an fp8 forward's dequantization scales are inputs without grad"):
        fn(a, b, sa.clone().requires_grad_(), sb, bias)
    with pytest.raises(RuntimeError, match=rf"a \({a_dtype}\) requires grad.*_backward\(grad, \.\.\.\)"):
        fn(a.clone().requires_grad_(), b, sa, sb, bias)
    with pytest.raises(RuntimeError, match=rf"b \({b_dtype}\) requires grad"):
        fn(a, b.clone().requires_grad_(), sa, sb, bias)

