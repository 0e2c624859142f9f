"""Grouped training on a Hopper GPU (issue 38, the grouped kind): the shipped MoE up-projection with a backward
(moe_up_gelu_train_bf16, specs/training.toml: per-expert bias, GELU-tanh, save = "preact", rows past the last
expert zeroed) gives bf16 gradients of a, b and the bias within bf16 rounding of float64 autograd of the per-group
loop (and no worse than twice eager bf16 autograd's error) on ragged group sizes (empty experts anywhere, every
row in one, sizes off the tiles, 256 experts of 0-2 rows, all empty), N and K past whole tiles; NaN-poisoned
gradient buffers are written everywhere; a CUDA graph over forward and backward replays with new group sizes
(the group index is read on the device only) to the new sizes' gradients. And (session 26; passed on an H200) an fp8
forward's bf16 backward, e4m3, e5m2 and e4m3 x e5m2, against float64 of the dequantized operands.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES
from specgen.kinds.grouped.testing.training import reference_grads, train_inputs

pytestmark = pytest.mark.gpu

NAME = "moe_up_gelu_train_bf16"
N, K = 400, 328  # past whole tiles (128x128x64; pre, dgrad and wgrad 128x256x64): column and K tails in every GEMM
TAIL = 17  # rows past the last expert: out and dA zero there
SIZES = {"even": [128] * 4, **RAGGED_SIZES, "decode": DECODE_SIZES, "m1": [0, 1]}


def entry():
    mod = importlib.import_module(f"generated.triton.{NAME}")
    return mod, getattr(mod, NAME)


def data(sizes: list[int], seed: int, tail: int = TAIL) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """a (rows, K), b (G, K, N) K-major (a (G, N, K) weight transposed), offs, bias (G, N), all bf16 but offs; the
    output's gradient (rows, N)."""
    mod, _ = entry()
    args = train_inputs(mod.SPEC, sizes, tail, N, K, seed=seed, device="cuda")
    grad = torch.randn(args["a"].shape[0], N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + 1))
    return args, grad.bfloat16()


def within(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 2e-2) -> None:
    """bf16 results (G rounded to bf16 before each dot, sums in f32) within `rel` of want's largest magnitude (exact
    where want is all zeros: an empty expert's, every expert empty)."""
    assert got.dtype is torch.bfloat16 and tuple(got.shape) == tuple(want.shape), what
    if want.numel():
        err = (got.double().cpu() - want).abs().max().item()
        scale = want.abs().max().item()
        assert err <= rel * scale, f"{what}: {err:.4g} > {rel} x {scale:.4g}"


