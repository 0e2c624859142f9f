"""The grouped kind's Triton module on the GPU (issue 37): bf16 on real hardware (the CPU interpreter is
wrong for bf16), against a float64 per-group loop and torch._grouped_mm, on ragged group sizes with the output
NaN-poisoned first (rows past the last group must stay untouched); the fp8 kernel (e4m3, rowwise scales) the
same way against torch._scaled_grouped_mm, and its spec with e5m2 and e4m3 x e5m2 operands against float64; and a CUDA graph captured once and replayed with new group sizes
(the group index is read on the device only).

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES, assert_rows_match

pytestmark = pytest.mark.gpu

NAME = "moe_up_bias_silu_bf16"
N, K = 400, 328  # N and K past whole tiles (128x256x64; the decode variant's 16x128x128): column and K tails
SIZES = {"even": [64] * 4, **RAGGED_SIZES, "decode_variant": DECODE_SIZES}  # the decode one: the swapped variant
TAIL = 17  # rows past the last group: untouched (they keep the poison)


def _module():
    return importlib.import_module(f"generated.triton.{NAME}")


def _data(sizes: list[int], gen: torch.Generator):
    g, m = len(sizes), sum(sizes) + TAIL
    a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(g, N, K, device="cuda", dtype=torch.bfloat16, generator=gen) / K**0.5
    bias = torch.randn(g, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    return a, w.transpose(-2, -1), offs, bias


def _reference(a, b, offs, bias) -> torch.Tensor:
    """float64, group by group; rows past the last group NaN (the poison they must keep)."""
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"), device="cuda", dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            y = a[start:end].double() @ b[g].double() + bias[g].double()
            out[start:end] = torch.nn.functional.silu(y)
        start = end
    return out


@pytest.mark.parametrize("case", list(SIZES))
def test_ragged_groups_against_float64_and_grouped_mm(case: str) -> None:
    fn = getattr(_module(), NAME)
    gen = torch.Generator(device="cuda").manual_seed(37)
    a, b, offs, bias = _data(SIZES[case], gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, b, offs, bias, out=out)
    ref = _reference(a, b, offs, bias)
    assert_rows_match(out, ref, case)
    # torch._grouped_mm with the epilogue in eager: within two bf16 roundings of ours
    if sum(SIZES[case]) and hasattr(torch, "_grouped_mm"):
        rows = int(offs[-1])
        peer = torch._grouped_mm(a, b, offs=offs)[:rows].float()
        group = torch.repeat_interleave(torch.arange(len(offs), device="cuda"),
                                        torch.diff(offs, prepend=offs.new_zeros(1)).long(), output_size=rows)
        peer = torch.nn.functional.silu(peer + bias[group].float())
        assert (out[:rows].float() - peer).abs().max().item() <= 3e-2 * (1 + peer.abs().max().item())


def test_cuda_graph_replays_new_group_sizes() -> None:
    fn = getattr(_module(), NAME)
    gen = torch.Generator(device="cuda").manual_seed(38)
    sizes = [40, 0, 90, 3]
    a, b, offs, bias = _data(sizes, gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(a, b, offs, bias, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, bias, out=out)
    for new in ([0, 120, 0, 13], [133, 0, 0, 0], [0, 0, 0, 0], [30, 31, 32, 33]):
        offs.copy_(torch.tensor(new, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32))
        a.copy_(torch.randn(a.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_match(out, _reference(a, b, offs, bias), f"replay with sizes {new}")


FP8 = "moe_fp8_rowwise"
K8 = 336  # torch._scaled_grouped_mm wants K (and N) multiples of 16; past whole 128-deep K tiles all the same


def _fp8_data(sizes: list[int], gen: torch.Generator, a_dtype=torch.float8_e4m3fn, b_dtype=torch.float8_e4m3fn):
    """e4m3 (or the given fp8 formats) A (M, K) and the (G, N, K) weight passed transposed, scale_a (M,), scale_b
    (G, N), offs."""
    g, m = len(sizes), sum(sizes) + TAIL
    a = torch.randn(m, K8, device="cuda", generator=gen).to(a_dtype)
    w = torch.randn(g, N, K8, device="cuda", generator=gen).to(b_dtype)
    scale_a = torch.rand(m, device="cuda", generator=gen) * 0.5 + 0.5
    scale_b = (torch.rand(g, N, device="cuda", generator=gen) * 0.5 + 0.5) / K8**0.5
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    return a, w.transpose(-2, -1), offs, scale_a, scale_b


def _fp8_reference(a, b, offs, scale_a, scale_b) -> torch.Tensor:
    """torch._scaled_grouped_mm's meaning in float64, group by group; rows past the last group NaN."""
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"), device="cuda", dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            y = a[start:end].double() @ b[g].double()
            out[start:end] = y * scale_a[start:end, None].double() * scale_b[g].double()
        start = end
    return out


