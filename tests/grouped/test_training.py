"""Grouped training (issue 38, the grouped kind) on the Triton design, under the CPU interpreter (f32 and f16): the
op of a ragged-M spec with a `training` section is differentiable; its backward (forward_pre or recompute, the
grad_cols pass, dgrad as a ragged-M grouped GEMM, wgrad as a ragged-K one) gives the gradients of A, B and the
per-group bias that float64 autograd of the per-group loop reference gives (a gated op's too, SwiGLU halves and
GeGLU interleaved with a bias after the gate): empty groups first, in the middle
(consecutive), last, all of them; a group holding every row; sizes off the tile; a tile shared by 3+ groups; rows
past the last group (dA = 0 there); M = 1; K tails; both B majors; both index formats. NaN-poisoned gradient
buffers are written everywhere; torch.autograd.gradcheck; torch.compile(fullgraph=True) with no graph break; what
stays refused. Small tiles (16) and shapes keep the interpreter's time down."""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.grouped.testing.training import close, reference_grads, train_inputs, train_spec

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Input #. requires gradient and is not a double:UserWarning")]

# (chain, save, dtype, b major, index, tail, group sizes, rows past the last group, N, K): each case one covered
# chain and mode against the edge its sizes hold, not a cross product.
CASES = {
    "first_last_empty_tail": ("bias_gelu_tanh", "preact", "f32", "k", "offs", "untouched", [0, 5, 17, 0], 3, 20, 19),
    "consecutive_empty_mn": ("bias_gelu_tanh", "recompute", "f32", "mn", "offs", "zero", [3, 0, 0, 20, 1], 2, 18, 33),
    "shared_tile_plain": ("plain", "preact", "f32", "k", "offs", "untouched", [2, 3, 4, 1, 5], 0, 17, 9),
    "one_holds_all_sizes": ("silu", "recompute", "f16", "k", "sizes", "untouched", [0, 37, 0], 0, 24, 20),
    "bias_f16_mn": ("bias", "preact", "f16", "mn", "offs", "zero", [9, 0, 18], 5, 16, 17),
    "m1": ("bias_sigmoid", "preact", "f32", "mn", "offs", "untouched", [0, 1], 0, 5, 3),
    "all_empty": ("bias_relu", "recompute", "f32", "k", "sizes", "zero", [0, 0, 0], 4, 6, 7),
    "gated_halves": ("swiglu_halves", "preact", "f32", "k", "offs", "zero", [0, 6, 0, 19, 2], 3, 20, 19),
    "gated_interleaved_bias_f16": ("geglu_il_bias", "recompute", "f16", "mn", "sizes", "untouched", [7, 0, 0, 12], 2, 18, 17),
}
TOL = {"f32": (1e-5, 1e-5), "f16": (4e-3, 1e-2)}  # (out, gradients) relative to the largest magnitude


def leaves(args: dict[str, torch.Tensor], needs: tuple[str, ...] = ("a", "b", "bias")) -> dict[str, torch.Tensor]:
    return {n: (t.detach().clone().requires_grad_(n in needs) if n != "index" else t) for n, t in args.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_equal_float64_autograd(case: str, load_kernel) -> None:
    chain, save, dtype, b_major, index, tail, sizes, tail_rows, n, k = CASES[case]
    spec = train_spec(chain, save, dtype, b_major, index, tail)
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, sizes, tail_rows, n, k, seed=len(sizes))
    rows = args["a"].shape[0]
    grad = torch.randn(rows, n, generator=torch.Generator().manual_seed(1)).to(args["a"].dtype)
    got = leaves(args)
    out = fn(*got.values())
    assert out.grad_fn is not None, "the op's output has no grad_fn"
    out.backward(grad)
    want_out, written, want = reference_grads(spec, args, grad)
    tol_out, tol_grad = TOL[dtype]
    close(out[written], want_out[written], tol_out, "out")
    if tail == "zero":
        assert written.all() and not out[sum(sizes):].any(), "rows past the last group: zeros (groups.tail)"
    for name in ("a", "b", "bias"):
        if name in got:
            g = got[name].grad
            assert g.dtype == got[name].dtype and g.stride() == got[name].stride(), name
            close(g, want[name], tol_grad, f"d{name}")
    assert not got["a"].grad[sum(sizes):].any(), "dA past the last group: zeros"
    for i in (i for i, s in enumerate(sizes) if s == 0):  # an empty group: exact zeros
        assert not got["b"].grad[i].any() and ("bias" not in got or not got["bias"].grad[i].any()), f"group {i}"


