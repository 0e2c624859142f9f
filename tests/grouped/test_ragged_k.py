"""The grouped GEMM with groups along K (`groups.ragged = "k"`: the weight gradient, out (G, M, N)) on the Triton
design under the CPU interpreter: the numerics on every case (specgen/kinds/grouped/testing/ragged_k.py: empty
groups anywhere, all empty, one group of every K row, K rows past the last group never read, strided operands,
both majors, both index formats, a per-group bias and the chain after it, a size-selected variant, G = 0),
torch._grouped_mm's 2-D x 2-D answer on the CPU, the guards, and what the spec and check refuse."""

from __future__ import annotations

import json

import pytest
import torch
from kernels import catalogue, interpreter_variant

from specgen.check import check_specs
from specgen.kinds.grouped.testing.numerics import written_rows_and_band
from specgen.kinds.grouped.testing.ragged_k import RaggedKNumericsTests
from specgen.kinds.grouped.testing.specs import RAGGED_K_FORMS, spec
from specgen.spec.load import SpecError, load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

SOME_CASES = ("ragged", "empty_middle_consecutive", "all_empty", "k_tail_strided", "no_groups")


class TestTritonRaggedKNumerics(RaggedKNumericsTests):
    SPECS = {**RAGGED_K_FORMS, **{f"{name}_interp": interpreter_variant(s) for name, s in catalogue("grouped").items()
                                  if s["groups"]["ragged"] == "k"}}  # the shipped ones, bf16 -> f16

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        from specgen.kinds.grouped.testing.data import CASES

        # both loads (TMA, masked pointers) on every case; the others (a variant, the shipped ones) on a few
        every = ("gk_tma_offs_mn_mn", "gk_sizes_k_k", "gk_offs_mn_mn")
        return [(s, c) for s in cls.SPECS for c in CASES if s in every or c in SOME_CASES]


def test_matches_torch_grouped_mm_on_the_cpu(load_kernel):
    """torch._grouped_mm's 2-D x 2-D form (mat_a (M, K), mat_b (K, N), offs over K) runs on the CPU in torch 2.13
    (f32, 16-byte strides): the same (G, M, N), an empty group's zeros included."""
    s = spec("gk_vs_torch", a={"dtype": "f32", "major": "mn"}, b={"dtype": "f32", "major": "mn"}, out={"dtype": "f32"},
             tile={"m": 16, "n": 16, "k": 8}, groups={"ragged": "k"}, triton={"num_warps": 4, "tma": False})
    fn = getattr(load_kernel(s), s["name"])
    gen = torch.Generator().manual_seed(5)
    x, dy = torch.randn(48, 24, generator=gen), torch.randn(48, 8, generator=gen)  # (K, M) input, (K, N) gradient
    offs = torch.tensor([12, 12, 40], dtype=torch.int32)
    torch.testing.assert_close(fn(x.t(), dy, offs), torch._grouped_mm(x.t(), dy, offs=offs), rtol=2e-5, atol=2e-5)


def _module(load_kernel):
    s = RAGGED_K_FORMS["gk_offs_mn_mn"]
    return getattr(load_kernel(s), s["name"])


def _operands(k: int = 20, m: int = 16, n: int = 8):
    x, dy = torch.randn(k, m).half(), torch.randn(k, n).half()
    return x.t(), dy, torch.tensor([5, k], dtype=torch.int32)


@pytest.mark.parametrize(("change", "says"), [
    (lambda a, b, offs, out: (a, b[:-1], offs, out), "b.shape[0] (K)"),
    (lambda a, b, offs, out: (a, b, offs.long(), out), "must be int32"),
    (lambda a, b, offs, out: (a, b, offs[None], out), "must be a vector (G,)"),
    (lambda a, b, offs, out: (a, b, offs, torch.empty(2, 8, 16).half()), "must have shape (2, 16, 8)"),
    (lambda a, b, offs, out: (a, b.float(), offs, out), "dtype"),
])
def test_guards_name_the_argument_before_the_launch(load_kernel, change, says):
    fn = _module(load_kernel)
    a, b, offs = _operands()
    args = change(a, b, offs, None)
    with pytest.raises((TypeError, ValueError)) as e:
        fn(*args[:3], out=args[3])
    assert says in str(e.value) and "gk_offs_mn_mn" in str(e.value)


def test_a_gradient_through_it_is_refused(load_kernel):
    fn = _module(load_kernel)
    a, b, offs = _operands()
    with pytest.raises(Exception, match="grad"):
        fn(a.detach().requires_grad_(), b, offs)


def _refusal(**changes) -> str:
    with pytest.raises(SpecError) as e:
        load_text(json.dumps({"kernels": [{**RAGGED_K_FORMS["gk_offs_mn_mn"], **changes}]}), "t.json", ".json")
    return str(e.value)


