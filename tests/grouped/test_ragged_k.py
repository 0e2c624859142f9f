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
