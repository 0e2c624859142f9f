"""The grouped Triton forward's split last wave on the GPU (issue 37; templates/grouped/triton/kernels.jinja ragged_m,
plan.tail_split): Mixtral's down projection (moe_down_router_bf16: K-major bf16, offs, a router weight per row) at a
scaled-down shape (N 1024, K 2048, 8 experts of skewed sizes), with group sizes chosen against the GPU's SM count so
that the last wave splits 4 ways, 2 ways, or not at all; each result against a float64 per-group loop with the output
NaN-poisoned (rows past the last group untouched), the workspace's partials showing which split ran and its arrival
counters back at zero; and a CUDA graph captured once and replayed with group sizes that move the tail across the
split / no-split boundary (the split is decided on the device).

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from specgen.kinds.grouped.testing.reference import assert_rows_match

pytestmark = pytest.mark.gpu

NAME = "moe_down_router_bf16"
N, K, TAIL = 1024, 2048, 17
BM, BN, BK, TAIL_SPLIT = 128, 256, 64, 4  # the module's default tile (M > 64) and split cap
SKEWED = [1900, 40, 700, 3, 0, 1200, 150, 90]  # Dirichlet-like: one large expert, an empty one, a few tiny ones


def _module():
    return importlib.import_module(f"generated.triton.{NAME}")


def _split(sizes: list[int], sms: int) -> tuple[int, int]:
    """(R, S) by the kernel's rule (kernels.jinja ragged_m)."""
    total = sum(-(-n // BM) for n in sizes) * -(-N // BN)
    r, s = total % sms, 1
    while r and s * 2 <= TAIL_SPLIT and r * s * 2 <= sms and 4 * s <= -(-K // BK):
        s *= 2
    return r, s


def _sizes_for(want: int, sms: int, nth: int = 0) -> list[int]:
    """SKEWED with its largest group moved a row tile at a time until the last wave splits `want` ways (1: a
    non-empty last wave that does not split); `nth` skips that many such sizes."""
    for step in range(0, 4 * sms):
        sizes = [*SKEWED]
        sizes[0] += BM * step - 64
        r, s = _split(sizes, sms)
        if s == want and r > 0:
            if nth == 0:
                return sizes
            nth -= 1
    raise AssertionError(f"no sizes near {SKEWED} split {want} ways on {sms} SMs")


def _data(rows: int, gen: torch.Generator):
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(len(SKEWED), N, K, device="cuda", dtype=torch.bfloat16, generator=gen) / K**0.5
    router = torch.rand(rows, device="cuda", dtype=torch.float32, generator=gen) + 0.5
    return a, w.transpose(-2, -1), router


def _offs(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)


def _reference(a, b, offs, router) -> torch.Tensor:
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = (a[start:end].double() @ b[g].double()) * router[start:end, None].double()
        start = end
    return out


def _workspace(module) -> tuple[torch.Tensor, torch.Tensor]:
    """The launcher's workspace for this device and stream: (f32 partials, int32 arrival counters)."""
    return module._launcher._workspaces[(torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream, False)]


@pytest.mark.parametrize("want", [4, 2, 1])
def test_skewed_down_projection_splits_its_last_wave(want: int) -> None:
    module = _module()
    fn = getattr(module, NAME)
    sms = module._launcher.num_sms(torch.cuda.current_device())
    sizes = _sizes_for(want, sms)
    r, s = _split(sizes, sms)
    gen = torch.Generator(device="cuda").manual_seed(37 + want)
    a, b, router = _data(sum(sizes) + TAIL, gen)
    offs = _offs(sizes)
    fn(a, b, offs, router)  # the first call allocates the workspace
    ws, counts = _workspace(module)
    ws.zero_()
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, b, offs, router, out=out)
    torch.cuda.synchronize()
    assert_rows_match(out, _reference(a, b, offs, router), f"sizes {sizes}: R {r} S {s}")
    written = int(ws[: ws.numel() // (BM * BN) * BM * BN].view(-1, BM * BN).ne(0).any(1).sum())
    assert not counts.any(), "an arrival counter was left set"
    assert written == (r * s if s > 1 else 0), f"{written} partial tiles written, R {r} S {s}"


def test_cuda_graph_replay_moves_the_tail_across_the_split() -> None:
    module = _module()
    fn = getattr(module, NAME)
    sms = module._launcher.num_sms(torch.cuda.current_device())
    plans = [_sizes_for(4, sms), _sizes_for(1, sms), _sizes_for(2, sms), _sizes_for(4, sms, nth=1)]
    assert plans[0] != plans[3]
    rows = max(sum(p) for p in plans) + TAIL
    gen = torch.Generator(device="cuda").manual_seed(39)
    a, b, router = _data(rows, gen)
    offs = _offs(plans[0])
    out = torch.full((rows, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(a, b, offs, router, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, router, out=out)
    for sizes in [*plans, plans[1]]:
        offs.copy_(_offs(sizes))
        a.copy_(torch.randn(a.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        r, s = _split(sizes, sms)
        assert_rows_match(out, _reference(a, b, offs, router), f"replay with sizes {sizes}: R {r} S {s}")