@pytest.mark.parametrize(("chain", "save"), [("bias_gelu_tanh", "preact"), ("geglu_il_bias", "recompute")])
def test_poisoned_gradient_buffers_are_written_everywhere(chain: str, save: str, load_kernel) -> None:
    """dA (rows past the last group too), dB (an empty group's too) and dbias, buffers filled with NaN first."""
    spec = train_spec(chain, save)
    mod = load_kernel(spec)
    args = train_inputs(spec, [0, 6, 0, 11], 3, 20, 19, seed=8)
    grad = torch.randn(args["a"].shape[0], 20, generator=torch.Generator().manual_seed(9))
    values = list(args.values())
    pre = mod._forward_train(*values)[1] if save == "preact" else None
    poisoned = {f"d{n}": torch.full_like(args[n], float("nan")) for n in ("a", "b", "bias")}
    da, db, dbias = mod._backward(grad, *values, pre, **poisoned)
    assert da is poisoned["da"] and db is poisoned["db"] and dbias is poisoned["dbias"]
    _, _, want = reference_grads(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{name}: an element was not written"
        close(got, want[name], 1e-5, f"d{name}")


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_relu_selects_on_a_nan_output_gradient(save: str, load_kernel) -> None:
    """relu's backward is torch's threshold_backward, a select: a NaN dOut where the pre-activation is <= 0 gives 0
    (dOut times the step, 0 x NaN, would be NaN), as float64 autograd's."""
    spec = train_spec("bias_relu", save)
    mod = load_kernel(spec)
    args = train_inputs(spec, [5, 0, 9], 0, 20, 19, seed=21)
    values = list(args.values())
    pre = mod._forward_train(*values)[1] if save == "preact" else None
    a, b, bias = (args[n].double() for n in ("a", "b", "bias"))
    ref_pre = torch.cat([a[:5] @ b[0] + bias[0], a[5:] @ b[2] + bias[2]])  # groups of 5, 0 and 9 rows
    neg = (ref_pre < 0).nonzero()[0]
    grad = torch.randn(14, 20, generator=torch.Generator().manual_seed(22))
    grad[neg[0], neg[1]] = float("nan")
    got = mod._backward(grad, *values, pre)
    _, _, want = reference_grads(spec, args, grad)
    for name, g in zip(("a", "b", "bias"), got, strict=True):
        assert not want[name].isnan().any() and not g.isnan().any(), f"d{name}: NaN from a NaN dOut at a negative input"
        close(g, want[name], 1e-5, f"d{name}")


def test_only_the_gradients_asked_for_and_none_for_the_index(load_kernel) -> None:
    spec = train_spec("bias_relu", "preact")
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [4, 0, 9], 2, 18, 17, seed=12)
    got = leaves(args, ("b",))
    grad = torch.randn(args["a"].shape[0], 18, generator=torch.Generator().manual_seed(13))
    fn(*got.values()).backward(grad)
    _, _, want = reference_grads(spec, args, grad)
    close(got["b"].grad, want["b"], 1e-5, "db")
    assert got["a"].grad is None and got["bias"].grad is None and got["index"].grad is None