@pytest.mark.parametrize("case", list(SIZES))
def test_fp8_ragged_groups_against_float64_and_scaled_grouped_mm(case: str) -> None:
    fn = getattr(importlib.import_module(f"generated.triton.{FP8}"), FP8)
    gen = torch.Generator(device="cuda").manual_seed(39)
    a, b, offs, scale_a, scale_b = _fp8_data(SIZES[case], gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert fn(a, b, offs, scale_a, scale_b, out=out) is out
    assert_rows_match(out, _fp8_reference(a, b, offs, scale_a, scale_b), case)
    # torch._scaled_grouped_mm on the same tensors (its B column-major, as ours): within two bf16 roundings
    if sum(SIZES[case]) and hasattr(torch, "_scaled_grouped_mm"):
        rows = int(offs[-1])
        peer = torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16)[:rows].float()
        assert (out[:rows].float() - peer).abs().max().item() <= 3e-2 * (1 + peer.abs().max().item())


def test_fp8_cuda_graph_replays_new_group_sizes() -> None:
    fn = getattr(importlib.import_module(f"generated.triton.{FP8}"), FP8)
    gen = torch.Generator(device="cuda").manual_seed(40)
    a, b, offs, scale_a, scale_b = _fp8_data([40, 0, 90, 3], gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(a, b, offs, scale_a, scale_b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, scale_a, scale_b, out=out)
    for new in ([0, 120, 0, 13], [133, 0, 0, 0], [30, 31, 32, 33]):
        offs.copy_(torch.tensor(new, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32))
        scale_a.copy_(torch.rand(scale_a.shape, device="cuda", generator=gen) + 0.5)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_match(out, _fp8_reference(a, b, offs, scale_a, scale_b), f"fp8 replay with sizes {new}")


@pytest.mark.parametrize("case", ["even", "first_middle_last_empty", "all_empty", "one_holds_all", "odd", "many_tiny"])
def test_ragged_k_weight_gradient_against_float64_and_grouped_mm(case: str) -> None:
    """moe_wgrad_bf16 (groups along K): out[g] = x[rows of g].T @ dy[rows of g], every out[g] written (an empty
    group's zeros) over a NaN-poisoned out; K rows past the last group never read; torch._grouped_mm's 2-D x 2-D
    form agrees."""
    mod = importlib.import_module("generated.triton.moe_wgrad_bf16")
    sizes = SIZES[case]
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows = sum(sizes) + TAIL
    x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=gen) / max(max(sizes), 1) ** 0.5
    dy = torch.randn(rows, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out = torch.full((len(sizes), K, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    mod.moe_wgrad_bf16(x.t(), dy, offs, out=out)
    want = torch.zeros(len(sizes), K, N, device="cuda", dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        want[g] = x[start:end].double().t() @ dy[start:end].double()
        start = end
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    peer = torch._grouped_mm(x.t(), dy, offs=offs)
    torch.testing.assert_close(out.float(), peer.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(("n", "row_pad", "store"), [(400, 0, "tma"), (400, 3, "pointer"), (29, 3, "pointer")])
def test_ragged_k_stores_by_tma_in_place_or_through_pointers(monkeypatch, n: int, row_pad: int, store: str) -> None:
    """moe_wgrad_bf16's two stores (session 30): out (G, K, N) inside a NaN storage with rows of NaN above and below
    each out[g] and columns past N. 16-byte rows and strides: the host builds out's 3-D descriptor and TMA stores each
    out[g] tile in place, clipped at M = 328 (off the 128-row tile) within its group and at N = 400 (off 256); rows of
    403 elements (806 bytes), or N = 29 (58-byte rows in 64): no descriptor, the masked pointer store. Either way the
    band stays NaN and every out[g] (empty groups first, middle and last: zeros) matches float64."""
    from specgen.kinds.grouped.testing.ragged_k import padded_out
    from specgen.runtime import grouped

    mod = importlib.import_module("generated.triton.moe_wgrad_bf16")
    sizes = [0, 100, 0, 0, 77, 129, 1, 0]
    gen = torch.Generator(device="cuda").manual_seed(14)
    rows = sum(sizes) + TAIL
    x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=gen) / 12
    dy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out, storage = padded_out(len(sizes), K, n, torch.bfloat16, "cuda", row_pad)
    built = []
    real = grouped.out_descriptor
    monkeypatch.setattr(grouped, "out_descriptor", lambda *xs: built.append(real(*xs)) or built[-1])
    covered = torch.zeros(storage.shape, dtype=torch.bool, device="cuda")
    covered.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(True)
    ends = [0, *offs.tolist()]
    want = torch.stack([x[lo:hi].double().t() @ dy[lo:hi].double() for lo, hi in zip(ends, ends[1:], strict=False)])
    for call in range(2):  # the first through Triton's JIT, the second the launcher's direct launch of that kernel
        storage.fill_(float("nan"))
        assert mod.moe_wgrad_bf16(x.t(), dy, offs, out=out) is out
        torch.cuda.synchronize()
        assert len(built) == call + 1 and (built[call] is not None) == (store == "tma")
        assert storage[~covered].isnan().all(), f"call {call}: the store wrote outside out"
        assert not out.isnan().any()
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


def test_ragged_k_cuda_graph_replays_new_group_sizes() -> None:
    mod = importlib.import_module("generated.triton.moe_wgrad_bf16")
    gen = torch.Generator(device="cuda").manual_seed(12)
    x = torch.randn(512, K, device="cuda", dtype=torch.bfloat16, generator=gen) / 16
    dy = torch.randn(512, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    offs = torch.tensor([100, 100, 300, 512], device="cuda", dtype=torch.int32)
    mod.moe_wgrad_bf16(x.t(), dy, offs)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mod.moe_wgrad_bf16(x.t(), dy, offs)
    for ends in ([512, 512, 512, 512], [0, 0, 0, 7], [1, 200, 201, 480]):
        offs.copy_(torch.tensor(ends, device="cuda", dtype=torch.int32))
        graph.replay()
        torch.testing.assert_close(out.float(), torch._grouped_mm(x.t(), dy, offs=offs).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [("fp8_e5m2", "fp8_e5m2"), ("fp8_e4m3", "fp8_e5m2")])
def test_fp8_e5m2_forms_against_float64(a_dtype: str, b_dtype: str, tmp_path) -> None:
    """moe_fp8_rowwise's spec on triton:sm90 with e5m2 (torch._scaled_grouped_mm takes e4m3 only: float64 is the
    reference) and e4m3 A x e5m2 B (tl.dot takes the mix), every group-size case, NaN-poisoned tails kept."""
    from kernels import load_module

    fp8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
    name = f"gpu_moe_{a_dtype[4:]}_{b_dtype[4:]}"
    spec = {"name": name, "kind": "grouped", "a": {"dtype": a_dtype, "major": "k"}, "b": {"dtype": b_dtype, "major": "k"},
            "out": {"dtype": "bf16"}, "groups": {"index": "offs", "tail": "untouched"},
            "epilogue": [{"op": "scale", "by": "rowcol"}], "tile": {"m": 128, "n": 256, "k": 128},
            "triton": {"num_warps": 8}, "targets": ["triton:sm90"]}
    fn = getattr(load_module(spec, tmp_path), name)
    gen = torch.Generator(device="cuda").manual_seed(40)
    for case, sizes in SIZES.items():
        a, b, offs, scale_a, scale_b = _fp8_data(sizes, gen, fp8[a_dtype], fp8[b_dtype])
        out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert fn(a, b, offs, scale_a, scale_b, out=out) is out
        assert_rows_match(out, _fp8_reference(a, b, offs, scale_a, scale_b), f"{name} {case}")


@pytest.mark.parametrize(("a_major", "b_major"), [("k", "k"), ("mn", "k"), ("k", "mn")])
def test_ragged_k_tma_boxes_of_a_k_major_operand(load_kernel, a_major: str, b_major: str) -> None:
    """The ragged-K kernel's TMA loads where A or B is K-major: a box's first K element must sit on 16 bytes (an
    illegal instruction otherwise), so a group's boxes start at the 8-row boundary at or before its first row, the
    first one masked like the last. Groups start at rows 5, 14, 36, 169 and 170 (none on 8), one spans two whole
    tiles; the (M, 241) K-major operand's rows are 482 bytes, so the guards stage it aligned; rows past the last
    group never reach a sum."""
    from specgen.kinds.grouped.testing.specs import spec

    s = spec(f"gk_gpu_tma_{a_major}_{b_major}", a={"dtype": "bf16", "major": a_major},
             b={"dtype": "bf16", "major": b_major}, out={"dtype": "f32"}, tile={"m": 64, "n": 64, "k": 64},
             groups={"index": "offs", "ragged": "k"}, triton={"num_warps": 4})
    fn = getattr(load_kernel(s), s["name"])
    sizes, m, n = [5, 0, 9, 22, 133, 1, 64], 72, 40
    rows = sum(sizes) + 7
    gen = torch.Generator(device="cuda").manual_seed(13)
    x = torch.randn(rows, m, device="cuda", dtype=torch.bfloat16, generator=gen) / 8
    dy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    a = x.t().contiguous() if a_major == "k" else x.t()  # (M, K)
    b = dy.t().contiguous().t() if b_major == "k" else dy  # (K, N)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out = torch.full((len(sizes), m, n), float("nan"), device="cuda", dtype=torch.float32)
    fn(a, b, offs, out=out)
    torch.cuda.synchronize()
    ends = [0, *offs.tolist()]
    want = torch.stack([x[lo:hi].double().t() @ dy[lo:hi].double() for lo, hi in zip(ends, ends[1:], strict=False)])
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
