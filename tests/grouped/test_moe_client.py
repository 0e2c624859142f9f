"""The MoE client (examples/moe/mixtral.py) under the Triton interpreter: a Mixtral-structure block whose expert
GEMMs are the shipped grouped kernels (rendered in f16: the interpreter multiplies bf16 as raw bits) gives
transformers' eager block's output, computed in float64 from the same weights: prefill-sized and decode-sized
batches, an expert no token picks (an empty group), one token. tests/gpu/test_moe_client_gpu.py runs the bf16
kernels on the GPU, under torch.compile and as a CUDA graph."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from kernels import catalogue, interpreter_variant

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "moe"))

from mixtral import GroupedKernels, MoEConfig, MoEWeights, eager_block, gated_layout, grouped_block, route  # noqa: E402

CFG = MoEConfig(hidden=64, intermediate=48, experts=4, top_k=2)
SHIPPED = ("moe_gate_up_swiglu_bf16", "moe_down_router_bf16")


@pytest.fixture(scope="module")
def kernels(load_kernel) -> GroupedKernels:
    specs = catalogue("grouped")
    gate_up, down = (interpreter_variant(specs[name]) for name in SHIPPED)
    return GroupedKernels(getattr(load_kernel(gate_up), gate_up["name"]), getattr(load_kernel(down), down["name"]),
                          gated_layout(gate_up))


def as_f64(w: MoEWeights) -> MoEWeights:
    return MoEWeights(w.router.double(), w.gate_up.double(), w.down.double())


@pytest.mark.parametrize("tokens", [37, 5, 1])
def test_the_grouped_block_gives_the_eager_block(kernels, tokens):
    """37 tokens (74 routed rows over 4 experts: groups no multiple of the tile), 5, and 1 (2 of the 4 experts
    picked: two empty groups)."""
    w = MoEWeights.random(CFG, torch.float16, "cpu", torch.Generator().manual_seed(tokens))
    x = torch.randn(tokens, CFG.hidden, generator=torch.Generator().manual_seed(tokens)).to(torch.float16)
    _, experts = route(x, w, CFG.top_k)
    if tokens == 1:
        assert len(set(experts.flatten().tolist())) == 2  # two empty groups
    # the reference: the eager structure in float64 on the same f16 weights, routed as in f16 (the top-k choice
    # is discrete: a float64 router could pick another expert on a near tie)
    assert torch.equal(route(x.double(), as_f64(w), CFG.top_k)[1], experts), "a near tie in the routing: reseed"
    want = eager_block(x.double(), as_f64(w), CFG.top_k)
    got = grouped_block(x, kernels.prepare(w), CFG.top_k, kernels)
    assert got.dtype == torch.float16 and got.shape == x.shape
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-3)


def test_prepare_interleaves_the_gate_and_up_rows():
    """The shipped kernel reads gate_up interleaved: `prepare` puts expert g's gate row j at 2j and up row j at
    2j + 1, once; a halves kernel reads the weights as they are."""
    w = MoEWeights.random(MoEConfig(hidden=8, intermediate=3, experts=2, top_k=1), torch.float32, "cpu",
                          torch.Generator().manual_seed(1))
    il = GroupedKernels(lambda *a: None, lambda *a: None, "interleaved").prepare(w).gate_up
    assert torch.equal(il[:, 0::2], w.gate_up[:, :3]) and torch.equal(il[:, 1::2], w.gate_up[:, 3:])
    assert GroupedKernels(lambda *a: None, lambda *a: None).prepare(w) is w