def test_gradcheck(load_kernel) -> None:
    """torch.autograd.gradcheck's finite differences (f32, the widest spec dtype), an empty group and a tail row
    (fast mode: a random projection of the Jacobian, a few launches rather than two per input element)."""
    spec = train_spec("bias_gelu_tanh", "recompute", b_major="mn")
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [2, 0, 3], 1, 4, 3, seed=14)
    inputs = [t.detach().clone().requires_grad_() if n != "index" else t for n, t in args.items()]

    def rows_in_groups(*xs: torch.Tensor) -> torch.Tensor:
        return fn(*xs)[:5]  # the tail row is left untouched (uninitialised): not part of the function

    assert torch.autograd.gradcheck(rows_in_groups, inputs, eps=1e-2, atol=2e-2, rtol=2e-2, nondet_tol=1e-6,
                                    fast_mode=True)


def test_compiled_training_step_has_no_graph_break(load_kernel) -> None:
    """torch.compile(fullgraph=True, aot_eager) over forward and loss, backward through the compiled graph: no graph
    break, eager's gradients."""
    from torch._dynamo.utils import counters

    spec = train_spec("bias_gelu_tanh", "preact", tail="zero")
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [3, 0, 14], 2, 20, 19, seed=15)

    def step(a, b, index, bias):
        return (fn(a, b, index, bias) * 0.5).square().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = leaves(args)
    torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled.values()).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = leaves(args)
    step(*eager.values()).backward()
    for name in ("a", "b", "bias"):
        close(compiled[name].grad, eager[name].grad.double(), 1e-6, f"d{name}")


def test_out_with_grad_is_refused_and_no_grad_runs_the_forward(load_kernel) -> None:
    spec = train_spec("bias_relu", "recompute")
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [4, 7], 0, 16, 16, seed=16)
    a = args["a"].clone().requires_grad_()
    with pytest.raises(TypeError, match="out= is not supported when an argument requires grad"):
        fn(a, args["b"], args["index"], args["bias"], out=torch.empty(11, 16))
    with torch.no_grad():
        out = fn(a, args["b"], args["index"], args["bias"])
    assert out.grad_fn is None
    close(out, reference_grads(spec, args, torch.zeros(11, 16))[0], 1e-5, "out")


def test_backward_checks_the_output_gradient(load_kernel) -> None:
    spec = train_spec("bias_relu", "recompute")
    mod = load_kernel(spec)
    args = train_inputs(spec, [4, 7], 0, 16, 16, seed=16)
    with pytest.raises(TypeError, match="'grad' must have dtype torch.float32"):
        mod._backward(torch.zeros(11, 16, dtype=torch.float16), *args.values(), None)
    with pytest.raises(ValueError, match=r"'grad' must have shape \(11, 16\)"):
        mod._backward(torch.zeros(11, 11), *args.values(), None)


def test_a_grouped_spec_without_training_still_refuses_grad(load_kernel) -> None:
    spec = {**train_spec("bias_relu"), "name": "gtrain_none_bias_relu"}
    del spec["training"]
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [4, 7], 0, 16, 16)
    args["b"].requires_grad_()
    with pytest.raises(NotImplementedError, match="argument 'b' requires grad, and specgen's generated ops have no backward"):
        fn(*args.values())


def test_the_shipped_kernel_with_f16_operands(load_kernel) -> None:
    """moe_up_gelu_train_bf16 (specs/training.toml) as the interpreter runs it (bf16 -> f16), its own tiles (the
    forward's 128x128x64, the backward GEMMs' 128x256x64, wgrad's TMA-loaded): empty experts first and in the middle,
    groups off the tile, rows past the last expert."""
    from kernels import catalogue, interpreter_variant

    spec = interpreter_variant(catalogue("grouped")["moe_up_gelu_train_bf16"])
    fn = getattr(load_kernel(spec), spec["name"])
    args = train_inputs(spec, [0, 70, 0, 140, 3], 5, 136, 72)
    got = leaves(args)
    out = fn(*got.values())
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(17)).half()
    out.backward(grad)
    want_out, _, want = reference_grads(spec, args, grad)
    close(out, want_out, 4e-3, "out")
    for name in ("a", "b", "bias"):
        close(got[name].grad, want[name], 1e-2, f"d{name}")
