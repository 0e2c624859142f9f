"""The grouped CuTe sm90 design's ragged K (the weight gradient, groups along K: out[g] = a[:, K of g] @ b[K of g],
out (G, M, N); templates/grouped/cute/ragged_k_sm90.jinja) on the GPU: both forms of CUTE_RAGGED_K_FORMS (A and B
M- and N-major, the training wgrad's layout, with a per-group bias and a chain, on two warpgroups; K-major A and B,
the sizes index, f32 out, on one) on every case of the ragged-K numerics (NaN-poisoned out inside a poisoned guard
band, empty groups first / middle / last / consecutive / all, a group of every K row, a K tile shared by four
groups, groups of one row, K rows past the last group, strided operands, 256 tiny groups, G = 0) against the float64
loop; bf16 at training-like sizes off the tile (several K tiles a group, a K tile shared by three groups, empty
groups first, middle and last) against float64 and torch._grouped_mm's 2-D x 2-D form; out stored in place by TMA
(16-byte strides, not staged) inside a NaN band, M below the tile and N off it; and a CUDA graph captured once and
replayed with new group sizes.

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.grouped.testing.ragged_k import RaggedKNumericsTests, ragged_k
from specgen.kinds.grouped.testing.specs import CUTE_RAGGED_K_FORMS

pytestmark = pytest.mark.gpu

_LOADED: dict[str, object] = {}  # one module (and one compile) per form for the whole run


def _load(spec: dict, kernel_dir):
    from kernels import load_target_module

    if spec["name"] not in _LOADED:
        _LOADED[spec["name"]] = load_target_module(spec, "cute:sm90", kernel_dir, "_specgen_gpu_cute_k_")[0]
    return _LOADED[spec["name"]]


class TestCuteRaggedKNumerics(RaggedKNumericsTests):
    SPECS = CUTE_RAGGED_K_FORMS
    DEVICE = "cuda"

    @pytest.fixture
    def module(self, kernel_dir):
        return lambda spec: _load(spec, kernel_dir)


# (sizes of each group's K rows, M, N): groups of several 64-deep K tiles and sizes off it; the K tile [64, 128) of
# the first holds rows of groups 1, 2 and 3 (70, 5 and 9 rows from 0); empty groups first, in the middle and last.
TRAINING_SIZES = {
    "shared_by_3": ([0, 70, 5, 9, 0, 200, 131, 0], 200, 300),
    "even": ([128] * 4, 256, 512),
}


def _operands(spec: dict, sizes: list[int], m: int, n: int, gen: torch.Generator):
    """x (K, M) and dy (K, N) in bf16 (or the form's dtype), passed in the spec's majors: a = x.T (M-major) or a
    K-major copy, b = dy (N-major) or a K-major copy."""
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["a"]["dtype"]]
    k = sum(sizes) + 3  # 3 K rows past the last group: never used
    x = torch.randn(k, m, device="cuda", generator=gen).to(dt)
    dy = torch.randn(k, n, device="cuda", generator=gen).to(dt)
    dy[sum(sizes):] = float("nan")  # rows past the last group: any value there must not reach out
    x[sum(sizes):] = float("nan")
    a = x.t() if spec["a"]["major"] == "mn" else x.t().contiguous()
    b = dy if spec["b"]["major"] == "mn" else dy.t().contiguous().t()
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    index = offs if spec["groups"]["index"] == "offs" else torch.tensor(sizes, device="cuda", dtype=torch.int32)
    return a, b, offs, index


def _args(spec: dict, g: int, n: int, gen: torch.Generator) -> dict:
    out = {}
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            out["bias"] = torch.randn(g, n, device="cuda", generator=gen).to(torch.bfloat16)
        elif op["op"] == "scale":
            out["alpha"] = 0.75
    return out


@pytest.mark.parametrize("case", sorted(TRAINING_SIZES))
@pytest.mark.parametrize("name", sorted(CUTE_RAGGED_K_FORMS))
def test_training_sizes_against_float64(name: str, case: str, kernel_dir) -> None:
    """Against the float64 loop (K rows past the last group NaN: never reach out); an empty group's out[g] zero
    where there is no epilogue (torch._grouped_mm: the catalogue kernel's test below)."""
    spec = CUTE_RAGGED_K_FORMS[name]
    fn = getattr(_load(spec, kernel_dir), name)
    sizes, m, n = TRAINING_SIZES[case]
    gen = torch.Generator(device="cuda").manual_seed(7)
    a, b, offs, index = _operands(spec, sizes, m, n, gen)
    args = _args(spec, len(sizes), n, gen)
    out = torch.full((len(sizes), m, n), float("nan"), device="cuda",
                     dtype=torch.float32 if spec["out"]["dtype"] == "f32" else torch.bfloat16)
    got = fn(a, b, index, *args.values(), out=out)
    assert got is out and not out.isnan().any()
    want = ragged_k(spec, a.double(), b.double(), index, {k: v.cpu() if isinstance(v, torch.Tensor) else v
                                                         for k, v in args.items()})
    err = (got.double().cpu() - want).abs().max().item()
    assert err <= 2e-2 * max(1.0, want.abs().max().item()), (name, case, err)
    for g, size in enumerate(sizes):
        if size == 0 and not spec["epilogue"]:
            assert (got[g] == 0).all(), f"empty group {g} not zero"


# (sizes, M, N) of out stored in place by TMA: M below the 64- and 128-row tiles and N off the tile, the vector and
# the subtile (37 x 29), and M, N of several tiles with partial last ones (200 x 300); empty groups first and last.
IN_PLACE_SIZES = {
    "below_tile": ([0, 40, 7, 0], 37, 29),
    "tiles_off_edge": ([0, 70, 0, 130, 0], 200, 300),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE_SIZES))
@pytest.mark.parametrize("name", sorted(CUTE_RAGGED_K_FORMS))
def test_tma_store_in_place_writes_only_out(name: str, case: str, kernel_dir) -> None:
    """out's subtiles go out by TMA over its (M, N, G) view, clipped at M and N. The numerics cases' out (24-column
    rows in a 3-column band: 54-byte strides) is staged by the guards; here each out[g] sits in a NaN storage with 16-byte
    strides, so the kernel stores into the caller's out itself: rows past M (the next group's band, then its out) and
    columns past N (the band beside each row) must stay NaN."""
    spec = CUTE_RAGGED_K_FORMS[name]
    fn = getattr(_load(spec, kernel_dir), name)
    sizes, m, n = IN_PLACE_SIZES[case]
    gen = torch.Generator(device="cuda").manual_seed(13)
    a, b, _, index = _operands(spec, sizes, m, n, gen)
    args = _args(spec, len(sizes), n, gen)
    dt = torch.float32 if spec["out"]["dtype"] == "f32" else torch.bfloat16
    per = 16 // dt.itemsize
    cols = -(-(n + 3) // per) * per  # at least 3 poisoned columns past each row, 16-byte rows
    store = torch.full((len(sizes), m + 6, cols), float("nan"), device="cuda", dtype=dt)
    out = store[:, 3: 3 + m, :n]
    assert out.data_ptr() % 16 == 0 and all(st * dt.itemsize % 16 == 0 for st in out.stride()[:2])  # not staged
    got = fn(a, b, index, *args.values(), out=out)
    assert got is out and not out.isnan().any()
    band = store.clone()
    band[:, 3: 3 + m, :n] = float("nan")
    assert band.isnan().all(), "the TMA store wrote outside out"
    want = ragged_k(spec, a.double(), b.double(), index, {k: v.cpu() if isinstance(v, torch.Tensor) else v
                                                         for k, v in args.items()})
    err = (got.double().cpu() - want).abs().max().item()
    assert err <= 2e-2 * max(1.0, want.abs().max().item()), (name, case, err)


def test_cuda_graph_replays_new_group_sizes(kernel_dir) -> None:
    spec = CUTE_RAGGED_K_FORMS["cgk_offs_mn_mn"]
    fn = getattr(_load(spec, kernel_dir), spec["name"])
    gen = torch.Generator(device="cuda").manual_seed(11)
    sizes = [64, 0, 100, 36]
    a, b, offs, _ = _operands(spec, sizes, 192, 256, gen)
    b = b.clone()  # finite rows everywhere: new sizes reach into the old tail
    a = torch.nan_to_num(a.t().contiguous(), nan=0.5).t()
    b = torch.nan_to_num(b, nan=0.25)
    args = _args(spec, len(sizes), 256, gen)
    out = torch.empty(len(sizes), 192, 256, device="cuda", dtype=torch.bfloat16)
    fn(a, b, offs, *args.values(), out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, *args.values(), out=out)
    host_args = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    for new in ([0, 0, 203, 0], [1, 77, 2, 120], [50, 50, 50, 50]):
        offs.copy_(torch.tensor(new, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = ragged_k(spec, a.double(), b.double(), offs, host_args)
        torch.testing.assert_close(out.double().cpu(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("case", sorted(TRAINING_SIZES))
def test_catalogue_moe_wgrad_against_float64_and_grouped_mm(case: str) -> None:
    """The catalogue's moe_wgrad_bf16 on cute:sm90 (128x256x64, two warpgroups; x passed as x.T, dy as it is):
    against float64 no worse than twice torch._grouped_mm's own error, an empty group's out[g] exactly zero."""
    import importlib

    fn = importlib.import_module("generated.cute.moe_wgrad_bf16").moe_wgrad_bf16
    spec = {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"}, "groups": {"index": "offs"},
            "epilogue": []}
    sizes, m, n = TRAINING_SIZES[case]
    a, b, offs, _ = _operands(spec, sizes, m, n, torch.Generator(device="cuda").manual_seed(3))
    got = fn(a, b, offs)
    want = ragged_k({**spec, "groups": {"index": "offs", "ragged": "k"}}, a.double(), b.double(), offs, {})
    # torch._grouped_mm wants 16-byte strides: dy's (N = 300: 600 B rows) through a copy with 16-byte rows
    b_peer = torch.empty(b.shape[0], -(-n // 8) * 8, device="cuda", dtype=b.dtype)[:, :n].copy_(b)
    peer = torch._grouped_mm(a, b_peer, offs=offs)
    err = (got.double().cpu() - want).abs().max().item()
    peer_err = (peer.double().cpu() - want).abs().max().item()
    assert err <= 2 * peer_err + 1e-3, (case, err, peer_err)
    for g, size in enumerate(sizes):
        if size == 0:
            assert (got[g] == 0).all(), f"empty group {g} not zero"
