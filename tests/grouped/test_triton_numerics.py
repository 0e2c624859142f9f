"""The grouped kind's numerics (specgen/kinds/grouped/testing/numerics.py) on its Triton design under the CPU
interpreter (f16 and f32: the interpreter multiplies bf16 as raw bits), and what else needs the kernel to run:
torch._grouped_mm's answer on the CPU, G = 1 against the dense kind's kernel, the 64-bit index path, a staged
`out` keeping its untouched rows, and a malformed group index that never moves a store outside `out`."""

from __future__ import annotations

import pytest
import torch
from kernels import catalogue, interpreter_variant

from specgen.kinds.gemm.testing.data import tolerance
from specgen.kinds.grouped.testing.data import BAND, CASES, Case, GroupedProblem
from specgen.kinds.grouped.testing.numerics import GroupedNumericsTests, written_rows_and_band
from specgen.kinds.grouped.testing.specs import FORMS, spec

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

# The forms every case runs on (each index format, tail, B major and most ops between them, fp8 with
# torch._scaled_grouped_mm's scales, gated epilogues of both layouts); the others on a few cases that reach their
# branches, the shipped fp8 kernel on one more whose 190 rows pass its decode variant's M <= 64 (its default
# 128x256x128 config runs there).
EVERY_CASE = ("g_offs_zero_kmn", "g_sizes_zero_kk", "g_pointer_kmn", "g_swap_variant", "g_fp8_rowcol", "g_gated_halves_kk",
              "g_gated_pointer_il_kk")
SOME_CASES = ("ragged", "empty_middle_consecutive", "tile_shared_by_4", "k_tail_strided")
PAST_DECODE = {"moe_fp8_rowwise_fp8": "g256_tiny"}


def shipped_grouped() -> dict[str, dict]:
    """The catalogue's ragged-M grouped kernels with a Triton target (ragged K's: tests/grouped/test_ragged_k.py) as their interpreter
    variants (bf16 and fp8 -> f16), as shipped otherwise; and each fp8 one with its fp8 operands kept (the
    interpreter converts them before its dot: only its bf16 out becomes f16)."""
    shipped = {name: s for name, s in catalogue("grouped").items() if s["groups"]["ragged"] == "m"
               and any(t.startswith("triton:") for t in s["targets"])}  # (a CuTe-only kernel has no Triton module)
    fp8 = {f"{name}_fp8": {**s, "name": f"{name}_fp8", "out": {"dtype": "f16"}}
           for name, s in shipped.items() if s["a"]["dtype"].startswith("fp8")}
    return {**{f"{name}_interp": interpreter_variant(s) for name, s in shipped.items()}, **fp8}


class TestTritonGroupedNumerics(GroupedNumericsTests):
    SPECS = {**FORMS, **shipped_grouped()}

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        return [(s, c) for s in cls.SPECS for c in CASES
                if s in EVERY_CASE or c in SOME_CASES or PAST_DECODE.get(s) == c]


def test_the_shipped_fp8_kernel_runs_in_fp8():
    """The fp8 catalogue kernel's numerics above run its e4m3 operands, not an f16 stand-in."""
    specs = TestTritonGroupedNumerics.SPECS
    assert specs["moe_fp8_rowwise_fp8"]["a"]["dtype"] == specs["moe_fp8_rowwise_fp8"]["b"]["dtype"] == "fp8_e4m3"
    assert set(PAST_DECODE) <= set(specs)


def test_matches_torch_grouped_mm_on_the_cpu(load_kernel):
    """torch._grouped_mm runs on the CPU in torch 2.13 (f32, f16; no bias): the same rows, both B majors."""
    for major in ("k", "mn"):
        s = spec(f"g_vs_torch_{major}", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": major},
                 out={"dtype": "f32"}, tile={"m": 16, "n": 16, "k": 8})
        module = load_kernel(s)
        problem = GroupedProblem(s, CASES["empty_middle_consecutive"], "torch")
        a, b, _ = problem.operands()
        offs = problem.index()
        got = getattr(module, s["name"])(a, b, offs)
        want = torch._grouped_mm(a, b, offs=offs)
        end = int(offs[-1])
        torch.testing.assert_close(got[:end], want[:end], rtol=2e-5, atol=2e-5)


