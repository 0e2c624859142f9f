"""The numerics every grouped backend's tests run: subclass `GroupedNumericsTests`.

Each case runs a rendered kernel on seeded data with its output NaN-poisoned inside a poisoned guard band
(data.py): only each group's rows may change (and the rows past the last group, to zeros, where the spec says
`tail = "zero"`; where it says "untouched" they keep their poison), nothing outside the output may be written,
no input may be touched, and every written row must match the float64 per-group loop (reference.py) within the
dense kind's tolerance (kinds/gemm/testing/data.py `tolerance`).

A subclass gives `SPECS` (name -> spec, plain data), `cases()` (the (spec, case) pairs; default: every spec on
every case of data.CASES), the `module` fixture (spec -> loaded module) and `run` (the call; default the torch
entry's `name(a, b, index, *args, out=out)`)."""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.gemm.testing.data import tolerance
from specgen.kinds.grouped.testing.data import CASES, GroupedProblem
from specgen.kinds.grouped.testing.reference import grouped


def written_rows_and_band(out: torch.Tensor, storage: torch.Tensor) -> torch.Tensor:
    """The storage's elements outside the output view (the guard band)."""
    covered = torch.zeros(storage.shape, dtype=torch.bool, device=storage.device)
    covered.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(True)
    return storage[~covered]


class GroupedNumericsTests:
    SPECS: dict[str, dict] = {}
    DEVICE = "cpu"

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        return [(s, c) for c in CASES for s in cls.SPECS]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if metafunc.function.__name__ == "test_matches_the_per_group_loop":
            cases = type(self).cases()
            assert cases, f"{type(self).__name__} lists no numerics cases"
            metafunc.parametrize(("name", "case"), cases, ids=[f"{c}-{s}" for s, c in cases])

    @pytest.fixture
    def module(self, load_kernel):
        return load_kernel

    def run(self, module: object, spec: dict, a: torch.Tensor, b: torch.Tensor, index: torch.Tensor,
            args: list[tuple[str, object]], out: torch.Tensor | None) -> torch.Tensor:
        return getattr(module, spec["name"])(a, b, index, *(v for _, v in args), out=out)

    def test_matches_the_per_group_loop(self, name: str, case: str, module) -> None:
        spec = self.SPECS[name]
        mod = module(spec)
        problem = GroupedProblem(spec, CASES[case], case, self.DEVICE)
        a, b, stores = problem.operands()
        index = problem.index()
        args = problem.epilogue_args()
        out, out_store = problem.out()
        inputs = [t.clone() for t in (*stores, index, *(v for _, v in args if isinstance(v, torch.Tensor)))]

        result = self.run(mod, spec, a, b, index, args, out)

        assert result is out
        assert written_rows_and_band(out, out_store).isnan().all(), "the kernel wrote outside the output"
        for t, before in zip((*stores, index, *(v for _, v in args if isinstance(v, torch.Tensor))), inputs, strict=True):
            torch.testing.assert_close(t, before, rtol=0, atol=0, equal_nan=True)  # inputs untouched
        want, written = grouped(spec, a, b, index, {n: v.cpu() if isinstance(v, torch.Tensor) else v for n, v in args})
        got = result.cpu().double()
        assert not got[written].isnan().any(), f"{int(got[written].isnan().sum())} elements of the groups' rows unwritten"
        assert got[~written].isnan().all(), "a row past the groups (tail untouched) was written"
        torch.testing.assert_close(got[written], want[written], **tolerance(spec), msg=lambda m: f"{name} {case}: {m}")
