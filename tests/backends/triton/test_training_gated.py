"""Training with a gated epilogue (SwiGLU, GeGLU; issue 38's gated row) on the Triton design, under the CPU
interpreter: pre = A @ B has B's 2N columns (gate and up, in the forward's layout), G = [dOut * up * act'(gate),
dOut * act(gate)] is formed once (by the column pass from the saved pre, or by the recompute GEMM's epilogue) in
that layout, the bias after the gate gets dOut's column sum, and dgrad / wgrad are the plain GEMMs over 2N.
Gradients against float64 autograd of the reference (both layouts, SiLU and the GELUs, both save modes, odd
shapes, M = 1, each GEMM's TMA and pointer forms), NaN-poisoned gradient buffers, NaN in dOut, the bias gradient
alone, and torch.autograd.gradcheck. A few representative cases, not a cross product (the suite's time)."""

from __future__ import annotations

import pytest
import torch

from backends.triton.test_training import assert_compiled_step_matches_eager, close, forms_launched, run
from specgen.kinds.gemm.testing.reference import REFERENCES, TORCH_DTYPES

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Input #. requires gradient and is not a double:UserWarning")]

ODD = (37, 45, 29)  # M, N (outputs: B has 90 columns), K: none a multiple of the 32 x 32 x 16 tiles
ALIGNED = (40, 56, 40)  # off the tiles, every row a multiple of 16 bytes: TMA reads every operand


def gated_spec(layout: str, fn: str, save: str, bias: bool = True, dtype: str = "f32", b_major: str = "k") -> dict:
    return {
        "name": f"train_gated_{layout}_{fn}_{save}_{'bias' if bias else 'plain'}_{dtype}_{b_major}",
        "kind": "gemm",
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": b_major}, "out": {"dtype": dtype},
        "epilogue": [{"op": "gated", "fn": fn, "layout": layout}, *([{"op": "bias"}] if bias else [])],
        "training": {"save": save},
        "tile": {"m": 32, "n": 32, "k": 16}, "triton": {"num_warps": 4}, "targets": ["triton:sm90"],
    }


def gated_inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """a (M, K), b (K, 2N) in the spec's major (k: the (2N, K) gate_up weight's w.t()), the bias (N,)."""
    M, N, K = shape
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[spec["a"]["dtype"]]
    a = torch.randn(M, K, generator=gen).to(dt)
    b = (torch.randn(2 * N, K, generator=gen).to(dt).t() if spec["b"]["major"] == "k"
         else torch.randn(K, 2 * N, generator=gen).to(dt))
    args = {"a": a, "b": b}
    if len(spec["epilogue"]) > 1:
        args["bias"] = torch.randn(N, generator=gen).to(dt)
    return args


def gated_reference(spec: dict, args: dict[str, torch.Tensor], grad: torch.Tensor):
    """float64 autograd of the reference: act(gate) * up (+ bias), gate and up by the layout."""
    leaves = {n: t.detach().double().requires_grad_() for n, t in args.items()}
    epilogue = [{"name": "bias", "along": "n", **op} if op["op"] == "bias" else op for op in spec["epilogue"]]
    out = REFERENCES["gemm"](epilogue, leaves["a"], leaves["b"], {k: v for k, v in leaves.items() if k == "bias"})
    out.backward(grad.double())
    return out.detach(), {n: t.grad for n, t in leaves.items()}


# (layout, fn, save, bias, dtype, b major, shape): both layouts and saves, SiLU and both GELUs, f32 and f16, either
# B major, shapes off the tiles (pointer forms: f32 rows of 29 are not 16-byte multiples) and aligned (TMA forms)
CASES = [
    ("halves", "silu", "preact", True, "f32", "k", ODD),
    ("interleaved", "gelu", "recompute", True, "f32", "k", ODD),
    ("halves", "gelu_tanh", "recompute", False, "f32", "mn", ALIGNED),
    ("interleaved", "silu", "preact", False, "f16", "k", ALIGNED),
]


@pytest.mark.parametrize(("layout", "fn", "save", "bias", "dtype", "b_major", "shape"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[4]}-{c[5]}" for c in CASES])
def test_gated_gradients_equal_float64_autograd(layout, fn, save, bias, dtype, b_major, shape, load_kernel,
                                                monkeypatch) -> None:
    spec = gated_spec(layout, fn, save, bias, dtype, b_major)
    mod = load_kernel(spec)
    args = gated_inputs(spec, shape, seed=1)
    grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(2)).to(args["a"].dtype)
    launched = forms_launched(mod, monkeypatch)
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = gated_reference(spec, args, grad)
    f32 = dtype == "f32"
    close(out, want_out, 1e-5 if f32 else 4e-3, "out")
    for name in args:
        close(grads[name], want[name], 1e-5 if f32 else 1e-2, f"d{name}")
        assert grads[name].dtype == args[name].dtype and grads[name].stride() == args[name].stride(), name
    form = "tma" if shape == ALIGNED else "pointer"
    # the forward's guard copies an A it cannot read in place into an aligned tensor: forward_pre reads that
    first = ("forward_pre", "tma") if save == "preact" else ("recompute", form)
    # preact: the forward stores pre, the column pass forms G (and dbias); recompute: G from the GEMM's epilogue,
    # then dbias (dOut's column sum) where there is a bias
    cols = [("grad_cols", "")] if save == "preact" or bias else []
    assert launched == [first, *cols, ("dgrad", form), ("wgrad", form)], launched