def test_one_group_is_the_dense_kernel(load_kernel):
    """G = 1 holding every row computes what the dense kind's Triton kernel computes for the same GEMM, bias and
    activation (the same tile and K loop: bit for bit)."""
    s = spec("g_one_group", b={"dtype": "f16", "major": "mn"},
             epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "gelu"}])
    dense = {"name": "g_dense_twin", "kind": "gemm", "a": s["a"], "b": s["b"], "out": s["out"],
             "epilogue": [{"op": "bias", "along": "n", "dtype": "f16"}, {"op": "activation", "fn": "gelu"}],
             "tile": s["tile"], "targets": s["targets"], "triton": {"num_warps": 4, "tma": False}}
    problem = GroupedProblem(s, Case((45,), tail=0), "dense")
    a, b, _ = problem.operands()
    ((_, bias),) = problem.epilogue_args()
    got = getattr(load_kernel(s), s["name"])(a, b, problem.index(), bias)
    want = load_kernel(dense).g_dense_twin(a, b[0], bias[0])
    assert torch.equal(got, want)


def test_64_bit_offsets_compute_the_same(load_kernel, monkeypatch):
    """The INDEX_64 path (taken where an offset passes 2^31: _gg.needs_int64) gives the same result; forced
    here, as no CPU test holds 2^31 elements."""
    s = FORMS["g_sizes_zero_kk"]
    module = load_kernel(s)
    problem = GroupedProblem(s, CASES["ragged"], "int64")
    a, b, _ = problem.operands()
    args = [v for _, v in problem.epilogue_args()]
    plain = getattr(module, s["name"])(a, b, problem.index(), *args)
    monkeypatch.setattr(module._gg, "needs_int64", lambda *tensors: True)
    wide = getattr(module, s["name"])(a, b, problem.index(), *args)
    assert torch.equal(plain, wide)


def test_a_staged_out_keeps_its_untouched_rows(load_kernel):
    """An `out` off a 16-byte boundary is staged (copied in and back): rows past the groups keep its values."""
    s = FORMS["g_offs_untouched_kk"]
    problem = GroupedProblem(s, CASES["empty_last"], "staged")
    a, b, _ = problem.operands()
    rows, n = a.shape[0], b.shape[2]
    flat = torch.full((rows * n + 1,), 7.0, dtype=torch.float16)
    out = flat[1:].view(rows, n)
    assert out.data_ptr() % 16
    result = getattr(load_kernel(s), s["name"])(a, b, problem.index(), out=out)
    assert result is out
    end = sum(CASES["empty_last"].sizes)
    assert (out[end:] == 7.0).all() and not (out[:end] == 7.0).all()


@pytest.mark.parametrize("index", [[20, 5, 30], [5, 99, 200], [-3, 10, 12]], ids=["decreasing", "past_m", "negative"])
def test_a_malformed_index_never_writes_outside_out(load_kernel, index):
    """The index is never read on the host, so a malformed one cannot be refused there: the kernel clamps each
    end into [previous end, M], so no store lands outside `out` (what lands inside is unspecified)."""
    s = FORMS["g_offs_zero_kmn"]
    problem = GroupedProblem(s, CASES["ragged"], "malformed")
    a, b, _ = problem.operands()
    args = [v for _, v in problem.epilogue_args()]
    out, storage = problem.out()
    getattr(load_kernel(s), s["name"])(a, b, torch.tensor(index, dtype=torch.int32), *args, out=out)
    assert written_rows_and_band(out, storage).isnan().all()
    assert storage[:BAND].isnan().all() and storage[-BAND:].isnan().all()


def _ragged_run(load_kernel, s: dict, tag: str):
    """The kernel of spec `s` on the "ragged" case, checked against the float64 loop: (a, b, index, args, the
    result in float64, the written rows), for a test to hold mutated references against."""
    from specgen.kinds.grouped.testing.reference import grouped

    problem = GroupedProblem(s, CASES["ragged"], tag)
    a, b, _ = problem.operands()
    index = problem.index()
    args = dict(problem.epilogue_args())
    got = getattr(load_kernel(s), s["name"])(a, b, index, *args.values()).double()
    want, written = grouped(s, a, b, index, args)
    torch.testing.assert_close(got[written], want[written], **tolerance(s))
    return a, b, index, args, got, written


@pytest.mark.parametrize(("form", "name"), [("g_offs_zero_kmn", "bias"), ("g_fp8_rowcol", "scale_b"),
                                           ("g_fp8_rowcol", "scale_a")])