def eager(args: dict[str, torch.Tensor], grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """Eager bf16 autograd of the per-group loop (each expert's rows through F.linear-like bf16 ops), for scale."""
    leaves = {n: t.detach().clone().requires_grad_() for n, t in args.items() if n != "index"}
    start, outs = 0, []
    for g, end in enumerate(args["index"].tolist()):
        if end > start:
            y = F.gelu(leaves["a"][start:end] @ leaves["b"][g] + leaves["bias"][g], approximate="tanh")
            outs.append((y * grad[start:end]).float().sum())
        start = end
    if outs:
        torch.stack(outs).sum().backward()
    return {n: (torch.zeros_like(t) if t.grad is None else t.grad) for n, t in leaves.items()}


@pytest.mark.parametrize("case", list(SIZES))
def test_bf16_gradients_against_float64(case: str) -> None:
    mod, fn = entry()
    args, grad = data(SIZES[case], seed=3)
    leaves = {n: (t.clone().requires_grad_() if n != "index" else t) for n, t in args.items()}
    out = fn(*leaves.values())
    out.backward(grad)
    want_out, written, want = reference_grads(mod.SPEC, args, grad)
    end = sum(SIZES[case])
    assert written.all() and not out[end:].any(), f"{case}: rows past the last expert are zeros (groups.tail)"
    within(out, want_out, f"{case} out")
    assert not leaves["a"].grad[end:].any(), f"{case}: dA past the last expert is zero"
    theirs = eager(args, grad)
    for n in ("a", "b", "bias"):
        ours = leaves[n].grad
        assert ours.stride() == leaves[n].stride(), f"{case} d{n}: the argument's layout"
        within(ours, want[n], f"{case} d{n}")
        e_ours = (ours.double().cpu() - want[n]).abs().max().item()
        e_eager = (theirs[n].double().cpu() - want[n]).abs().max().item()
        scale = want[n].abs().max().item()
        assert e_ours <= 2 * e_eager + 1e-3 * scale, f"{case} d{n}: {e_ours:.4g} vs eager bf16 {e_eager:.4g}"
    for g in (g for g, s in enumerate(SIZES[case]) if s == 0):  # an empty expert: exact zeros
        assert not leaves["b"].grad[g].any() and not leaves["bias"].grad[g].any(), f"{case}: expert {g}"


def test_poisoned_gradient_buffers_are_written_everywhere() -> None:
    mod, _ = entry()
    args, grad = data(RAGGED_SIZES["first_middle_last_empty"], seed=5)
    values = list(args.values())
    pre = mod._forward_train(*values)[1]
    bufs = {f"d{n}": torch.full_like(args[n], float("nan")) for n in ("a", "b", "bias")}
    da, db, dbias = mod._backward(grad, *values, pre, **bufs)
    assert da is bufs["da"] and db is bufs["db"] and dbias is bufs["dbias"]
    _, _, want = reference_grads(mod.SPEC, args, grad)
    for got, n in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{n}: an element was not written"
        within(got, want[n], f"d{n}")


def test_cuda_graph_over_forward_and_backward_replays_with_new_group_sizes() -> None:
    """One training step captured whole (forward, the backward's kernels, the gradients' allocation), then replayed
    with new inputs and new group sizes (same G and rows: one with fewer rows in the experts, more past them) copied
    into the captured tensors."""
    _, fn = entry()
    rows = 337
    first = [100, 0, 37, 200]
    args, grad = data(first, seed=7, tail=rows - sum(first))
    static = {n: (t.clone().requires_grad_() if n != "index" else t.clone()) for n, t in args.items()}
    sgrad = grad.clone()
    params = [static[n] for n in ("a", "b", "bias")]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile every kernel outside the capture
        for _ in range(2):
            for t in params:
                t.grad = None
            fn(*static.values()).backward(sgrad)
    torch.cuda.current_stream().wait_stream(side)
    for t in params:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*static.values()).backward(sgrad)
    mod, _ = entry()
    for seed, sizes in ((9, [0, 250, 80, 7]), (11, [10, 0, 0, 5])):
        new, new_grad = data(sizes, seed=seed, tail=rows - sum(sizes))
        with torch.no_grad():
            for n, t in new.items():
                static[n].copy_(t)
            sgrad.copy_(new_grad)
        graph.replay()
        torch.cuda.synchronize()
        _, _, want = reference_grads(mod.SPEC, new, new_grad)
        for n in ("a", "b", "bias"):
            within(static[n].grad, want[n], f"replayed {sizes} d{n}")
        assert not static["a"].grad[sum(sizes):].any(), f"replayed {sizes}: dA past the last expert"


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_rendered_gated_kernel_bf16(save: str, tmp_path) -> None:
    """A grouped SwiGLU (halves) with a per-expert bias after the gate, bf16 (not shipped: rendered here), both save
    modes: pre and G over B's 2N columns; gradients against float64 over ragged sizes with rows past the last expert."""
    from kernels import load_module

    from specgen.kinds.grouped.testing.training import train_spec

    spec = train_spec("swiglu_halves", save, "bf16", "k", tail="zero", tile=128)
    spec["epilogue"] = [*spec["epilogue"], {"op": "bias", "dtype": "bf16"}]
    spec["name"] = f"gpu_gtrain_swiglu_bias_{save}"
    spec["triton"] = {"num_warps": 8}
    spec["tile"] = {"m": 128, "n": 128, "k": 64}
    fn = getattr(load_module(spec, tmp_path), spec["name"])
    for case in ("first_middle_last_empty", "odd", "shared_tiles"):
        sizes = RAGGED_SIZES[case]
        args = train_inputs(spec, sizes, TAIL, 200, 136, seed=21, device="cuda")
        leaves = {n: (t.clone().requires_grad_() if n != "index" else t) for n, t in args.items()}
        out = fn(*leaves.values())
        grad = torch.randn(out.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(22)).bfloat16()
        out.backward(grad)
        want_out, _, want = reference_grads(spec, args, grad)
        within(out, want_out, f"{save} {case} out")
        for n in ("a", "b", "bias"):
            within(leaves[n].grad, want[n], f"{save} {case} d{n}")
        assert not leaves["a"].grad[sum(sizes):].any(), f"{save} {case}: dA past the last expert"


FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


@pytest.mark.parametrize(("a_dtype", "b_dtype", "save", "act"), [("fp8_e4m3", "fp8_e4m3", "preact", "gelu"),
                                                                  ("fp8_e5m2", "fp8_e5m2", "recompute", "silu"),
                                                                  ("fp8_e4m3", "fp8_e5m2", "preact", "")])
def test_rendered_fp8_forward_bf16_backward(a_dtype: str, b_dtype: str, save: str, act: str, tmp_path) -> None:
    """An fp8 forward (e4m3, e5m2, e4m3 x e5m2; torch._scaled_grouped_mm's rowwise scales, a per-group bias, an
    activation or none): bf16 dA and dB, the gradients of the dequantized operands (a scale_a, b[g] scale_b[g]), and
    dbias within bf16 rounding of float64 autograd of the per-group loop, on ragged sizes, into NaN-poisoned buffers."""
    from grouped.test_training_fp8 import dequantized_reference
    from kernels import load_module

    name = f"gpu_gtrain_fp8_{a_dtype[4:]}_{b_dtype[4:]}_{save}_{act or 'none'}"
    spec = {"name": name, "kind": "grouped", "a": {"dtype": a_dtype, "major": "k"}, "b": {"dtype": b_dtype, "major": "k"},
            "out": {"dtype": "bf16"}, "groups": {"index": "offs", "tail": "untouched"},
            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}]
            + ([{"op": "activation", "fn": act}] if act else []),
            "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 128}, "triton": {"num_warps": 8},
            "targets": ["triton:sm90"]}
    mod = load_module(spec, tmp_path)
    for case in ("first_middle_last_empty", "all_empty"):
        sizes = RAGGED_SIZES[case]
        gen = torch.Generator(device="cuda").manual_seed(len(sizes))
        rows, g = sum(sizes) + TAIL, len(sizes)
        a = torch.randn(rows, K, generator=gen, device="cuda").to(FP8[a_dtype])
        b = torch.randn(g, N, K, generator=gen, device="cuda").to(FP8[b_dtype]).transpose(1, 2)
        sa = torch.rand(rows, generator=gen, device="cuda") + 0.5
        sb = (torch.rand(g, N, generator=gen, device="cuda") + 0.5) / K**0.5
        bias = torch.randn(g, N, generator=gen, device="cuda").bfloat16()
        offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
        grad = torch.randn(rows, N, generator=gen, device="cuda").bfloat16()
        _, grads = dequantized_reference(a, b, sa, sb, bias, sizes, act, grad)
        pre = mod._forward_train(a, b, offs, sa, sb, bias)[1] if save == "preact" and act else None
        poisoned = {"da": torch.full((rows, K), float("nan"), device="cuda", dtype=torch.bfloat16),
                    "db": torch.full_like(b, float("nan"), dtype=torch.bfloat16),
                    "dbias": torch.full((g, N), float("nan"), device="cuda", dtype=torch.bfloat16)}
        da, db, _, _, dbias = mod._backward(grad, a, b, offs, sa, sb, bias, pre, **poisoned)
        want = {n: t.cpu() for n, t in zip(("dA", "dB", "dbias"), grads, strict=True)}  # within() compares on the host
        for got, n in ((da, "dA"), (db, "dB"), (dbias, "dbias")):
            assert got.dtype is torch.bfloat16 and not got.isnan().any(), f"{case} {n}"
            within(got, want[n], f"{case} {n}")
