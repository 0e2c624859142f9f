"""Training on a Hopper GPU for the other chains on the dense CuTe sm90 design (issue 38, session 33; the chain pass of
templates/gemm/cute/chain_pass.jinja): specs rendered in the test (no catalogue kernel), bf16. Every op: scale by
col, row, rowcol, a runtime scalar and a constant; a residual with beta 0.5, 1 (replayed by the pass) and 2 (f32);
clamp [lo, hi]; cast; bias along n and m; GELU-tanh and sigmoid. Gradients of A, B and every tensor argument within
bf16 rounding of float64 autograd of the reference (the value at pre rounded to bf16, as forward_pre stores it: a clamp
steps where bf16 and float64 differ) and no worse than twice eager bf16 autograd's error, both save modes, aligned and
odd shapes (M = 1, N and K off the tile, N off whole 16-byte vectors); the forward's output; NaN-poisoned buffers
written everywhere with the bits of the backward into new tensors; an argument that requires grad beside one that
does not.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them. Not run on a GPU until the lead reports it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu.test_training_chain_gpu import data as _data
from gpu.test_training_chain_gpu import eager
from specgen.kinds.gemm.testing.reference import apply_epilogue

pytestmark = pytest.mark.gpu

CHAINS = {
    "col_gelu_res": [{"op": "scale", "by": "col"}, {"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"},
                     {"op": "residual", "dtype": "bf16", "beta": 0.5}],
    "biasm_rowcol_cast": [{"op": "bias", "along": "m", "name": "row_bias"}, {"op": "scale", "by": "rowcol"},
                          {"op": "activation", "fn": "sigmoid"}, {"op": "cast", "dtype": "f16"}],
    "alpha_clamp_res_row": [{"op": "scale", "by": "scalar"}, {"op": "clamp", "min": -0.5, "max": 2.0},
                            {"op": "residual", "dtype": "bf16"}, {"op": "scale", "by": "row"},
                            {"op": "scale", "by": "scalar", "value": 0.5}],
    "res_biasm": [{"op": "residual", "dtype": "f32", "beta": 2.0}, {"op": "bias", "along": "m", "name": "row_bias"}],
}
# (chain, save): both modes for two chains; without an op that reads a value (res_biasm) both modes are the same kernels
CASES = [("col_gelu_res", "preact"), ("col_gelu_res", "recompute"), ("biasm_rowcol_cast", "preact"),
         ("biasm_rowcol_cast", "recompute"), ("alpha_clamp_res_row", "preact"), ("res_biasm", "preact")]
SHAPES = [(256, 512, 384), (200, 136, 96), (1, 264, 72), (37, 100, 160)]
_MODULES: dict[str, object] = {}


def spec(chain: str, save: str) -> dict:
    return {"name": f"gpu_cch_{chain}_{save}", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"},
            "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}, "epilogue": CHAINS[chain],
            "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2},
            "schedule": {"persistent": True}, "targets": ["cute:sm90"]}


def module(s: dict, tmp_path_factory: pytest.TempPathFactory):
    if s["name"] not in _MODULES:
        from kernels import load_target_module

        _MODULES[s["name"]] = load_target_module(s, "cute:sm90", Path(tmp_path_factory.mktemp(s["name"])))[0]
    return _MODULES[s["name"]]


def data(s: dict, shape: tuple[int, int, int], seed: int = 0) -> dict[str, object]:
    """A (M, K), B (K, N) K-major and the chain's arguments, bf16 (an f32 residual or row bias as the spec says)."""
    return _data(s, shape, seed + sum(shape))


def _epilogue(s: dict) -> list[dict]:
    return [{"name": {"bias": "bias", "residual": "c"}.get(op["op"]), "along": "n", "value": None, "beta": 1.0,
             "min": None, "max": None, **op} for op in s["epilogue"]]


def _start(s: dict) -> int:
    """pre's op: the first whose backward reads its input (-1: none)."""
    return next((i for i, op in enumerate(s["epilogue"]) if op["op"] in ("activation", "clamp")
                 or (op["op"] == "scale" and op["by"] != "scalar")), -1)


