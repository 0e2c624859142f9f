"""The recompute GEMM's epilogue knobs in its TMA form (templates/gemm/triton/recompute.jinja; the module's
RECOMPUTE_EPILOGUE): EPI_SPLIT column subtiles, dOut read as TMA boxes, G stored as TMA boxes (gated halves: a 3-D
descriptor over G viewed (M, 2, N)), the first subtile's dOut loaded before the K loop, gelu_tanh's derivative
factored, the gated kernel's persistent loop flattened. Each combination's G, written
into a NaN-poisoned buffer by the recompute GEMM alone, against float64's G = dOut * act'(A @ B + bias) (gated:
[dOut * up * act'(gate), dOut * act(gate)]), with M, N, K off the 32 x 32 x 16 tile, M = 1 and a K tail, and which
knobs the launch kept (a layout TMA cannot take falls back to pointers); then the module's backward through
autograd with the shipped knobs. Under the CPU interpreter, f32 and f16 (its bf16 is wrong)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from backends.triton.test_training import close, inputs, reference, run, training_spec
from backends.triton.test_training_gated import gated_inputs, gated_spec

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")]

# (EPI_SPLIT, DOUT_TMA, G_TMA, DOUT_EARLY, GELU_FACTORED): every split with every load and store form, early with
# each load form, the factored derivative with the pointer and the TMA forms
KNOBS = [(s, d, g, False, False) for s, d, g in itertools.product((1, 2, 4), (False, True), (False, True))] + [
    (2, False, False, True, False), (4, True, True, True, True), (1, True, False, True, False), (2, False, False, False, True),
    (4, True, True, False, True)]
# a few of them, each knob on in some and off in others: with f16, and at M = 1
FEW = [(1, False, False, False, False), (2, True, True, True, True), (4, True, True, False, True),
       (4, False, False, False, False), (2, False, True, False, False)]
SHAPES = [(37, 40, 40), (1, 72, 24)]  # M, N, K: rows of 16 bytes in f16 and f32 (TMA reads and stores them)


def knob_dict(k: tuple, flatten: bool | None = None) -> dict[str, object]:
    """The knobs of tuple `k`; `flatten`: the gated kernel's FLATTEN (its persistent loop flattened)."""
    out = dict(zip(("EPI_SPLIT", "DOUT_TMA", "G_TMA", "DOUT_EARLY", "GELU_FACTORED"), k, strict=True))
    return out if flatten is None else {**out, "FLATTEN": flatten}


def launched_knobs(monkeypatch) -> list[dict]:
    from specgen.runtime.triton import training as runtime

    seen: list[dict] = []
    real = runtime.launch

    def record(kernel, jit, *rest, **constexprs):
        if "EPI_SPLIT" in constexprs:
            seen.append({k: v for k, v in constexprs.items() if k in ("EPI_SPLIT", "DOUT_TMA", "G_TMA", "DOUT_EARLY",
                                                                          "GELU_FACTORED", "FLATTEN")})
        return real(kernel, jit, *rest, **constexprs)

    monkeypatch.setattr(runtime, "launch", record)
    return seen


def recompute_g(mod, a, b, grad, extra, gated: bool, knobs: dict) -> torch.Tensor:
    """G by the recompute GEMM alone (its TMA form with `knobs`), into a NaN-poisoned buffer."""
    M, N = grad.shape
    g = torch.full((M, 2 * N if gated else N), float("nan"), dtype=a.dtype)
    mod._tr.gemm("t", mod._BACKWARD_KERNELS["recompute"], mod.BACKWARD_CONFIGS["recompute"],
                 mod.BACKWARD_TILES["recompute"], -1, a, b, g, (grad, *extra), grad.stride(), False, False,
                 gated="halves" if gated else "", epilogue=knobs)
    return g


@pytest.fixture(scope="module")
def modules(kernel_dir):
    from kernels import load_module

    out = {}
    for dtype in ("f32", "f16"):
        for layer, spec in (("gelu", training_spec("bias_gelu_tanh", "recompute", dtype)),
                            ("gated", gated_spec("halves", "silu", "recompute", dtype=dtype))):
            spec = {**spec, "name": spec["name"] + "_epi"}  # its own custom op beside the other files' modules
            out[layer, dtype] = spec, load_module(spec, kernel_dir)
    return out


