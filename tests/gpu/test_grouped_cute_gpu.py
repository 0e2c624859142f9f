"""The grouped CuTe sm90 design on the GPU (issue 37): every form of specgen/kinds/grouped/testing/specs.py
CUTE_FORMS (a decode-shaped variant and the gated epilogue's two layouts among them) on every case of the grouped numerics (the shared base: NaN-poisoned output inside a poisoned guard
band, empty groups first / middle / last / all, a group holding every row, a tile shared by four groups, rows of
one, 256 groups of 0-2 rows, no groups, K and N tails, strided operands) against the float64 per-group loop; the
catalogue's cute:sm90 kernels at MoE-like sizes against float64 and torch._grouped_mm (G = 1 against a dense
matmul); the decode variant (M <= 64: every group's rows, a 64-row tile on one warpgroup) on the kit's decode sizes,
at the decode benchmark's shape (32 experts x 2 rows, N 4096, K 7168, even and skewed) and under a CUDA graph
replayed with new decode sizes, the variant's compiled function checked to be the launcher's; guards before launch; and a CUDA
graph captured once and replayed with new group sizes.

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from specgen.kinds.grouped.testing.numerics import GroupedNumericsTests
from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES, assert_rows_match
from specgen.kinds.grouped.testing.specs import CUTE_FORMS, CUTE_FP8_FORMS

pytestmark = pytest.mark.gpu

N, K = 400, 328  # N past whole 256-column tiles (and no multiple of 16), K past whole 64-deep K tiles
SIZES = {"even": [128] * 4, **RAGGED_SIZES, "one_group": [333], "skewed": [700, 3, 0, 41, 0, 0, 1, 90],  # one: G = 1
         "decode_variant": DECODE_SIZES}  # 42 rows + the tail's 17 = 59 <= 64: the decode variant
TAIL = 17  # rows past the last group: untouched (they keep the poison)
DECODE_M = 64  # the catalogue's cute:sm90 decode variant: M (every group's rows) <= 64


def _ran(fn_module, rows: int) -> None:
    """The launcher holds the compiled config M selects: the decode variant (0) up to DECODE_M rows, else the default
    (tests/grouped/test_cute_sm90.py pins the selection itself, call by call)."""
    want = 0 if rows <= DECODE_M else None
    assert (torch.cuda.current_device(), want) in fn_module._launcher.ready, (rows, list(fn_module._launcher.ready))


_LOADED: dict[str, object] = {}  # one module (and one compile) per form for the whole run


class TestCuteFormsNumerics(GroupedNumericsTests):
    SPECS = CUTE_FORMS
    DEVICE = "cuda"

    @pytest.fixture
    def module(self, kernel_dir):
        from kernels import load_target_module

        def load(spec: dict):
            if spec["name"] not in _LOADED:
                _LOADED[spec["name"]] = load_target_module(spec, "cute:sm90", kernel_dir, "_specgen_gpu_cute_")[0]
            return _LOADED[spec["name"]]

        return load


class TestCuteFp8FormsNumerics(TestCuteFormsNumerics):
    SPECS = CUTE_FP8_FORMS


def _module(name: str):
    return importlib.import_module(f"generated.cute.{name}")


def _data(sizes: list[int], gen: torch.Generator):
    g, m = len(sizes), sum(sizes) + TAIL
    a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(g, N, K, device="cuda", dtype=torch.bfloat16, generator=gen) / K**0.5
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    return a, w.transpose(-2, -1), offs


def _reference(a, b, offs, epilogue=lambda y, g, rows: y) -> torch.Tensor:
    """float64, group by group; rows past the last group NaN (the poison they must keep)."""
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"), device="cuda", dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = epilogue(a[start:end].double() @ b[g].double(), g, slice(start, end))
        start = end
    return out


@pytest.mark.parametrize("case", list(SIZES))
def test_moe_bf16_against_float64_and_grouped_mm(case: str) -> None:
    fn = _module("moe_bf16").moe_bf16
    gen = torch.Generator(device="cuda").manual_seed(37)
    a, b, offs = _data(SIZES[case], gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert fn(a, b, offs, out=out) is out
    _ran(_module("moe_bf16"), a.shape[0])
    assert_rows_match(out, _reference(a, b, offs), case)
    rows = int(offs[-1])
    if rows:  # torch._grouped_mm on the same tensors: within two bf16 roundings of ours
        peer = torch._grouped_mm(a, b, offs=offs)[:rows].float()
        assert (out[:rows].float() - peer).abs().max().item() <= 3e-2 * (1 + peer.abs().max().item())
    if len(offs) == 1:  # G = 1 is the dense GEMM
        dense = (a[:rows].float() @ b[0].float())
        assert (out[:rows].float() - dense).abs().max().item() <= 3e-2 * (1 + dense.abs().max().item())


@pytest.mark.parametrize("case", ["odd", "many_tiny", "skewed", "decode_variant"])
def test_fused_catalogue_kernels_against_float64(case: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(41)
    a, b, offs = _data(SIZES[case], gen)
    g = len(offs)
    bias = torch.randn(g, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    router = torch.rand(a.shape[0], device="cuda", generator=gen) + 0.5
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    _module("moe_up_bias_silu_bf16").moe_up_bias_silu_bf16(a, b, offs, bias, out=out)
    assert_rows_match(out, _reference(a, b, offs, lambda y, i, r: torch.nn.functional.silu(y + bias[i].double())), f"up {case}")
    out.fill_(float("nan"))
    _module("moe_down_router_bf16").moe_down_router_bf16(a, b, offs, router, out=out)
    assert_rows_match(out, _reference(a, b, offs, lambda y, i, r: y * router[r, None].double()), f"down {case}")


@pytest.mark.parametrize("case", ["odd", "many_tiny", "skewed", "decode_variant"])
def test_gated_catalogue_kernel_against_float64(case: str) -> None:
    """moe_gate_up_swiglu_bf16 on cute:sm90: B (G, K, 2N) K-major with the gate and up columns interleaved (2j the
    gate's, 2j + 1 the up's), out = silu(gate) * up (N = 200: no whole 128-column tile), into a NaN-poisoned out
    whose rows past the last group keep the poison; the decode case runs the 64-row variant."""
    gen = torch.Generator(device="cuda").manual_seed(43)
    a, b, offs = _data(SIZES[case], gen)
    module = _module("moe_gate_up_swiglu_bf16")
    out = torch.full((a.shape[0], N // 2), float("nan"), device="cuda", dtype=torch.bfloat16)
    module.moe_gate_up_swiglu_bf16(a, b, offs, out=out)
    _ran(module, a.shape[0])
    y = _reference(a, b, offs)
    assert_rows_match(out, torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2], f"gated {case}")


@pytest.mark.parametrize("dist", ["even", "skewed"])
def test_decode_variant_at_the_benchmark_shape(dist: str) -> None:
    """The decode row of gpu/bench_grouped.py (32 experts, 2 rows each on average, N 4096, K 7168; skewed: the
    bench's Dirichlet(0.3) sizes, empty experts included) on the decode variant, against float64 and
    torch._grouped_mm, into a NaN-poisoned out."""
    sizes = ([2] * 32 if dist == "even" else
             [3, 2, 1, 3, 0, 4, 6, 0, 0, 2, 0, 0, 0, 19, 1, 0, 7, 2, 3, 0, 0, 1, 2, 2, 0, 0, 1, 1, 1, 0, 3, 0])
    module = _module("moe_bf16")
    gen = torch.Generator(device="cuda").manual_seed(39)
    n, k, m = 4096, 7168, sum(sizes)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = (torch.randn(len(sizes), n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5).transpose(-2, -1)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    module.moe_bf16(a, b, offs, out=out)
    _ran(module, m)
    assert_rows_match(out, _reference(a, b, offs), f"decode {dist}")
    peer = torch._grouped_mm(a, b, offs=offs).float()
    assert (out.float() - peer).abs().max().item() <= 3e-2 * (1 + peer.abs().max().item())


def test_guards_refuse_before_launch() -> None:
    fn = _module("moe_bf16").moe_bf16
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b, offs = _data([3, 4], gen)
    with pytest.raises(TypeError, match="offs"):
        fn(a, b, offs.long())
    with pytest.raises(ValueError, match="offs"):
        fn(a, b, offs[:1])
    with pytest.raises(TypeError, match=r"\ba\b"):
        fn(a.half(), b, offs)
    with pytest.raises(ValueError, match=r"\bb\b"):
        fn(a, b.contiguous(), offs)  # N-major B: the spec's is K-major


def test_cuda_graph_replays_new_group_sizes() -> None:
    fn = _module("moe_bf16").moe_bf16
    gen = torch.Generator(device="cuda").manual_seed(38)
    a, b, offs = _data([40, 0, 90, 3], gen)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(a, b, offs, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, out=out)
    for new in ([0, 120, 0, 13], [133, 0, 0, 0], [0, 0, 0, 0], [30, 31, 32, 33], [1, 1, 1, 1]):
        offs.copy_(torch.tensor(new, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32))
        a.copy_(torch.randn(a.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_match(out, _reference(a, b, offs), f"replay with sizes {new}")


def test_cuda_graph_replays_new_decode_sizes() -> None:
    """A decode step captured once (M = 48 rows: the decode variant) and replayed with other group sizes of the
    same rows, some groups empty, every row in one group, none at all."""
    module = _module("moe_bf16")
    gen = torch.Generator(device="cuda").manual_seed(40)
    a, b, offs = _data([3] * 8 + [2] * 8 + [0] * 8 + [1] * 7, gen)  # 47 rows + the tail: 64
    assert a.shape[0] <= DECODE_M
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            module.moe_bf16(a, b, offs, out=out)
    torch.cuda.current_stream().wait_stream(side)
    _ran(module, a.shape[0])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module.moe_bf16(a, b, offs, out=out)
    g = len(offs)
    for new in ([47] + [0] * (g - 1), [0] * g, [1] * (g - 1) + [17], [0] * (g - 1) + [40], DECODE_SIZES + [0] * (g - 16)):
        offs.copy_(torch.tensor(new, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32))
        a.copy_(torch.randn(a.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_match(out, _reference(a, b, offs), f"decode replay with sizes {new}")


@pytest.mark.parametrize("case", ["first_middle_last_empty", "odd", "many_tiny", "skewed", "decode_variant", "all_empty"])
def test_moe_fp8_rowwise_against_float64_and_scaled_grouped_mm(case: str) -> None:
    """e4m3 A and B (K-major), scale_a per row and scale_b per expert and column on the f32 accumulator, bf16 out,
    into a NaN-poisoned out: against the float64 loop over the same fp8 values and torch._scaled_grouped_mm."""
    module = _module("moe_fp8_rowwise")
    gen = torch.Generator(device="cuda").manual_seed(43)
    sizes = SIZES[case]
    g, m, k = len(sizes), sum(sizes) + TAIL, 352  # K: 2 whole 128-deep tiles and a 96-deep tail
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(g, N, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).transpose(-2, -1)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    sa = torch.rand(m, device="cuda", generator=gen) * 0.5 + 0.5
    sb = (torch.rand(g, N, device="cuda", generator=gen) * 0.5 + 0.5) / k**0.5
    out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert module.moe_fp8_rowwise(a, b, offs, sa, sb, out=out) is out
    _ran(module, m)
    assert_rows_match(out, _reference(a, b, offs, lambda y, i, r: y * sa[r, None].double() * sb[i].double()), f"fp8 {case}")
    rows = int(offs[-1])
    if rows:  # the peer on the same tensors (its B column-major: our K-major (G, K, N) view)
        peer = torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)[:rows].float()
        assert (out[:rows].float() - peer).abs().max().item() <= 2e-2 * (1 + peer.abs().max().item())
