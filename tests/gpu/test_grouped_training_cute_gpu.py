"""Grouped training on cute:sm90 on a Hopper GPU (issue 38; specgen/kinds/grouped/designs/cute_sm90/training.py): each
form of CUTE_TRAINING_FORMS (preact with a per-group bias and GELU-tanh, offs, B K-major, a zeroed tail; recompute with
ReLU, the sizes index, B N-major; the plain GEMM with a bias, f16; SwiGLU halves + a bias after the gate, preact, and
GeGLU-tanh interleaved, recompute, f16: the gated backward) gives gradients of a, b and the bias through
torch.autograd on its op within 16-bit rounding of float64 autograd of the per-group loop, on ragged sizes (empty groups
first / middle / last, a group off the tile holding every row, M = 1, tiles shared by many groups), N and K off the
tiles (and off 16 bytes: the padded-buffer paths); dA is zero past the last group, an empty group's dB[g] and
dbias[g] exactly zero; NaN-poisoned gradient buffers are written everywhere; the columns pass gives the same bias
gradient bits in 16-byte vectors and an element at a time (a gradient of odd row pitch), and the same bits run to run;
and small MoE-like steps (routed tokens through the op, a loss, backward, an SGD update; the up projection with GELU, the
gate/up projection with SwiGLU) match float64. No gradcheck (bf16 / f16 kernels).

The forms without a gated op PASSED on an H200 in session 28 (28 tests); the gated forms, the columns pass's vectors
and the tests marked so below are NOT YET RUN ON A GPU (written in session 28 on a CPU box; the lead runs them).
Marked `gpu`: CI deselects it.
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
        op["op"] in ("activation", "gated") for op in spec["epilogue"]) else None
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


@pytest.mark.parametrize("name", sorted(CUTE_TRAINING_FORMS))
def test_the_columns_pass_gives_the_same_bits_in_vectors_and_elements(name: str, kernel_dir) -> None:
    """N = 200 (whole 16-byte vectors): the backward with a row-major gradient runs the columns pass's "_v" variant
    only; with the same gradient at an odd row pitch (read in place) its element variant, where it has an activation
    (without one G = dOut is an aligned copy for the GEMMs' TMA, so the vectors run again). Both within 16-bit rounding
    of float64; the bias gradient the same bits either way where its summands are dOut's own (after a gated op, or with
    no activation: each column summed over its group's rows in order); a second vector run the same bits as the first."""
    mod = module(name, kernel_dir)
    spec, args, grad = data(name, RAGGED_SIZES["first_middle_last_empty"], 200, 328, seed=9)
    values = list(args.values())
    acts = any(op["op"] in ("activation", "gated") for op in spec["epilogue"])
    pre = mod._forward_train(*values)[1] if spec["training"]["save"] == "preact" and acts else None
    odd = torch.empty(grad.shape[0], grad.shape[1] + 1, device="cuda", dtype=grad.dtype)[:, :-1].copy_(grad)

    def run(g):
        mod._cols_launcher.ready.clear()  # (the compiled functions stay cached: `ready` records what this call ran)
        got = mod._backward(g, *values, pre)
        torch.cuda.synchronize()
        return got, {v for (_, v) in mod._cols_launcher.ready}

    (vec, vec_modes), (again, _), (elem, elem_modes) = run(grad), run(grad), run(odd)
    assert vec_modes and all(v.endswith("_v") for v in vec_modes), vec_modes
    assert elem_modes and all(v.endswith("_v") != acts for v in elem_modes), elem_modes
    _, _, want = reference_grads(spec, args, grad)
    for m, x, y, z in zip([m for m in args if m != "index"], vec, again, elem, strict=True):
        assert torch.equal(x, y), f"d{m}: two runs differ"
        close(x, want[m], 2e-2, f"{name} d{m} (vectors)")
        close(z, want[m], 2e-2, f"{name} d{m} (elements)")
        if m == "bias" and (spec["epilogue"][0]["op"] == "gated" or not acts):
            assert torch.equal(x, z), "dbias: the vector and element variants sum the same values in the same order"


def test_a_small_moe_swiglu_step_matches_float64(kernel_dir) -> None:
    """Tokens routed to 4 experts (the first empty), the gate/up projection (SwiGLU, halves: each expert's (2N, K)
    weight torch.cat([w_gate, w_up]) passed transposed) + a bias through the op, a loss, backward and an SGD step: the
    updated weight and bias, and the tokens' gradient, against the same step in float64."""
    name = "cgt_swiglu_halves_bias"
    fn = getattr(module(name, kernel_dir), name)
    gen = torch.Generator(device="cuda").manual_seed(13)
    tokens, experts, n, k = 96, 4, 192, 256
    route = torch.randint(1, experts, (tokens,), device="cuda", generator=gen)  # expert 0 gets none
    order = route.argsort(stable=True)
    offs = torch.bincount(route, minlength=experts).cumsum(0).to(torch.int32)
    x = torch.randn(tokens, k, device="cuda", generator=gen).bfloat16()
    w = (torch.randn(experts, 2 * n, k, device="cuda", generator=gen) / k**0.5).bfloat16()  # (G, 2N, K): gate rows, up rows
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
            h = xs[start:end] @ ws[g]
            outs.append(torch.nn.functional.silu(h[:, :n]) * h[:, n:] + bs[g])
            start = end
        return torch.cat(outs)

    ours = step(x, w, bias, lambda xs, ws, bs: fn(xs, ws, offs, bs))
    want = step(x.double(), w.double(), bias.double(), loop)
    for got, ref, what in zip(ours, want, ("w", "bias", "dx"), strict=True):
        close(got, ref.cpu(), 2e-2, f"MoE SwiGLU step {what}")
    assert torch.equal(ours[0][0], w[0]) and torch.equal(ours[1][0], bias[0]), "the empty expert is not moved"