def test_the_spec_refuses_what_ragged_k_does_not_mean():
    assert "groups.tail = 'zero' is for ragged M" in _refusal(groups={"ragged": "k", "tail": "zero"})
    assert "scale by = 'row' is a ragged-M kernel's" in _refusal(epilogue=[{"op": "scale", "by": "row"}])
    assert "scale by = 'rowcol'" in _refusal(epilogue=[{"op": "scale", "by": "rowcol"}])
    assert "a gated op is the forward's" in _refusal(epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}])
    fp8 = {"dtype": "fp8_e4m3", "major": "k"}
    assert "fp8 is the forward's" in _refusal(a=fp8, b=fp8, out={"dtype": "bf16"})


def _findings(**changes) -> dict[str, list]:
    (ls,) = load_text(json.dumps({"kernels": [{**RAGGED_K_FORMS["gk_offs_mn_mn"], **changes}]}), "t.json", ".json")
    out: dict[str, list] = {}
    for d in check_specs([ls], notes=True).diagnostics:
        out.setdefault(d.rule, []).append(d)
    return out


def test_check_on_ragged_k():
    """GRP001 (A M-major) is ragged M's; GRP103 refuses swap_ab and notes masked pointer loads (tma = false; with
    TMA, the default, no note); the TPU's grouped kernel renders ragged K since session 26 (GRP203, which refused
    it, is retired): no error there."""
    assert "GRP001" not in _findings()
    found = _findings(triton={"num_warps": 4, "tma": False, "swap_ab": True}, tile={"m": 16, "n": 64, "k": 16})
    assert {d.severity for d in found["GRP103"]} == {"error", "note"}
    assert "GRP103" not in _findings(triton={"num_warps": 4})
    tpu = _findings(a={"dtype": "bf16", "major": "mn"}, b={"dtype": "bf16", "major": "mn"}, out={"dtype": "bf16"},
                    tile={"m": 128, "n": 128, "k": 128}, targets=["pallas:tpu_v5e"])
    assert "GRP203" not in tpu and not [d for ds in tpu.values() for d in ds if d.severity == "error"]


def test_the_bench_peer_computes_what_a_ragged_k_spec_means_on_the_cpu():
    """bench's peer for a ragged-K spec (torch._grouped_mm's 2-D x 2-D form, then the epilogue, the per-group bias
    broadcast over each out[g]) against the float64 loop, with CPU tensors (its `inputs` are CUDA's); and the
    launcher's M and K (the layer's K and every group's rows) pick the variant."""
    from specgen.kinds.grouped import problem
    from specgen.kinds.grouped.spec import GroupedSpec
    from specgen.kinds.grouped.testing.data import Case
    from specgen.kinds.grouped.testing.ragged_k import RaggedKProblem, ragged_k

    s = spec("gk_peer", a={"dtype": "f32", "major": "mn"}, b={"dtype": "f32", "major": "mn"}, out={"dtype": "f32"},
             groups={"ragged": "k"}, triton={"num_warps": 4, "tma": False},
             epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "silu"}],
             variants=[{"when": {"m_max": 64, "k_max": 1000}, "tile": {"m": 32, "n": 16, "k": 16}}])
    model = GroupedSpec.model_validate(s)
    p = RaggedKProblem(s, Case((8, 0, 16), n=16, k=24, tail=0), "peer")  # 16-byte strides, as torch asks
    a, b, _ = p.operands()
    index = p.index()
    args = p.epilogue_args()
    got = problem.peer_call(model, model.targets[0], (a, b, index, *(v for _, v in args)))()
    torch.testing.assert_close(got.double(), ragged_k(s, a, b, index, dict(args)), rtol=1e-5, atol=1e-5)
    target = model.targets[0]
    assert problem.slot_for(model, target, problem.Shape(8, 100, 4096, 64)) == 0  # M = 64 (K), K = 800 rows
    assert problem.slot_for(model, target, problem.Shape(8, 200, 4096, 64)) is None  # 1600 rows


def test_tma_loads_take_no_k_rows_and_strides_off_16_bytes(load_kernel):
    """The TMA form's host side: with K = 0 (every group empty, nothing loaded) stand-in descriptors take the
    operands' place (TMA encodes no empty tensor) and every out[g] is zeros; an A whose rows are 26 bytes (13 f16
    columns of x) is staged by the guards (the interpreter's descriptor refuses a stride off 16 bytes) and its groups
    (5 rows: shorter than a 16-row tile, 0, 35: two tiles and 3 rows) match the float64 loop."""
    s = RAGGED_K_FORMS["gk_tma_offs_mn_mn"]
    fn = getattr(load_kernel(s), s["name"])
    out = torch.full((3, 13, 8), float("nan"), dtype=torch.float16)
    got = fn(torch.empty(0, 13).half().t(), torch.empty(0, 8).half(), torch.zeros(3, dtype=torch.int32), out=out)
    assert got is out and not out.isnan().any() and not out.any()
    gen = torch.Generator().manual_seed(3)
    x, dy = torch.randn(43, 13, generator=gen).half(), torch.randn(43, 8, generator=gen).half()
    offs = torch.tensor([5, 5, 40], dtype=torch.int32)
    out.fill_(float("nan"))
    fn(x.t(), dy, offs, out=out)
    ends = [0, *offs.tolist()]
    want = torch.stack([x[a:b].double().t() @ dy[a:b].double() for a, b in zip(ends, ends[1:], strict=False)])
    torch.testing.assert_close(out.double(), want, rtol=2e-3, atol=2e-3)


