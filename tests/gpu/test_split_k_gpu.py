"""Split-K on a real GPU (issue 8), in bf16 and fp8: the shipped gemm_bf16 and gemm_fp8_rowwise variants
that split K, and rendered specs with both reductions and epilogues, against the float64 reference
with poisoned outputs, M = 1 and tails on M, N and K (K not a multiple of split_k x tile.k); the
ordered sum bit-identical run to run and across streams; counters (and atomic partials) back at zero.

Marked `gpu`. The rendered-spec tests need pydantic (the GPU machine: carry .gpuwheels/c, gpu.md).
"""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from decode_checks import assert_workspaces_reset, operands, run_against_float64

pytestmark = pytest.mark.gpu

# (kernel, M, N, K, the variant that serves it: one that splits K)
SHIPPED = [
    ("gemm_bf16", 1, 1000, 4104, 0),  # M <= 16 and N <= 4096: 16x64x256, split-K 2
    ("gemm_bf16", 13, 4096, 3000, 0),
    ("gemm_bf16", 50, 2000, 5000, 3),  # M <= 64 and N <= 4096: 64x64x128, split-K 2
    ("gemm_bf16", 100, 3000, 1000, 6),  # M <= 128 and N <= 4096: 64x128x128, split-K 2
    ("gemm_bf16", 120, 4000, 6008, 6),
    # gemm_fp8_rowwise's variants no longer split K (session 3): its split-K runs on the GPU in
    # tests/gpu/test_swap_ab_gpu.py (rendered fp8 specs with swap_ab and split-K, both reductions)
]


@pytest.mark.parametrize(("name", "M", "N", "K", "variant"), SHIPPED, ids=lambda x: str(x))
def test_shipped_split_k_variants_match_float64(name: str, M: int, N: int, K: int, variant: int) -> None:
    mod = importlib.import_module(f"generated.triton.{name}")
    assert mod.METADATA["variants"][variant]["split_k"] > 1
    fn = getattr(mod, name)
    gen = torch.Generator(device="cuda").manual_seed(M * N + K)
    args, named = operands(name != "gemm_bf16", M, N, K, gen)
    got = run_against_float64(mod, fn, args, named, f"{name} {M}x{N}x{K}")
    # the ordered sum: bit-identical every run, on another stream too
    runs = [fn(*args) for _ in range(3)]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        runs.append(fn(*args))
    side.synchronize()
    assert all(torch.equal(r, got) for r in runs)
    assert_workspaces_reset(mod._launcher)


def _rendered(spec: dict, tmp_path):
    from kernels import load_module

    return load_module(spec, tmp_path)


def split_spec(name: str, tma: bool, reduction: str) -> dict:
    return {
        "name": name, "kind": "gemm", "a": {"dtype": "bf16"}, "b": {"dtype": "bf16"}, "out": {"dtype": "bf16"},
        "epilogue": [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"},
                     {"op": "residual", "dtype": "bf16", "beta": 0.5}],
        "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": tma}, "triton": {"num_warps": 8, "tma": tma},
        "targets": ["triton:sm90"],
        "variants": [{"when": {"m_max": 16}, "tile": {"m": 16, "n": 64, "k": 128}, "triton": {"num_warps": 4},
                      "schedule": {"split_k": 3, "split_k_reduction": reduction}},
                     {"when": {"m_max": 128}, "tile": {"m": 64, "n": 128, "k": 64}, "triton": {"num_warps": 4},
                      "schedule": {"split_k": 4, "split_k_reduction": reduction}}],
    }


@pytest.mark.parametrize("reduction", ["deterministic", "atomic"])
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "ptr"])
def test_rendered_split_k_with_an_epilogue_matches_float64(tma: bool, reduction: str, tmp_path) -> None:
    spec = split_spec(f"spk_gpu_{int(tma)}_{reduction[:3]}", tma, reduction)
    mod = _rendered(spec, tmp_path)
    fn = getattr(mod, spec["name"])
    gen = torch.Generator(device="cuda").manual_seed(7)
    for M, N, K in ((1, 264, 1000), (16, 1024, 4104), (77, 520, 2056), (128, 2048, 8192), (300, 264, 1000)):
        a = torch.randn(M, K, generator=gen, device="cuda").to(torch.bfloat16)
        w = torch.randn(N, K, generator=gen, device="cuda").to(torch.bfloat16)
        bias = torch.randn(N, generator=gen, device="cuda").to(torch.bfloat16)
        c = torch.randn(M, N, generator=gen, device="cuda").to(torch.bfloat16)
        got = run_against_float64(mod, fn, [a, w.t(), bias, c], {"bias": bias, "c": c}, f"{spec['name']} {M}x{N}x{K}")
        if reduction == "deterministic":
            assert all(torch.equal(fn(a, w.t(), bias, c), got) for _ in range(3))
    assert_workspaces_reset(mod._launcher)
    assert any(key[2] == (reduction == "atomic") for key in mod._launcher._workspaces)
    json.dumps(mod.METADATA)  # the module's metadata stays plain data
