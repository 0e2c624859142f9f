"""Training on the Triton dense design for the other chains (issue 38): `residual`, `scale` (a constant, a runtime
scalar, a row, a column or a rowcol vector pair), `clamp`, `cast` and bias along m, in the order the forward applies
them, under the CPU interpreter (f32, f16). Gradients of A, B and of every tensor argument against float64 autograd
of the reference (specgen/kinds/gemm/testing/reference.py), NaN-poisoned gradient buffers, odd shapes, a NaN in the
output's gradient and at a clamp, `torch.autograd.gradcheck`; and an fp8 e4m3 forward's backward (f16 here: the
interpreter's bf16 dots are wrong), whose dA and dB are the gradients of the dequantized operands and whose scales get
none."""

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


@pytest.mark.parametrize("save", SAVES)
@pytest.mark.parametrize("chain", list(CHAINS))
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
