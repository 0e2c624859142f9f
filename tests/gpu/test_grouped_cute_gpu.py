"""The grouped CuTe sm90 design on the GPU (issue 37): every form of specgen/kinds/grouped/testing/specs.py
CUTE_FORMS (a decode-shaped variant and the gated epilogue's two layouts among them) on every case of the grouped numerics (the shared base: NaN-poisoned output inside a poisoned guard
band, empty groups first / middle / last / all, a group holding every row, a tile shared by four groups, rows of
one, 256 groups of 0-2 rows, no groups, K and N tails, strided operands) against the float64 per-group loop; the
catalogue's cute:sm90 kernels at MoE-like sizes against float64 and torch._grouped_mm (G = 1 against a dense
matmul); the decode variant (M <= 64: every group's rows, a 64-row tile on one warpgroup) on the kit's decode sizes,
at the decode benchmark's shape (32 experts x 2 rows, N 4096, K 7168, even and skewed) and under a CUDA graph
replayed with new decode sizes, the variant's compiled function checked to be the launcher's; guards before launch; and a CUDA
graph captured once and replayed with new group sizes.

The epilogue's two stores (session 29: a TMA store of each subtile whose rows are all its group's, or reach M; the
predicated vector stores of one a group's end cuts; templates/grouped/cute/kernel_sm90.jinja): every form on group
sizes that are and are not multiples of the tile in one launch (128 and 256 rows beside 130, 7, 200 and empty
groups; a last group ending at M off the tile), out a NaN-poisoned view with a padded 16-byte row stride written in
place (the guards do not stage it: TMA stores into the caller's out) inside a NaN band, and with N off 16 bytes
(staged: the columns past N stay NaN); tail zero and untouched, both B majors, fp8, the gated forms and the decode
tile; the catalogue's moe_fp8_rowwise at DeepSeek-V3 down's shape. (Written in session 29; not run on a GPU until
the lead reports it.)

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from specgen.kinds.gemm.testing.data import poison, tolerance, torch_dtype
from specgen.kinds.grouped.testing.data import BAND, Case, GroupedProblem
from specgen.kinds.grouped.testing.numerics import GroupedNumericsTests
from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES, assert_rows_match, grouped
from specgen.kinds.grouped.testing.specs import CUTE_FORMS, CUTE_FP8_FORMS
from specgen.runtime.guards import _needs_copy

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


def _form(spec: dict, kernel_dir):
    from kernels import load_target_module

    if spec["name"] not in _LOADED:
        _LOADED[spec["name"]] = load_target_module(spec, "cute:sm90", kernel_dir, "_specgen_gpu_cute_")[0]
    return _LOADED[spec["name"]]


class TestCuteFormsNumerics(GroupedNumericsTests):
    SPECS = CUTE_FORMS
    DEVICE = "cuda"

    @pytest.fixture
    def module(self, kernel_dir):
        return lambda spec: _form(spec, kernel_dir)


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


# Group sizes for the two stores in one launch (N 200: no whole 128- or 256-column tile, 400-byte rows; K 80: a K tail
# past one 64-deep tile, 16-byte rows for fp8 too): whole tiles (128, 256, 384 rows: every subtile by TMA) beside
# groups their end cuts (130, 200: whole tiles then a partial one; 7: one partial tile), empty groups in the middle
# and last, rows past the last group (untouched, or zeros where the form says tail = "zero": TMA, the tail ends at
# M); a last group ending at M off the tile (its partial tile by TMA, clipped at M).
STORE_CASES = {
    "mixed": Case((256, 0, 130, 128, 7, 0, 384, 200), n=200, k=80, tail=17),
    "ends_at_m": Case((128, 0, 300), n=200, k=80, tail=0),
    "empty_last": Case((0, 131, 128, 0, 0), n=200, k=80, tail=9),
}
STORE_FORMS = {**CUTE_FORMS, **CUTE_FP8_FORMS}


@pytest.mark.parametrize(("case", "n"), [("mixed", 200), ("mixed", 203), ("ends_at_m", 200), ("empty_last", 200)])
@pytest.mark.parametrize("name", sorted(STORE_FORMS))
def test_tma_and_predicated_stores_in_one_launch(name: str, case: str, n: int, kernel_dir) -> None:
    """out a NaN-poisoned (rows, N) view of a NaN storage with BAND rows above and below and a padded row pitch (16
    bytes and at least 3 columns past N). N = 200: 16-byte rows, so the guards leave it in place and the TMA stores
    write the caller's out; N = 203 (406-byte bf16 rows): staged by the guards (a TMA store moves a row's last 16
    bytes whole). Either way: nothing outside out written, every group's row within the float64 loop's tolerance,
    rows past the last group zero (tail "zero") or still NaN (untouched)."""
    spec = STORE_FORMS[name]
    fn = getattr(_form(spec, kernel_dir), name)
    c = dataclasses.replace(STORE_CASES[case], n=n)
    problem = GroupedProblem(spec, c, f"stores-{case}-{n}", "cuda")
    a, b, _ = problem.operands()
    index = problem.index()
    args = problem.epilogue_args()
    dtype = torch_dtype(spec["out"]["dtype"])
    per = 16 // dtype.itemsize
    storage = torch.full((c.rows + 2 * BAND, -(-(n + 3) // per) * per), poison(dtype), device="cuda", dtype=dtype)
    out = storage[BAND: BAND + c.rows, :n]
    assert _needs_copy(out, -1, True, store=True) == (n * dtype.itemsize % 16 != 0)  # in place at N = 200
    assert fn(a, b, index, *(v for _, v in args), out=out) is out
    torch.cuda.synchronize()
    band = storage.clone()
    band[BAND: BAND + c.rows, :n] = float("nan")
    assert band.isnan().all(), f"{name} {case}: written outside out: {(~band.isnan()).nonzero()[:6].tolist()}"
    want, written = grouped(spec, a, b, index, {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args})
    got = out.cpu().double()
    assert not got[written].isnan().any(), f"{name} {case}: {int(got[written].isnan().sum())} elements unwritten"
    assert got[~written].isnan().all(), f"{name} {case}: a row past the groups (tail untouched) was written"
    torch.testing.assert_close(got[written], want[written], **tolerance(spec), msg=lambda m: f"{name} {case} N={n}: {m}")


@pytest.mark.parametrize("dist", ["even", "skewed"])
def test_moe_fp8_rowwise_at_deepseek_v3_down(dist: str) -> None:
    """The benchmark's fp8 DeepSeek-V3 down row (32 experts, 128 rows each, N 7168, K 2048: every subtile by TMA;
    skewed: the same 4096 rows in sizes off the tile, empty experts among them, so both stores run) into a
    NaN-poisoned out, against the float64 loop and torch._scaled_grouped_mm."""
    module = _module("moe_fp8_rowwise")
    gen = torch.Generator(device="cuda").manual_seed(29)
    sizes = [128] * 32 if dist == "even" else [295, 0, 77, 128, 1, 0, 513, 256, 99, 131, 0, 2] + [143] * 18 + [20, 0]
    assert sum(sizes) == 4096 and len(sizes) == 32
    n, k, m = 7168, 2048, sum(sizes)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(len(sizes), n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).transpose(-2, -1)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    sa = torch.rand(m, device="cuda", generator=gen) * 0.5 + 0.5
    sb = (torch.rand(len(sizes), n, device="cuda", generator=gen) * 0.5 + 0.5) / k**0.5
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert module.moe_fp8_rowwise(a, b, offs, sa, sb, out=out) is out
    assert_rows_match(out, _reference(a, b, offs, lambda y, i, r: y * sa[r, None].double() * sb[i].double()),
                      f"fp8 DeepSeek-V3 down {dist}")
    peer = torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16).float()
    assert (out.float() - peer).abs().max().item() <= 2e-2 * (1 + peer.abs().max().item())
