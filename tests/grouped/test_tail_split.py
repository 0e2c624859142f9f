"""The grouped Triton forward's split last wave (templates/grouped/triton/kernels.jinja, ragged_m: plan.tail_split)
under the CPU interpreter: when the launch's tiles leave a last wave of R tiles with R * S <= NUM_SMS, those tiles run
as R * S parts along K and the last part to arrive sums them. The interpreter's program count (the launcher's
`num_sms`, 3 on the CPU) is set per test so that a small case leaves the tail it needs; the workspace's partials
(zeroed before each call) show which parts ran, so each case pins the split S the kernel chose, and its counters
must be back at zero after every call. Results against the float64 per-group loop, outputs NaN-poisoned."""

from __future__ import annotations

import json

import pytest
import torch

from specgen.kinds.gemm.testing.data import tolerance
from specgen.kinds.grouped.testing.data import Case, GroupedProblem
from specgen.kinds.grouped.testing.numerics import written_rows_and_band
from specgen.kinds.grouped.testing.reference import grouped
from specgen.kinds.grouped.testing.specs import FORMS, spec
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

# f32 (tile 16x16x8): K = 64 is 8 K steps, room for 4 parts of two; TMA loads, offs, rows past the groups zeroed,
# a per-group bias and GELU.
F32 = spec("g_tail_f32", a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "k"}, out={"dtype": "f32"},
           tile={"m": 16, "n": 16, "k": 8}, groups={"index": "offs", "tail": "zero"},
           epilogue=[{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu"}])
TAIL_SPLIT = 4  # the kernel's cap (the module's TAIL_SPLIT)


def expected_split(s: dict, case: Case, sms: int, tile: tuple[int, int, int]) -> tuple[int, int]:
    """(R, S) by the kernel's rule: over the P programs launched (NUM_SMS, or the launcher's tile bound where that
    is fewer), R = T mod P, S the largest power of two <= TAIL_SPLIT with R * S <= P and two K steps a part at
    least; S = 1 is no split."""
    bm, bn, bk = tile
    tiles_n = -(-case.n // bn)
    total = sum(-(-n // bm) for n in case.sizes) * tiles_n
    programs = min(sms, (-(-(sum(case.sizes) + case.tail) // bm) + len(case.sizes) + 1) * tiles_n)
    r, splits, k_tiles = total % programs, 1, -(-case.k // bk)
    while r and splits * 2 <= TAIL_SPLIT and r * splits * 2 <= programs and k_tiles >= 4 * splits:
        splits *= 2
    return r, splits


def run_case(module, s: dict, case: Case, sms: int, tag: str, monkeypatch, tile=None) -> int:
    """Run `case` on `sms` programs against the float64 loop; return the split S that ran (checked against the
    workspace: exactly R * S partial tiles written) with the counters back at zero."""
    launcher = module._launcher
    monkeypatch.setitem(launcher._devices, -1, (next(iter(launcher.configs.values())), sms))
    tile = tile or (s["tile"]["m"], s["tile"]["n"], s["tile"]["k"])
    r, splits = expected_split(s, case, sms, tile)
    for ws, _ in launcher._workspaces.values():
        ws.zero_()
    problem = GroupedProblem(s, case, tag)
    a, b, _ = problem.operands()
    index = problem.index()
    args = problem.epilogue_args()
    out, storage = problem.out()
    assert getattr(module, s["name"])(a, b, index, *(v for _, v in args), out=out) is out
    assert written_rows_and_band(out, storage).isnan().all(), "the kernel wrote outside the output"
    want, written = grouped(s, a, b, index, dict(args))
    got = out.double()
    assert not got[written].isnan().any() and got[~written].isnan().all()
    torch.testing.assert_close(got[written], want[written], **tolerance(s), msg=lambda m: f"{tag}: {m}")
    ((ws, counts),) = launcher._workspaces.values()
    assert not counts.any(), "an arrival counter was left set"
    gated = s["epilogue"] and s["epilogue"][0]["op"] == "gated"
    elems = tile[0] * tile[1] * (2 if gated else 1)
    parts = ws[: ws.numel() // elems * elems].view(-1, elems)  # (a grown workspace may end in a part tile)
    ran = int(parts.ne(0).any(1).sum())
    assert ran == (r * splits if splits > 1 else 0), f"{tag}: {ran} partial tiles written, R {r} S {splits}"
    assert not parts[ran:].any()
    return splits


@pytest.fixture(scope="module")
def f32_module(load_kernel):
    return load_kernel(F32)


@pytest.mark.parametrize(("sizes", "sms", "want"), [
    ((5, 0, 10), 3, 2),  # T = 6 tiles over 2 N tiles: 4, R = 1 of 3: S = 2
    ((5, 0, 33, 7), 8, 4),  # T = 10, R = 2 of 8: S = 4
    ((5, 12, 0), 8, 2),  # T = 4, R = 4 of 8: S = 2; the last group empty
    ((20, 0, 33, 7), 3, 1),  # T = 12, R = 0: no split
    # 64 SMs but a grid of 12 (the tile bound: (2 row tiles + 3 groups + 1) x 2): R = 4 of 12, S = 2 (S = 4's 16
    # items would pass the grid: found on an H200, tiles left unwritten and counters short)
    ((5, 0, 10), 64, 2),
])
def test_f32_split_wave_matches_float64(f32_module, monkeypatch, sizes, sms, want):
    assert run_case(f32_module, F32, Case(sizes, n=24, k=64, tail=5), sms, f"f32 {sizes}", monkeypatch) == want


def test_the_split_sums_what_the_unsplit_kernel_does(f32_module, monkeypatch):
    """TAIL_SPLIT = 1 turns the split off: the same case gives the same f32 result up to summation order."""
    case, sms = Case((5, 0, 33, 7), n=24, k=64, tail=5), 8
    monkeypatch.setitem(f32_module._launcher._devices, -1, (next(iter(f32_module._launcher.configs.values())), sms))
    problem = GroupedProblem(F32, case, "unsplit")
    a, b, _ = problem.operands()
    args = [v for _, v in problem.epilogue_args()]
    split = f32_module.g_tail_f32(a, b, problem.index(), *args)
    monkeypatch.setitem(f32_module._CONSTEXPRS, "TAIL_SPLIT", 1)
    whole = f32_module.g_tail_f32(a, b, problem.index(), *args)
    torch.testing.assert_close(split, whole, rtol=1e-6, atol=1e-6)


def test_back_to_back_calls_move_the_tail(f32_module, monkeypatch):
    """Calls in a row with new group sizes (R moving across the split / no-split boundary and between S = 4 and
    S = 2) each compute their own answer: the counters the last part resets serve the next launch."""
    got = [run_case(f32_module, F32, Case(sizes, n=24, k=64, tail=3), 8, f"seq {sizes}", monkeypatch)
           for sizes in ((5, 0, 33, 7), (20, 0, 33, 27), (5, 12, 0), (5, 0, 33, 7))]
    assert got == [4, 1, 2, 4]


@pytest.mark.parametrize(("form", "sizes", "sms", "want"), [
    # pointer loads, sizes, rows past the groups untouched, gated (halves: gate and up reduced as one tile)
    ("g_gated_pointer_halves_kmn", (5, 0, 10), 3, 2),
    # TMA loads, offs, zeroed tail, gated interleaved
    ("g_gated_il_kmn", (7, 0, 10), 3, 2),
    # the swapped decode variant (M <= 40: tile 16x32x16, the tile transposed back before the reduction)
    ("g_swap_variant", (5, 0, 10), 4, 2),
])
def test_forms_split_their_wave(load_kernel, monkeypatch, form, sizes, sms, want):
    s = FORMS[form]
    tile = (16, 32, 16) if form == "g_swap_variant" else None
    assert run_case(load_kernel(s), s, Case(sizes, n=24, k=64, tail=5), sms, form, monkeypatch, tile) == want


def test_which_plans_split():
    """The ragged-M forward splits (f32 accumulators); an f16 accumulator, ragged K and the training companions
    (dgrad, the GEMM that stores pre) do not."""
    def text(s: dict) -> str:
        (ls,) = load_text(json.dumps({"kernels": [s]}), "<test>", ".json")
        (module,) = render_modules(ls, ls.spec.targets).values()
        return module

    assert "_split_k_reduce(acc, ws_ptr" in text(F32)
    assert "ws_ptr" not in text(FORMS["g_acc16"])
    train = spec("g_tail_train", groups={"index": "offs", "tail": "zero"}, training={"save": "preact"},
                 epilogue=[{"op": "bias", "dtype": "f16"}, {"op": "activation", "fn": "gelu"}])
    module = text(train)
    assert module.count("acc, last = _split_k_reduce(") == 1  # the forward's only
    assert module.count("    ws_ptr,\n") == 1


def test_a_malformed_index_splits_as_the_cursor_reads_it(f32_module, monkeypatch):
    """A decreasing offs index: the vectorized count clamps it as the cursor does ([0, 20), [20, 20), [20, 30)), so
    the split covers exactly the cursor's tiles: those rows match the float64 loop over the clamped groups, nothing
    lands outside `out` and every counter is back at zero."""
    case = Case((20, 0, 10), n=24, k=64, tail=19)  # the clamped groups the malformed index below means
    sms = 5  # T = (2 + 0 + 1) x 2 = 6 tiles: R = 1, S = 4
    launcher = f32_module._launcher
    monkeypatch.setitem(launcher._devices, -1, (next(iter(launcher.configs.values())), sms))
    assert expected_split(F32, case, sms, (16, 16, 8)) == (1, 4)
    for ws, _ in launcher._workspaces.values():
        ws.zero_()
    problem = GroupedProblem(F32, case, "malformed")
    a, b, _ = problem.operands()
    args = dict(problem.epilogue_args())
    out, storage = problem.out()
    f32_module.g_tail_f32(a, b, torch.tensor([20, 5, 30], dtype=torch.int32), *args.values(), out=out)
    assert written_rows_and_band(out, storage).isnan().all(), "the kernel wrote outside the output"
    want, _ = grouped(F32, a, b, problem.index(), args)
    torch.testing.assert_close(out[:30].double(), want[:30], **tolerance(F32))
    ((ws, counts),) = launcher._workspaces.values()
    assert not counts.any() and int(ws[: ws.numel() // 256 * 256].view(-1, 256).ne(0).any(1).sum()) == 4