def test_the_tolerance_sees_per_group_and_per_row_operands(load_kernel, form, name):
    """Bias rows and fp8's scale_b rows are per group, scale_a's values per row: the reference with each group
    given its neighbour's row (or each row its neighbour's scale) fails the tolerance that the kernel meets (so a
    kernel indexing them by the wrong group or row would fail the numerics)."""
    from specgen.kinds.grouped.testing.reference import grouped

    s = FORMS[form]
    a, b, index, args, got, written = _ragged_run(load_kernel, s, "mutant")
    shifted, _ = grouped(s, a, b, index, {**args, name: args[name].roll(1, 0)})
    assert not torch.allclose(got[written], shifted[written], **tolerance(s))


@pytest.mark.parametrize("form", ["g_gated_halves_kk", "g_gated_f32"])
def test_the_tolerance_sees_the_gated_layout_and_fn(load_kernel, form):
    """A gated kernel reading its gate and up columns with the other layout, or applying another fn (gelu and
    gelu_tanh told apart where the out dtype is f32), would fail the numerics: each such reference fails the
    tolerance the kernel's result meets."""
    from specgen.kinds.gemm.testing.data import gated_mutants
    from specgen.kinds.grouped.testing.reference import grouped

    s = FORMS[form]
    a, b, index, args, got, written = _ragged_run(load_kernel, s, "gated_mutant")
    mutants = gated_mutants(s, s["epilogue"][0], CASES["ragged"].n)
    assert len(mutants) >= 2  # the other layout and at least one other fn
    for how, op in mutants:
        wrong, _ = grouped({**s, "epilogue": [op, *s["epilogue"][1:]]}, a, b, index, args)
        assert not torch.allclose(got[written], wrong[written], **tolerance(s)), f"{form}: {how} passes"


def test_a_gated_b_must_have_an_even_column_count(load_kernel):
    """B (G, K, 2N): an odd column count is refused before the launch, naming B's dim."""
    s = FORMS["g_gated_halves_kk"]
    problem = GroupedProblem(s, CASES["ragged"], "odd")
    a, b, _ = problem.operands()
    args = [v for _, v in problem.epilogue_args()]
    with pytest.raises(ValueError, match=r"b\.shape\[2\] = 47 must be even: the gated epilogue reads gate and up"):
        getattr(load_kernel(s), s["name"])(a, b[:, :, :47], problem.index(), *args)


def test_legal_odd_layouts_are_staged_and_give_the_same_result(load_kernel):
    """A strided or misaligned index, a column-major bias, an A off a 16-byte boundary: copied once on their
    device (never read on the host), the same result as the plain call."""
    s = FORMS["g_offs_zero_kmn"]
    fn = getattr(load_kernel(s), s["name"])
    problem = GroupedProblem(s, CASES["ragged"], "staging")
    a, b, _ = problem.operands()
    offs = problem.index()
    ((_, bias),) = problem.epilogue_args()
    plain = fn(a.contiguous(), b, offs, bias)
    strided_offs = torch.zeros(2 * offs.numel(), dtype=torch.int32)[::2]
    strided_offs.copy_(offs)
    misaligned_a = torch.empty(a.numel() + 1, dtype=a.dtype)[1:].view(a.shape)
    misaligned_a.copy_(a)
    assert misaligned_a.data_ptr() % 16 and strided_offs.stride(0) == 2
    column_bias = bias.t().contiguous().t()
    assert torch.equal(fn(misaligned_a, b, strided_offs, column_bias), plain)


def test_fp8_scales_in_odd_layouts_are_staged(load_kernel):
    """A strided scale_a, a (M, 1) one, a column-major or misaligned scale_b: legal, copied once on their device,
    the same result as contiguous ones."""
    s = FORMS["g_fp8_rowcol"]
    fn = getattr(load_kernel(s), s["name"])
    problem = GroupedProblem(s, CASES["empty_middle_consecutive"], "fp8_staging")
    a, b, _ = problem.operands()
    offs = problem.index()
    scale_a, scale_b = (v for _, v in problem.epilogue_args())
    end = int(offs[-1])  # the rows past the groups stay untouched: unspecified in a fresh out
    plain = fn(a, b, offs, scale_a, scale_b)[:end]
    strided_a = torch.zeros(2 * scale_a.numel())[::2]
    strided_a.copy_(scale_a)
    column_b = scale_b.t().contiguous().t()
    misaligned_b = torch.empty(scale_b.numel() + 1)[1:].view(scale_b.shape)
    misaligned_b.copy_(scale_b)
    assert strided_a.stride(0) == 2 and not column_b.is_contiguous() and misaligned_b.data_ptr() % 16
    assert torch.equal(fn(a, b, offs, strided_a, column_b)[:end], plain)
    assert torch.equal(fn(a, b, offs, scale_a[:, None], misaligned_b)[:end], plain)