SHAPES = [(1, 45, 29), (1, 1, 1), (33, 3, 50)]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_odd_shapes(shape: tuple[int, int, int], load_kernel) -> None:
    """M = 1, 1x1x1 and N = 3 (B's 6 columns: a halves gate tile reads up columns past N, which no output keeps)."""
    for layout, fn, save in (("halves", "silu", "preact"), ("interleaved", "gelu", "recompute")):
        spec = gated_spec(layout, fn, save)
        mod = load_kernel(spec)
        args = gated_inputs(spec, shape, seed=3)
        grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(4))
        out, grads = run(getattr(mod, spec["name"]), args, grad)
        want_out, want = gated_reference(spec, args, grad)
        close(out, want_out, 1e-5, f"{layout} out")
        for name in args:
            close(grads[name], want[name], 1e-5, f"{layout} d{name}")


@pytest.mark.parametrize(("layout", "fn", "save"), [("halves", "silu", "preact"), ("interleaved", "gelu", "recompute")])
def test_poisoned_buffers_and_nan_in_the_output_gradient(layout: str, fn: str, save: str, load_kernel,
                                                         monkeypatch) -> None:
    """NaN-filled dA, dB and dbias buffers are written everywhere (the column pass in row bands: f32 partial sums,
    then their sum); a NaN in dOut gives float64 autograd's NaN pattern (its row of dA, B's gate and up columns of
    its output column, its bias element)."""
    from specgen.runtime.triton import training as runtime

    spec = gated_spec(layout, fn, save)
    mod = load_kernel(spec)
    monkeypatch.setattr(runtime, "BAND_MIN_ROWS", 8)
    monkeypatch.setitem(mod.GRAD_COLS, "BLOCK_M", 8)
    args = gated_inputs(spec, ODD, seed=5)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(6))
    pre = mod._forward_pre(*args.values())[1] if save == "preact" else None
    if pre is not None:
        assert pre.shape == (ODD[0], 2 * ODD[1])
    poisoned = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items()}
    da, db, dbias = mod._backward(grad, *args.values(), pre, **poisoned)
    assert da is poisoned["da"] and db is poisoned["db"] and dbias is poisoned["dbias"]
    _, want = gated_reference(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{name}: an element was not written"
        close(got, want[name], 1e-5, f"d{name}")
    grad[5, 7] = float("nan")
    da, db, dbias = mod._backward(grad, *args.values(), pre)
    _, want = gated_reference(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert torch.equal(got.isnan(), want[name].isnan()), f"d{name}: NaN where float64 has none (or not)"
        assert got.isnan().any()
        close(got.nan_to_num(0), want[name].nan_to_num(0), 1e-5, f"d{name}")


def test_the_bias_gradient_alone(load_kernel, monkeypatch) -> None:
    """Only the bias asks for a gradient: dOut's column sum, no G formed and no GEMM run."""
    spec = gated_spec("halves", "silu", "preact")
    mod = load_kernel(spec)
    args = gated_inputs(spec, ODD, seed=7)
    leaves = {n: t.detach().clone().requires_grad_(n == "bias") for n, t in args.items()}
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(8))
    out = getattr(mod, spec["name"])(*leaves.values())
    launched = forms_launched(mod, monkeypatch)
    out.backward(grad)
    assert launched == [("grad_cols", "")], launched
    close(leaves["bias"].grad, grad.double().sum(0), 1e-5, "dbias")
    assert leaves["a"].grad is None and leaves["b"].grad is None


def test_gradcheck(load_kernel) -> None:
    """torch.autograd.gradcheck's finite differences (in f32, the widest spec dtype: float64 is none)."""
    spec = gated_spec("interleaved", "gelu", "recompute")
    fn = getattr(load_kernel(spec), spec["name"])
    args = [t.detach().clone().requires_grad_() for t in gated_inputs(spec, (3, 2, 3), seed=9).values()]
    assert torch.autograd.gradcheck(fn, args, eps=1e-2, atol=2e-2, rtol=2e-2, nondet_tol=1e-6)


def test_compiled_training_step_has_no_graph_break(load_kernel) -> None:
    """torch.compile(fullgraph=True) over the gated forward and a loss, backward through the compiled graph (the
    training step the issue asks for, as test_training.py's for the plain op): no graph break, eager's gradients."""
    spec = gated_spec("halves", "silu", "preact")
    assert_compiled_step_matches_eager(getattr(load_kernel(spec), spec["name"]), gated_inputs(spec, ODD, seed=10))
