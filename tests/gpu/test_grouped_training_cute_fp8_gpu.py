"""An fp8 forward's backward on the grouped CuTe sm90 design on a Hopper GPU (issue 38's "fp8 forward with a bf16
backward", session 32; specgen/kinds/grouped/designs/cute_sm90/training.py), the real kernels: CUTE_FP8_TRAINING_FORMS
(e4m3 with the rowwise scales, a per-group bias and GELU-tanh, save = "preact" (offs, a zeroed tail) and "recompute" (the
sizes index, an untouched tail); e5m2 with SiLU into f16, preact; e4m3 x e5m2 with an f32 bias alone into f16). Against
float64 autograd of the per-group loop act((A scale_a) @ (B[g] scale_b[g]) + bias[g]) over the dequantized operands
(specgen/kinds/grouped/testing/training.py's fp8_reference; the bound the grouped Triton and Mosaic GPU fp8 GPU tests
use): the forward's groups' rows, dA and dB (the dequantized operands' gradients, in the output's dtype) written into
NaN-poisoned buffers by `_backward`, the bias's gradient through torch.autograd; dA exactly 0 past the last group, an
empty group's dB[g] and dbias[g] exactly 0, the scales none; an fp8 operand or a scale that requires grad refused
naming it. Sizes: empty groups first / middle / last with a group of 130 rows (off the 128-row tile) and rows past the
last group; M = 1. Shapes: N = 200, K = 328 (K off the tile and off 16 bytes of fp8: the guards' padded copies) and N =
256, K = 384.

NOT YET RUN ON A GPU (written in session 32 on a CPU box, where every kernel compiled for sm_90a and the host side ran
against stand-in kernels: tests/grouped/test_cute_sm90_training_fp8.py); the lead runs it. Marked `gpu`: CI deselects it.
Each module compiles its kernels once (pre, dgrad, wgrad, the columns pass), each case is small:
python3 -m pytest -m gpu -q tests/gpu/test_grouped_training_cute_fp8_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.grouped.testing.reference import RAGGED_SIZES
from specgen.kinds.grouped.testing.specs import CUTE_FP8_TRAINING_FORMS
from specgen.kinds.grouped.testing.training import close, fp8_reference, fp8_train_inputs

pytestmark = pytest.mark.gpu

TAIL = 17  # rows past the last group
SIZES = {"first_middle_last_empty": RAGGED_SIZES["first_middle_last_empty"], "m1": [0, 1]}
SHAPES = {"off_tile": (200, 328), "on_tile": (256, 384)}  # (N, K)
# (form, sizes, shape): every size and shape for the e4m3 preact form, fewer for the others (one compile each)
CASES = [("cgt_fp8_e4m3_gelu_preact", c, s) for c in SIZES for s in SHAPES] + [
    ("cgt_fp8_e4m3_gelu_recompute", "first_middle_last_empty", "off_tile"), ("cgt_fp8_e4m3_gelu_recompute", "m1", "on_tile"),
    ("cgt_fp8_e5m2_silu_f16", "first_middle_last_empty", "off_tile"),
    ("cgt_fp8_mixed_bias_only", "first_middle_last_empty", "on_tile")]
_LOADED: dict[str, object] = {}


def module(name: str, kernel_dir):
    from kernels import load_target_module

    if name not in _LOADED:
        _LOADED[name] = load_target_module(CUTE_FP8_TRAINING_FORMS[name], "cute:sm90", kernel_dir,
                                           "_specgen_gpu_cute_fp8_train_")[0]
    return _LOADED[name]


@pytest.mark.parametrize(("name", "case", "shape"), CASES)
def test_gradients_of_the_dequantized_operands_against_float64(name: str, case: str, shape: str, kernel_dir) -> None:
    mod = module(name, kernel_dir)
    spec = CUTE_FP8_TRAINING_FORMS[name]
    n, k = SHAPES[shape]
    sizes = SIZES[case]
    args = fp8_train_inputs(spec, sizes, TAIL, n, k, seed=7, device="cuda")
    wide = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["out"]["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(8)
    grad = torch.randn(args["a"].shape[0], n, device="cuda", generator=gen).to(wide)
    want_out, want = fp8_reference(spec, args, grad)
    end, values = sum(sizes), list(args.values())
    what = f"{name} {case} {shape}"
    # the forward (through autograd where the bias requires grad: the training op) and the bias's gradient
    bias = "bias" in args
    leaf = args["bias"].clone().requires_grad_() if bias else None
    out = getattr(mod, name)(*values[:5], *([leaf] if bias else []))
    close(out[:end].float().cpu(), want_out, 2e-2, f"{what} out")
    if spec["groups"]["tail"] == "zero":
        assert not out[end:].any(), f"{what}: rows past the last group are zeros (groups.tail)"
    if bias:
        out.backward(grad)
        assert leaf.grad.dtype is args["bias"].dtype
        close(leaf.grad, want["bias"], 2e-2, f"{what} dbias (autograd)")
    # the backward into NaN-poisoned buffers: dA, dB in the output's dtype, the scales none
    acts = spec["epilogue"][-1]["op"] == "activation"
    pre = mod._forward_train(*values)[1] if acts and spec["training"]["save"] == "preact" else None
    bufs = {"da": torch.full(args["a"].shape, float("nan"), device="cuda", dtype=wide),
            "db": torch.full_like(args["b"], float("nan"), dtype=wide)}
    if bias:
        bufs["dbias"] = torch.full_like(args["bias"], float("nan"))
    got = mod._backward(grad, *values, pre, **bufs)
    assert got[0] is bufs["da"] and got[1] is bufs["db"] and (not bias or got[4] is bufs["dbias"])
    assert got[2].numel() == got[3].numel() == 0, "the scales get no gradient"
    for m, t in (("a", got[0]), ("b", got[1]), *((("bias", got[4]),) if bias else ())):
        assert not t.isnan().any(), f"{what} d{m}: an element was not written"
        close(t, want[m], 2e-2, f"{what} d{m}")
    assert not got[0][end:].any(), f"{what}: dA past the last group is zero"
    for g in (g for g, s in enumerate(sizes) if s == 0):  # an empty group: exact zeros
        assert not got[1][g].any() and (not bias or not got[4][g].any()), f"{what}: empty group {g}"


@pytest.mark.parametrize("name", ["cgt_fp8_e4m3_gelu_preact", "cgt_fp8_e4m3_gelu_recompute"])
def test_an_fp8_operand_or_a_scale_that_requires_grad_is_refused(name: str, kernel_dir) -> None:
    """As the grouped Triton module refuses them (the same wording): torch would round an fp8 operand's gradient to
    fp8, and the dequantization scales are inputs without grad."""
    mod = module(name, kernel_dir)
    spec = CUTE_FP8_TRAINING_FORMS[name]
    x = fp8_train_inputs(spec, [3, 0, 5], 2, 64, 128, seed=1, device="cuda")
    fn = getattr(mod, name)
    with pytest.raises(RuntimeError, match=r"a \(fp8_e4m3\) requires grad.*_backward\(grad, \.\.\.\)"):
        fn(x["a"].clone().requires_grad_(), x["b"], x["index"], x["scale_a"], x["scale_b"], x["bias"])
    with pytest.raises(RuntimeError, match="scale_b requires grad, but an fp8 forward's dequantization scales"):
        fn(x["a"], x["b"], x["index"], x["scale_a"], x["scale_b"].clone().requires_grad_(), x["bias"])
