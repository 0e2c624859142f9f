"""The recompute GEMM's epilogue knobs on a Hopper GPU (templates/gemm/triton/recompute.jinja; the module's
RECOMPUTE_EPILOGUE): every combination of column subtiles (EPI_SPLIT 1, 2, 4), dOut by TMA and G stored by TMA, the
first dOut subtile before the K loop and gelu_tanh's factored derivative with some (the gated kernel's each with its
persistent loop flattened and not), on the shipped bf16 modules (linear_gelu_train_recompute_bf16,
mlp_up_swiglu_train_recompute_bf16), writes G = dOut * act'(A @ B + bias) (gated: [dOut * up * act'(gate),
dOut * act(gate)]) into a NaN-poisoned buffer within bf16 rounding of float64's, at shapes off the tiles and M = 1;
the launch keeps the knobs asked for (every layout here takes TMA), and a column-major dOut falls back to pointer
loads (and G to pointer stores). Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from backends.triton.test_training_recompute_epilogue import want_g

pytestmark = pytest.mark.gpu

KNOBS = {  # (EPI_SPLIT, DOUT_TMA, G_TMA, DOUT_EARLY, GELU_FACTORED[, FLATTEN]): each knob on in some, off in others;
    # the second of each layer is what the module ships (RECOMPUTE_EPILOGUE)
    "gelu": [(1, False, False, False, False), (4, True, True, False, True), (2, True, True, False, False),
             (4, False, False, False, True), (4, False, True, True, False), (1, True, False, False, False)],
    "gated": [(1, False, False, False, False, False), (2, True, True, False, False, False), (4, True, True, True, False, True),
              (4, False, False, False, False, False), (2, False, True, False, False, True), (1, True, False, False, False, True)],
}
SHAPES = [(200, 136, 96), (1, 264, 72), (1000, 1032, 520)]
LAYERS = {"gelu": "linear_gelu_train_recompute_bf16", "gated": "mlp_up_swiglu_train_recompute_bf16"}


def knob_dict(k: tuple, flatten: bool | None = None) -> dict[str, object]:
    """The knobs of tuple `k`; `flatten`: the gated kernel's FLATTEN (its persistent loop flattened)."""
    out = dict(zip(("EPI_SPLIT", "DOUT_TMA", "G_TMA", "DOUT_EARLY", "GELU_FACTORED"), k, strict=True))
    return out if flatten is None else {**out, "FLATTEN": flatten}


def g_of(layer: str, shape: tuple[int, int, int], knobs: dict, dout_t: bool = False):
    """(G by the recompute GEMM with `knobs`, float64's G, the knobs the launch used)."""
    from specgen.runtime.triton import training as tr

    mod = importlib.import_module(f"generated.triton.{LAYERS[layer]}")
    gated = layer == "gated"
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M + N)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    b = (torch.randn((2 if gated else 1) * N, K, generator=gen, device="cuda") / K**0.5).bfloat16().t()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = (torch.randn(N, M, generator=gen, device="cuda").bfloat16().t() if dout_t
            else torch.randn(M, N, generator=gen, device="cuda").bfloat16())
    g = torch.full((M, (2 if gated else 1) * N), float("nan"), device="cuda", dtype=torch.bfloat16)
    seen: list[dict] = []
    real = tr.launch

    def record(kernel, jit, *rest, **constexprs):
        seen.append({k: constexprs.get(k) for k in knobs})
        return real(kernel, jit, *rest, **constexprs)

    tr.launch = record
    try:
        tr.gemm(mod.METADATA["kernel"], mod._BACKWARD_KERNELS["recompute"], mod.BACKWARD_CONFIGS["recompute"],
                mod.BACKWARD_TILES["recompute"], a.get_device(), a, b, g, (grad,) if gated else (grad, bias),
                grad.stride(), False, True, gated="halves" if gated else "", epilogue=knobs)
    finally:
        tr.launch = real
    return g, want_g(a, b, bias, grad, gated), seen


def within(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = (got.double() - want).abs().max().item()  # NaN (an element never written) fails
    assert err <= 2e-2 * want.abs().max().item(), f"{what}: {err:.4g} > 2e-2 x {want.abs().max().item():.4g}"


CASES = [("gelu", knob_dict(k)) for k in KNOBS["gelu"]] + [("gated", knob_dict(k[:5], k[5])) for k in KNOBS["gated"]]


@pytest.mark.parametrize(("layer", "knobs"), CASES, ids=[f"{c[0]}-" + "-".join(map(str, c[1].values())) for c in CASES])
def test_every_knob_forms_g(layer: str, knobs: dict) -> None:
    for shape in SHAPES:
        got, want, seen = g_of(layer, shape, knobs)
        within(got, want, f"{layer} {shape} {knobs}")
        assert seen == [knobs], seen


@pytest.mark.parametrize("layer", list(LAYERS))
def test_a_column_major_output_gradient_takes_pointer_loads(layer: str) -> None:
    knobs = knob_dict((2, True, True, False, True), True if layer == "gated" else None)
    got, want, seen = g_of(layer, (200, 136, 96), knobs, dout_t=True)
    within(got, want, f"{layer}, dOut column-major")
    assert seen == [{**knobs, "DOUT_TMA": False, "G_TMA": False}], seen  # (G_TMA off with a fallen-back dOut)
