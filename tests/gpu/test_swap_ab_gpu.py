"""`triton.swap_ab` on a real GPU (issue 8), in bf16 and fp8: the shipped gemm_bf16 and gemm_fp8_rowwise
variants that swap A and B, and rendered specs that swap with and without split-K (both reductions)
and with an epilogue, against the float64 reference with poisoned outputs, M = 1 and tails on M, N and
K; the ordered split-K sum bit-identical run to run; split-K counters back at zero; and the compiled
kernel uses wgmma (the point of swapping a 16-row tile).

Marked `gpu`. The rendered-spec tests need pydantic (the GPU machine: carry .gpuwheels/c, gpu.md).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from decode_checks import assert_workspaces_reset, operands, run_against_float64

pytestmark = pytest.mark.gpu

# (kernel, M, N, K, the variant that serves it: one that swaps A and B)
SHIPPED = [
    ("gemm_bf16", 1, 1000, 4104, 0),  # M <= 16 and N <= 4096: 16x64x256, split-K 2, swapped
    ("gemm_bf16", 13, 4096, 3000, 0),
    ("gemm_bf16", 1, 14336, 4096, 1),  # M <= 16 and K <= 4096: 16x128x128, swapped
    ("gemm_bf16", 16, 5000, 1000, 1),
    ("gemm_bf16", 1, 8192, 8192, 2),  # M <= 16: 16x64x256, swapped
    ("gemm_bf16", 9, 4104, 5000, 2),
    ("gemm_fp8_rowwise", 1, 8192, 8192, 0),  # M <= 16: 16x64x512, swapped
    ("gemm_fp8_rowwise", 16, 8200, 4112, 0),
    ("gemm_fp8_rowwise", 5, 1000, 2000, 0),
]


def _check(mod, fn, name: str, M: int, N: int, K: int, deterministic: bool) -> None:
    gen = torch.Generator(device="cuda").manual_seed(M * N + K)
    args, named = operands(name == "gemm_fp8_rowwise", M, N, K, gen)
    got = run_against_float64(mod, fn, args, named, f"{name} {M}x{N}x{K}")
    if deterministic:
        assert all(torch.equal(fn(*args), got) for _ in range(3))


@pytest.mark.parametrize(("name", "M", "N", "K", "variant"), SHIPPED, ids=lambda x: str(x))
def test_shipped_triton_swap_ab_variants_match_float64(name: str, M: int, N: int, K: int, variant: int) -> None:
    mod = importlib.import_module(f"generated.triton.{name}")
    assert mod.METADATA["variants"][variant]["swap_ab"] is True
    _check(mod, getattr(mod, name), name, M, N, K, deterministic=True)
    assert_workspaces_reset(mod._launcher)


def test_shipped_triton_swapped_kernels_use_wgmma() -> None:
    """A 16-row tile, swapped, compiles to wgmma (warp_group_dot); unswapped it would not (MMA003)."""
    for name, M, N, K, _ in SHIPPED[4:7]:
        mod = importlib.import_module(f"generated.triton.{name}")
        _check(mod, getattr(mod, name), name, M, N, K, deterministic=False)
        kernel = getattr(mod, f"_{name}_kernel")
        # the JIT's per-device caches: (kernel cache {key: CompiledKernel}, ...) in Triton 3.x
        compiled = [c for entry in kernel.device_caches.values() for part in entry if isinstance(part, dict)
                    for c in part.values() if hasattr(c, "asm") and c.metadata.num_warps == 4]
        assert compiled and any("warp_group_dot" in c.asm["ttgir"] for c in compiled), name


def swap_spec(name: str, dtype: str, tma: bool, reduction: str) -> dict:
    fp8 = dtype == "fp8_e4m3"
    epilogue = ([{"op": "scale", "by": "rowcol"}] if fp8 else
                [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}])
    return {
        "name": name, "kind": "gemm", "a": {"dtype": dtype}, "b": {"dtype": dtype}, "out": {"dtype": "bf16"},
        "epilogue": epilogue,
        "tile": {"m": 128, "n": 128, "k": 128 if fp8 else 64}, "schedule": {"persistent": tma},
        "triton": {"num_warps": 8, "tma": tma}, "targets": ["triton:sm90"],
        "variants": [{"when": {"m_max": 16}, "tile": {"m": 16, "n": 64, "k": 256 if fp8 else 128},
                      "triton": {"num_warps": 4, "swap_ab": True},
                      "schedule": {"split_k": 3, "split_k_reduction": reduction}},
                     {"when": {"m_max": 64}, "tile": {"m": 32, "n": 128, "k": 128},
                      "triton": {"num_warps": 4, "swap_ab": True}}],
    }


@pytest.mark.parametrize("reduction", ["deterministic", "atomic"])
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "ptr"])
@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3"])
def test_rendered_triton_swap_ab_with_split_k_matches_float64(dtype: str, tma: bool, reduction: str, tmp_path) -> None:
    from kernels import load_module

    spec = swap_spec(f"swp_{dtype.split('_')[0]}_gpu_{int(tma)}_{reduction[:3]}", dtype, tma, reduction)
    mod = load_module(spec, tmp_path)
    fn = getattr(mod, spec["name"])
    # K multiples of 16 (fp8 rows of TMA operands are 16-byte aligned), tails on every tile dim
    for M, N, K in ((1, 264, 1008), (16, 1024, 4112), (13, 520, 2064), (40, 1000, 3008), (64, 2048, 8192),
                    (300, 264, 1008)):
        gen = torch.Generator(device="cuda").manual_seed(M + N + K)
        args, named = operands(dtype != "bf16", M, N, K, gen)
        if dtype == "bf16":
            bias = torch.randn(N, generator=gen, device="cuda").to(torch.bfloat16)
            args, named = [*args, bias], {"bias": bias}
        got = run_against_float64(mod, fn, args, named, f"{spec['name']} {M}x{N}x{K}")
        if reduction == "deterministic":
            assert all(torch.equal(fn(*args), got) for _ in range(3))
    assert_workspaces_reset(mod._launcher)