def want_g(a, b, bias, grad, gated: bool) -> torch.Tensor:
    pre = (a.double() @ b.double() + (0 if gated else bias.double())).requires_grad_()
    if gated:
        gate, up = pre.chunk(2, dim=-1)
        act = F.silu(gate) * up
    else:
        act = F.gelu(pre, approximate="tanh")
    (g,) = torch.autograd.grad(act, pre, grad.double())
    return g


@pytest.mark.parametrize("layer", ["gelu", "gated"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_every_knob_forms_g(layer: str, dtype: str, modules, monkeypatch) -> None:
    spec, mod = modules[layer, dtype]
    gated = layer == "gated"
    seen = launched_knobs(monkeypatch)
    rel = 1e-5 if dtype == "f32" else 1e-2
    for shape in SHAPES:
        M, N, K = shape
        args = gated_inputs(spec, shape, seed=M) if gated else inputs(spec, shape, seed=M)
        grad = torch.randn(M, N, generator=torch.Generator().manual_seed(N)).to(args["a"].dtype)
        bias = args.get("bias")
        extra = () if gated else (bias,)
        want = want_g(args["a"], args["b"], bias, grad, gated)
        for i, k in enumerate(KNOBS if dtype == "f32" and M > 1 else FEW):
            knobs = knob_dict(k, i % 2 == 1 if gated else None)  # gated: every other one flattened
            got = recompute_g(mod, args["a"], args["b"], grad, extra, gated, knobs)
            close(got, want, rel, f"{layer} {dtype} {shape} {knobs}: G")
            assert seen[-1] == knobs, (seen[-1], knobs)  # every layout here takes TMA: no knob fell back


@pytest.mark.parametrize("layer", ["gelu", "gated"])
def test_layouts_tma_cannot_take_fall_back_to_pointers(layer: str, modules, monkeypatch) -> None:
    """dOut as a column-major view (TMA would read its transpose) takes pointer loads, and G pointer stores with it
    (rows of 3 f32 elements, 12 bytes, take no TMA store either; rows of 40 would, but a pointer-loaded dOut's
    conversion scratch beside G's staging box can pass the SMEM), whatever the knobs say; G stays right."""
    spec, mod = modules[layer, "f32"]
    gated = layer == "gated"
    seen = launched_knobs(monkeypatch)
    knobs = knob_dict((2, True, True, True, True), True if gated else None)
    for M, N, K in ((37, 3, 40), (37, 40, 40)):
        args = gated_inputs(spec, (M, N, K), seed=3) if gated else inputs(spec, (M, N, K), seed=3)
        grad = torch.randn(N, M, generator=torch.Generator().manual_seed(4)).t()  # column-major
        bias = args.get("bias")
        got = recompute_g(mod, args["a"], args["b"], grad, () if gated else (bias,), gated, knobs)
        close(got, want_g(args["a"], args["b"], bias, grad, gated), 1e-5, f"{layer} N = {N}: G")
        assert seen[-1] == {**knobs, "DOUT_TMA": False, "G_TMA": False}, seen


@pytest.mark.parametrize("layer", ["gelu", "gated"])
def test_the_shipped_knobs_through_autograd(layer: str, modules) -> None:
    """The module's backward (RECOMPUTE_EPILOGUE as rendered) against float64 autograd, odd shape, f16."""
    spec, mod = modules[layer, "f16"]
    shape = (37, 40, 40)
    if layer == "gated":
        from backends.triton.test_training_gated import gated_reference

        args = gated_inputs(spec, shape, seed=5)
        args["bias"] = args["bias"].float()  # the spec's bias is f32 (its default dtype)
        grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(6)).half()
        want_out, want = gated_reference(spec, args, grad)
    else:
        args = inputs(spec, shape, seed=5)
        grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(6)).half()
        want_out, want = reference(spec, args, grad)
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    close(out, want_out, 4e-3, "out")
    for name in args:
        close(grads[name], want[name], 1e-2, f"d{name}")
