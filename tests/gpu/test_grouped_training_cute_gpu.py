"""Grouped training on cute:sm90 on a Hopper GPU (issue 38; specgen/kinds/grouped/designs/cute_sm90/training.py): each
form of CUTE_TRAINING_FORMS (preact with a per-group bias and GELU-tanh, offs, B K-major, a zeroed tail; recompute with
ReLU, the sizes index, B N-major; the plain GEMM with a bias, f16) gives gradients of a, b and the bias through
torch.autograd on its op within 16-bit rounding of float64 autograd of the per-group loop, on ragged sizes (empty groups
first / middle / last, a group off the tile holding every row, M = 1, tiles shared by many groups), N and K off the
tiles (and off 16 bytes: the padded-buffer paths); dA is zero past the last group, an empty group's dB[g] and
dbias[g] exactly zero; NaN-poisoned gradient buffers are written everywhere; and a small MoE-like step (routed tokens
through the op, a loss, backward, an SGD update) matches float64. No gradcheck (bf16 / f16 kernels).

NOT YET RUN ON A GPU (written in session 28 on a CPU box; the lead runs it). Marked `gpu`: CI deselects it.
"""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.grouped.testing.reference import RAGGED_SIZES
from specgen.kinds.grouped.testing.specs import CUTE_TRAINING_FORMS
from specgen.kinds.grouped.testing.training import close, reference_grads, train_inputs

pytestmark = pytest.mark.gpu

TAIL = 17  # rows past the last group
SIZES = {"first_middle_last_empty": RAGGED_SIZES["first_middle_last_empty"],
         "one_holds_all": RAGGED_SIZES["one_holds_all"], "shared_tiles": RAGGED_SIZES["shared_tiles"], "m1": [0, 1]}
SHAPES = {"off_tile": (200, 328), "off_16_bytes": (203, 77)}  # (N, K): past whole tiles; rows off 16 bytes
_LOADED: dict[str, object] = {}


def module(name: str, kernel_dir):
    from kernels import load_target_module

    if name not in _LOADED:
        _LOADED[name] = load_target_module(CUTE_TRAINING_FORMS[name], "cute:sm90", kernel_dir, "_specgen_gpu_cute_train_")[0]
    return _LOADED[name]


def data(name: str, sizes: list[int], n: int, k: int, seed: int, tail: int = TAIL):
    spec = CUTE_TRAINING_FORMS[name]
    args = train_inputs(spec, sizes, tail, n, k, seed=seed, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    grad = torch.randn(args["a"].shape[0], n, device="cuda", generator=gen).to(args["a"].dtype)
    return spec, args, grad


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("case", sorted(SIZES))
@pytest.mark.parametrize("name", sorted(CUTE_TRAINING_FORMS))
def test_autograd_gradients_against_float64(name: str, case: str, shape: str, kernel_dir) -> None:
    mod = module(name, kernel_dir)
    n, k = SHAPES[shape]
    spec, args, grad = data(name, SIZES[case], n, k, seed=7)
    leaves = {m: (t.clone().requires_grad_() if m != "index" else t) for m, t in args.items()}
    out = getattr(mod, name)(*leaves.values())
    out.backward(grad)
    want_out, written, want = reference_grads(spec, args, grad)
    end = sum(SIZES[case])
    close(out.float().cpu()[written], want_out[written], 2e-2, f"{name} {case} {shape} out")
    if spec["groups"]["tail"] == "zero":
        assert not out[end:].any(), "rows past the last group are zeros (groups.tail)"
    assert not leaves["a"].grad[end:].any(), "dA past the last group is zero"
    for m in want:
        got = leaves[m].grad
        assert got.dtype is args[m].dtype and got.stride() == leaves[m].stride(), f"d{m}: the argument's dtype and layout"
        close(got, want[m], 2e-2, f"{name} {case} {shape} d{m}")
    for g in (g for g, s in enumerate(SIZES[case]) if s == 0):  # an empty group: exact zeros
        assert not leaves["b"].grad[g].any(), f"dB[{g}] of an empty group"
        if "bias" in leaves:
            assert not leaves["bias"].grad[g].any(), f"dbias[{g}] of an empty group"


@pytest.mark.parametrize("name", sorted(CUTE_TRAINING_FORMS))
def test_poisoned_gradient_buffers_are_written_everywhere(name: str, kernel_dir) -> None:
    mod = module(name, kernel_dir)
    spec, args, grad = data(name, RAGGED_SIZES["first_middle_last_empty"], 200, 328, seed=5)
    values = list(args.values())
    pre = mod._forward_train(*values)[1] if spec["training"]["save"] == "preact" and any(
        op["op"] == "activation" for op in spec["epilogue"]) else None
    bufs = {f"d{m}": torch.full_like(args[m], float("nan")) for m in args if m != "index"}
    got = mod._backward(grad, *values, pre, **bufs)
    _, _, want = reference_grads(spec, args, grad)
    for t, m in zip(got, [m for m in args if m != "index"], strict=True):
        assert t is bufs[f"d{m}"] and not t.isnan().any(), f"d{m}: an element was not written"
        close(t, want[m], 2e-2, f"{name} d{m}")


def test_a_small_moe_step_matches_float64(kernel_dir) -> None:
    """Tokens routed to 4 experts (one empty), the up-projection through the op, a loss, backward and an SGD step:
    the updated weight and bias, and the tokens' gradient, against the same step in float64."""
    name = "cgt_preact_bias_gelu"
    fn = getattr(module(name, kernel_dir), name)
    gen = torch.Generator(device="cuda").manual_seed(11)
    tokens, experts, n, k = 96, 4, 256, 192
    route = torch.randint(0, experts - 1, (tokens,), device="cuda", generator=gen)  # expert 3 gets none
    order = route.argsort(stable=True)
    sizes = torch.bincount(route, minlength=experts)
    offs = sizes.cumsum(0).to(torch.int32)
    x = torch.randn(tokens, k, device="cuda", generator=gen).bfloat16()
    w = (torch.randn(experts, n, k, device="cuda", generator=gen) / k**0.5).bfloat16()  # (G, N, K): b = w^T, K-major
    bias = torch.randn(experts, n, device="cuda", generator=gen).bfloat16()
    target = torch.randn(tokens, n, device="cuda", generator=gen)

    def step(xs, ws, bs, run):
        xs, ws, bs = (t.clone().requires_grad_() for t in (xs, ws, bs))
        y = run(xs[order], ws.transpose(1, 2), bs)
        loss = ((y.double() - target.double()[order]) ** 2).mean()
        loss.backward()
        return ws.detach() - 0.1 * ws.grad, bs.detach() - 0.1 * bs.grad, xs.grad

    def loop(xs, ws, bs):
        outs, start = [], 0
        for g, end in enumerate(offs.tolist()):
            outs.append(torch.nn.functional.gelu(xs[start:end] @ ws[g] + bs[g], approximate="tanh"))
            start = end
        return torch.cat(outs)

    ours = step(x, w, bias, lambda xs, ws, bs: fn(xs, ws, offs, bs))
    want = step(x.double(), w.double(), bias.double(), loop)
    for got, ref, what in zip(ours, want, ("w", "bias", "dx"), strict=True):
        close(got, ref.cpu(), 2e-2, f"MoE step {what}")
    assert torch.equal(ours[0][3], w[3]) and torch.equal(ours[1][3], bias[3]), "the empty expert is not moved"