def reference(s: dict, args: dict[str, object], grad: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """float64 autograd of the chain, the value at pre rounded to bf16 (its gradient straight through)."""
    leaves = {n: t.detach().double().requires_grad_() if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    rest = {n: t for n, t in leaves.items() if n not in "ab"}
    ops, start = _epilogue(s), _start(s)
    x = leaves["a"] @ leaves["b"]
    for i, op in enumerate(ops):
        if i == start:
            x = x + (x.bfloat16().double() - x).detach()
        x = apply_epilogue([op], x, rest)  # elementwise: a NaN in dOut stays where the chain puts it
    x.backward(grad.double())
    return x.detach(), {n: t.grad for n, t in leaves.items() if isinstance(t, torch.Tensor)}


@pytest.mark.parametrize(("chain", "save"), CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_chain_gradients_against_float64(chain: str, save: str, tmp_path_factory) -> None:
    s = spec(chain, save)
    fn = getattr(module(s, tmp_path_factory), s["name"])
    for shape in SHAPES:
        args = data(s, shape)
        grad = torch.randn(shape[0], shape[1], device="cuda").bfloat16()
        leaves = {n: t.clone().requires_grad_() if isinstance(t, torch.Tensor) else t for n, t in args.items()}
        out = fn(*leaves.values())
        want_out, want = reference(s, args, grad)
        assert (out.double() - want_out).abs().max().item() <= 2e-2 * want_out.abs().max().item() + 1e-2, shape
        out.backward(grad)
        theirs = eager(s, args, grad)
        for n, w in want.items():
            got = leaves[n].grad
            assert got is not None and got.dtype == args[n].dtype and got.shape == args[n].shape, n
            assert not got.isnan().any(), (n, shape)
            e_ours = (got.double() - w).abs().max().item()
            e_eager = (theirs[n].double() - w).abs().max().item()
            assert e_ours <= 2 * e_eager + 2e-2 * w.abs().max().item(), f"{s['name']} d{n} at {shape}: {e_ours:.4g} vs eager {e_eager:.4g}"


@pytest.mark.parametrize(("chain", "save"), [("col_gelu_res", "preact"), ("biasm_rowcol_cast", "recompute"),
                                             ("alpha_clamp_res_row", "preact"), ("res_biasm", "preact")])
def test_chain_poisoned_buffers(chain: str, save: str, tmp_path_factory) -> None:
    """NaN-poisoned gradient buffers are written everywhere, with the bits of the backward into new tensors (the
    kernels sum in a fixed order), at N off whole vectors (the padded paths) and at M = 1."""
    s = spec(chain, save)
    mod = module(s, tmp_path_factory)
    for shape in (SHAPES[3], SHAPES[2]):
        args = data(s, shape, seed=1)
        grad = torch.randn(shape[0], shape[1], device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(2)).bfloat16()
        pre = mod._forward_pre(*args.values())[1] if save == "preact" and _start(s) >= 0 else None
        bufs = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items() if isinstance(t, torch.Tensor)}
        got = mod._backward(grad, *args.values(), pre, **bufs)
        fresh = mod._backward(grad, *args.values(), pre)
        for (n, t), g, f in zip(args.items(), got, fresh, strict=True):
            if not isinstance(t, torch.Tensor):
                assert g.numel() == 0, n  # a runtime scalar: no gradient
                continue
            assert g.data_ptr() == bufs[f"d{n}"].data_ptr() and not g.isnan().any(), (n, shape)
            torch.testing.assert_close(g, f, rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}")


def test_an_argument_without_grad_beside_one_with(tmp_path_factory) -> None:
    """The residual requires grad and the column scale does not (then the reverse): autograd gets the gradients asked
    for (the other None), each the same as when every argument requires grad."""
    s = spec("col_gelu_res", "preact")
    fn = getattr(module(s, tmp_path_factory), s["name"])
    args = data(s, SHAPES[1], seed=3)
    grad = torch.randn(SHAPES[1][0], SHAPES[1][1], device="cuda").bfloat16()
    _, want = reference(s, args, grad)
    for asked in (("a", "c"), ("b", "col_scale", "bias")):
        leaves = {n: t.clone().requires_grad_(n in asked) if isinstance(t, torch.Tensor) else t for n, t in args.items()}
        fn(*leaves.values()).backward(grad)
        for n, t in leaves.items():
            if n not in asked:
                assert t.grad is None, n
                continue
            assert (t.grad.double() - want[n]).abs().max().item() <= 3e-2 * want[n].abs().max().item() + 1e-2, n


def test_a_nan_in_dout_gives_float64s_nan_pattern(tmp_path_factory) -> None:
    """NaNs in dOut: the clamp's derivative selects (a NaN outside [min, max] gives 0, as torch's clamp_backward), the
    rest propagate; every gradient's NaNs where float64 autograd's are."""
    s = spec("alpha_clamp_res_row", "preact")
    fn = getattr(module(s, tmp_path_factory), s["name"])
    args = data(s, SHAPES[3], seed=4)
    grad = torch.randn(SHAPES[3][0], SHAPES[3][1], device="cuda").bfloat16()
    grad[3, ::7] = float("nan")
    grad[20, 5] = float("nan")
    _, want = reference(s, args, grad)
    leaves = {n: t.clone().requires_grad_() if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    fn(*leaves.values()).backward(grad)
    for n, w in want.items():
        assert torch.equal(leaves[n].grad.isnan(), w.isnan()), n