# The stores (session 30): out in a NaN storage whose base, group and row strides are 16-byte multiples, so the kernel
# stores out[g]'s tiles by TMA in place; M and N off the tile, so a box's rows past M (another group's rows in a
# (G * M, N) view: here the poisoned band) and columns past N must be clipped. A row_pad > 0 makes rows off 16 bytes:
# the masked pointer store, in place too. (form, group sizes, M, N, K rows past the last group, row_pad.)
STORE_CASES = {
    "empty_first_middle_last_k_tails": ("gk_tma_offs_mn_mn", (0, 5, 0, 35, 19, 0), 37, 40, 3, 0),
    "all_empty": ("gk_tma_offs_mn_mn", (0, 0, 0), 21, 24, 6, 0),
    "one_group": ("gk_tma_offs_mn_mn", (23,), 16, 16, 0, 0),
    "m_of_one": ("gk_tma_offs_mn_mn", (4, 0, 13), 1, 24, 0, 0),
    "f32_out_bias_gelu_k_major": ("gk_sizes_k_k", (9, 0, 30), 37, 36, 2, 0),
    "variant_f32": ("gk_f32_variant", (0, 17, 6), 37, 20, 4, 0),  # K = 27 <= 40: the 32x16x16 variant's boxes
    "pointer_rows_off_16_bytes": ("gk_tma_offs_mn_mn", (0, 5, 0, 35, 19, 0), 37, 40, 3, 3),
    "pointer_f32_rows_off_16_bytes": ("gk_sizes_k_k", (9, 0, 30), 37, 36, 2, 1),
}


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_each_store_writes_out_in_place_and_nothing_past_m_or_n(load_kernel, monkeypatch, case):
    """Each out[g] matches the float64 loop (an empty group's the epilogue of zeros), the poisoned band between the
    groups' rows and past N stays NaN, and the host took the store the layout allows (`_gg.out_descriptor` built one,
    with the config's box, or None)."""
    from specgen.kinds.gemm.testing.data import tolerance, torch_dtype
    from specgen.kinds.grouped.testing.data import Case
    from specgen.kinds.grouped.testing.ragged_k import RaggedKProblem, padded_out, ragged_k
    from specgen.runtime import grouped

    form, sizes, m, n, tail, row_pad = STORE_CASES[case]
    s = RAGGED_K_FORMS[form]
    fn = getattr(load_kernel(s), s["name"])
    problem = RaggedKProblem(s, Case(sizes, n=n, k=m, tail=tail), case)
    a, b, _ = problem.operands()
    index, args = problem.index(), problem.epilogue_args()
    out, storage = padded_out(len(sizes), m, n, torch_dtype(s["out"]["dtype"]), row_pad=row_pad)
    built = []
    real = grouped.out_descriptor
    monkeypatch.setattr(grouped, "out_descriptor", lambda *xs: built.append(real(*xs)) or built[-1])
    assert fn(a, b, index, *(v for _, v in args), out=out) is out
    tile = s["variants"][0]["tile"] if case.startswith("variant") else s["tile"]
    assert len(built) == 1
    assert (built[0] is None) if row_pad else (built[0] is not None and built[0].block_shape == [1, tile["m"], tile["n"]])
    assert written_rows_and_band(out, storage).isnan().all(), "the store wrote outside out"
    assert not out.isnan().any()
    want = ragged_k(s, a, b, index, dict(args))
    torch.testing.assert_close(out.double(), want, **tolerance(s))


