"""`pallas.swap_ab` on a real GPU: the Mosaic GPU kernel computing out^T = B^T A^T (decode tiles of 8..64 rows
of M on wgmma's column side), rendered from catalogue specs with a swapped default, against the float64
reference on NaN-poisoned memory: M = 1, M within one tile and across several (TMA zero-fills A's rows
past M and clips out's), M = 9..15 (A padded to 16 rows), tails on N and K, ragged extents the launcher
pads, K = 0; every operand major and dtype the catalogue has (bf16 K/K, f16 with B N-major, A M-major,
fp8 with row and column scales, batched); bias along N and M, a runtime scalar, GELU, a residual; 2-CTA
clusters along M and N. The torch entry's
direct launch at an aligned decode shape, against float64.

Marked `gpu` (jax[cuda] on an H100/H200: tests/gpu/test_pallas_gpu.py has the unswapped kernel's tests).
"""

from __future__ import annotations

import json

import pytest

from gpu.test_pallas_gpu import check_numerics

pytestmark = pytest.mark.gpu

SWAP = {"pallas": {"swap_ab": True}, "cluster": {"m": 1, "n": 1}, "pipeline": {"ab_stages": "auto"}}
# (label, catalogue spec, overrides): each rendered with no variants, its default swapped
SWAPPED = [
    ("bf16_16", "gemm_bf16", {"tile": {"m": 16, "n": 128, "k": 128}}),
    ("bf16_8", "gemm_bf16", {"tile": {"m": 8, "n": 128, "k": 128}}),
    ("bf16_32x256", "gemm_bf16", {"tile": {"m": 32, "n": 256, "k": 64}}),
    ("bf16_64", "gemm_bf16", {"tile": {"m": 64, "n": 128, "k": 64}}),
    ("bias_gelu_16", "gemm_bias_gelu_bf16", {"tile": {"m": 16, "n": 128, "k": 128}}),
    ("relu_f16_bn", "gemm_relu_f16", {"tile": {"m": 16, "n": 128, "k": 64}}),  # B stored (K, N)
    ("bmm_bn", "bmm_bf16", {"tile": {"m": 16, "n": 128, "k": 64}}),  # batched, B stored (K, N)
    ("fp8_rowwise_16", "gemm_fp8_rowwise", {"tile": {"m": 16, "n": 128, "k": 256}}),
    # A stored (K, M): its runtime scalar and residual (read through the slot's transposed view), 16 and 64 rows
    ("residual_16", "gemm_residual_bf16", {"tile": {"m": 16, "n": 128, "k": 64}}),
    ("residual_64", "gemm_residual_bf16", {"tile": {"m": 64, "n": 128, "k": 64}}),
    # CTA pairs: along M sharing B's tile (each CTA multicasts half its rows), along N sharing A's
    ("bf16_16_c21", "gemm_bf16", {"tile": {"m": 16, "n": 128, "k": 128}, "cluster": {"m": 2, "n": 1}}),
    ("bias_gelu_16_c12", "gemm_bias_gelu_bf16", {"tile": {"m": 16, "n": 128, "k": 128}, "cluster": {"m": 1, "n": 2}}),
    # ... and a bias along M with the scalar
    ("am_scalar_biasm", "gemm_residual_bf16", {
        "tile": {"m": 16, "n": 128, "k": 64},
        "epilogue": [{"op": "scale", "by": "scalar", "name": "alpha"},
                     {"op": "bias", "name": "bias_m", "along": "m", "dtype": "f32"}]}),
]
# (M, N, K): M = 1; one tile; A padded to 16 rows (9..15); several M tiles with a tail; N and K tails;
# ragged extents (N = 100, K = 1000) the launcher pads; N within one tile; K = 0
SHAPES = [(1, 4096, 1024), (16, 512, 256), (5, 1000, 520), (13, 264, 1040), (40, 384, 136), (100, 100, 1000),
          (8, 72, 64), (3, 640, 0)]


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    from backends.pallas.common import catalogue_config
    from backends.pallas.test_mgpu_module import render

    from specgen.check import check_spec
    from specgen.kinds.gemm.spec import GemmSpec
    from specgen.spec.load import load_text

    tmp, mods = tmp_path_factory.mktemp("mgpu_swap"), {}
    for label, name, over in SWAPPED:
        spec = catalogue_config(name, {**SWAP, **over, "name": f"swap_{label}", "targets": ["pallas:gpu_sm90"]})
        spec = json.loads(json.dumps(GemmSpec.model_validate(spec).model_dump(mode="json")))
        (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{label}>", ".json")
        assert [d.rule for d in check_spec(loaded) if d.severity == "error"] == [], label  # what check passes
        mod, _ = render(spec, tmp)
        mods[label] = (spec, mod)
    return mods


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("label", [label for label, _, _ in SWAPPED])
def test_swapped_numerics_against_float64(swapped, label: str, shape) -> None:
    spec, mod = swapped[label]
    assert mod.CONFIG.swap_ab and mod._config_for(*shape) == mod.CONFIG
    check_numerics(spec, getattr(mod, spec["name"]), shape)


def test_swapped_torch_entry_direct_launch(swapped) -> None:
    """An aligned decode shape takes the torch entry's direct launch (no jax dispatch) and matches float64."""
    import torch

    spec, mod = swapped["bias_gelu_16"]
    fn = getattr(mod, f"{spec['name']}_torch")
    gen = torch.Generator(device="cuda").manual_seed(3)
    for M in (1, 8, 16):
        a = torch.randn(M, 512, device="cuda", generator=gen).div_(512 ** 0.5).bfloat16()
        w = torch.randn(1024, 512, device="cuda", generator=gen).bfloat16()
        bias = torch.randn(1024, device="cuda", generator=gen).bfloat16()
        assert mod._direct(a, w.t(), bias) is not None  # the direct path serves it
        out = fn(a, w.t(), bias)
        want = torch.nn.functional.gelu(a.double() @ w.double().t() + bias.double(), approximate="tanh")
        torch.testing.assert_close(out.double(), want, atol=3e-2, rtol=2e-2)
