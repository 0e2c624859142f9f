"""The MoE client (examples/moe/mixtral.py) on the GPU with the shipped bf16 grouped kernels: the block's output is
transformers' eager block's within bf16 tolerance (prefill- and decode-sized batches), torch.compile takes the
whole block with no graph break (fullgraph) and gives the same output, and a decode step captured once as a CUDA
graph replays with new tokens (new routing, new group sizes) to the eager block's output.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "moe"))

from mixtral import GroupedKernels, MoEConfig, MoEWeights, eager_block, grouped_block  # noqa: E402

pytestmark = pytest.mark.gpu

CFG = MoEConfig(hidden=1024, intermediate=3584, experts=8, top_k=2)


@pytest.fixture(scope="module")
def setup():
    w = MoEWeights.random(CFG, torch.bfloat16, "cuda", torch.Generator().manual_seed(0))
    kernels = GroupedKernels.shipped()
    return w, kernels.prepare(w), kernels


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, CFG.hidden, device="cuda", dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(seed))


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-3)


@pytest.mark.parametrize("n", [2048, 16, 1])
def test_the_block_gives_the_eager_block(setup, n):
    w, wk, kernels = setup
    x = tokens(n, n)
    close(grouped_block(x, wk, CFG.top_k, kernels), eager_block(x, w, CFG.top_k))


def test_torch_compile_takes_the_block_whole(setup):
    w, wk, kernels = setup
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: grouped_block(x, wk, CFG.top_k, kernels), fullgraph=True)  # a break raises
    for n in (512, 16):
        x = tokens(n, 100 + n)
        close(compiled(x), eager_block(x, w, CFG.top_k))


def test_a_decode_step_replays_as_a_cuda_graph(setup):
    w, wk, kernels = setup
    static = tokens(16, 7)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            grouped_block(static, wk, CFG.top_k, kernels)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_block(static, wk, CFG.top_k, kernels)
    sizes = set()
    for seed in range(8, 12):
        x = tokens(16, seed)
        static.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        close(out, eager_block(x, w, CFG.top_k))
        sizes.add(tuple(torch.bincount(torch.topk(x @ w.router.t(), CFG.top_k).indices.flatten(), minlength=8).tolist()))
    assert len(sizes) > 1  # the replays routed the tokens differently: new group sizes each