def test_the_host_stores_by_tma_only_where_tma_can_take_out_in_place():
    """`_gg.out_descriptor`: a 3-D (G, M, N) descriptor of one group's tile where out's base, group and row strides
    and row extent are 16-byte multiples (a dim of one described as packed, whatever its stride), else None and the
    kernel's masked pointer store: the numerics cases' outs (rows of N + 3 elements), N = 29 f16 columns in rows of
    32 (a TMA store would write columns 29-31), a base off 16 bytes, overlapping groups."""
    from specgen.kinds.grouped.testing.data import CASES
    from specgen.kinds.grouped.testing.ragged_k import RaggedKProblem, padded_out
    from specgen.runtime.grouped import out_descriptor

    def desc(t):
        d = out_descriptor(t, 16, 32, lambda base, shape, strides, box: (shape, strides, box))
        return None if d is None else d[1]

    assert desc(padded_out(3, 37, 40, torch.float16)[0]) == [(37 + 6) * 48, 48, 1]
    assert desc(padded_out(2, 5, 36, torch.float32)[0]) == [11 * 40, 40, 1]
    assert desc(torch.empty(4, 37, 40, dtype=torch.float16)) == [37 * 40, 40, 1]
    assert desc(torch.empty(1, 37, 48)[:, :, :40]) == [37 * 48, 48, 1]  # G = 1
    assert desc(torch.empty(3 * 56).as_strided((3, 1, 40), (56, 3, 1))) == [56, 40, 1]  # M = 1: its stride unused
    assert desc(torch.empty(1, 1, 8).as_strided((1, 1, 8), (5, 3, 1))) == [8, 8, 1]
    spec = RAGGED_K_FORMS["gk_tma_offs_mn_mn"]
    assert desc(RaggedKProblem(spec, CASES["ragged"], "ragged").out()[0]) is None  # rows of 27 f16: 54 bytes
    assert desc(padded_out(3, 37, 29, torch.float16, row_pad=3)[0]) is None  # N = 29 f16 in rows of 32
    assert desc(torch.empty(3, 37, 41)[:, :, :40]) is None  # rows of 164 bytes
    assert desc(torch.empty(3 * 37 * 40 + 4, dtype=torch.float16)[4:].view(3, 37, 40)) is None  # base off 16 bytes
    assert desc(torch.empty(37, 40).expand(3, 37, 40)) is None  # every group the same rows
    assert desc(torch.empty(3, 40, 37).transpose(1, 2)) is None  # column-major
    assert desc(torch.empty(0, 37, 40)) is None


def test_the_plan_counts_the_out_tile_over_the_drained_stages():
    """SMEM001's figure for the ragged-K kernel: the A/B stages or the out tile, whichever is larger (after the K loop
    the tile goes through SMEM over the drained stages: the TMA store's staging, the pointer store's layout conversion).
    triton 3.9 and 3.6 for sm_90: 128x128x32 over 2 stages compiles at 32,800 B with a bf16 out, 65,536 B with an f32
    one; 128x256x32 f32 at 131,072; 128x256x64 bf16 over 4 stages at 196,672 (the stages' 196,608 and barriers)."""
    from specgen.resolve import resolve
    from specgen.spec.models import parse_target

    def planned(out: str, n: int, k: int, stages: int) -> int:
        s = {**RAGGED_K_FORMS["gk_tma_offs_mn_mn"], "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"},
             "out": {"dtype": out}, "tile": {"m": 128, "n": n, "k": k}, "pipeline": {"ab_stages": stages},
             "triton": {"num_warps": 8}}
        (ls,) = load_text(json.dumps({"kernels": [s]}), "t.json", ".json")
        return resolve(ls.spec, parse_target("triton:sm90")).budget.total

    assert planned("bf16", 128, 32, 2) == 32768 and planned("f32", 128, 32, 2) == 65536
    assert planned("f32", 256, 32, 2) == 131072 and planned("bf16", 256, 64, 4) == 196608


def test_the_ragged_m_plan_counts_the_out_tile_too():
    """The ragged-M kernel's masked pointer stores convert the accumulator's layout through SMEM over the drained
    stages the same way: triton 3.9 for sm_90 compiles a 128x128x32 bf16 x bf16 -> f32 tile over 2 stages at 65,536 B
    and 128x256x32 at 131,072 (`specgen compile`; the plan had the stages' 32,768 / 49,152 before session 30), a bf16
    out's tile stays under its stages."""
    from specgen.resolve import resolve
    from specgen.spec.models import parse_target

    def planned(out: str, n: int, stages: int) -> int:
        s = {"name": "gm_smem_plan", "kind": "grouped", "a": {"dtype": "bf16", "major": "k"},
             "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": out}, "groups": {"index": "offs", "tail": "untouched"},
             "tile": {"m": 128, "n": n, "k": 32}, "pipeline": {"ab_stages": stages}, "targets": ["triton:sm90"],
             "triton": {"num_warps": 8}}
        (ls,) = load_text(json.dumps({"kernels": [s]}), "t.json", ".json")
        return resolve(ls.spec, parse_target("triton:sm90")).budget.total

    assert planned("f32", 128, 2) == 65536 and planned("f32", 256, 2) == 131072
    assert planned("bf16", 128, 2) == 32768 and planned("bf16", 256, 4) == 4 * (128 + 256) * 32 * 2
