"""The ragged-K grouped GEMM's numerics (`groups.ragged = "k"`, the weight gradient): subclass `RaggedKNumericsTests`.

A case of data.CASES reads here as: `sizes` each group's K rows, `tail` K rows past the last group (never read),
`k` the output's M, `n` its N, `layout` whether operands are strided. A (M, total K) and B (total K, N) are seeded
in the spec's majors inside poisoned storages; out (G, M, N) is NaN-poisoned inside a poisoned guard band (rows
above and below each out[g], columns beside). Every out[g] must be written (an empty group's is the epilogue of
zeros), nothing outside out, no input touched, and each must match the float64 loop (`ragged_k`) within the
dense kind's tolerance."""

from __future__ import annotations

import zlib

import torch

from specgen.kinds.gemm.testing.data import place, poison, tolerance, torch_dtype
from specgen.kinds.gemm.testing.reference import gemm
from specgen.kinds.grouped.testing.data import BAND, CASES, Case
from specgen.kinds.grouped.testing.numerics import GroupedNumericsTests, written_rows_and_band
from specgen.kinds.grouped.testing.reference import dense_epilogue, group_bounds


def ragged_k(spec: dict, a: torch.Tensor, b: torch.Tensor, index: torch.Tensor, args: dict[str, object]) -> torch.Tensor:
    """out (G, M, N) in float64: group g's K rows of A^T and B through the dense kind's float64 reference, its bias
    row bias[g]; an empty group is the epilogue of a zero product."""
    m, n = a.shape[0], b.shape[1]
    chain = dense_epilogue(spec)
    group_args = {op["name"] for op in spec["epilogue"] if op["op"] == "bias"}
    bounds = group_bounds(spec, index, a.shape[1])
    out = torch.zeros(len(bounds), m, n, dtype=torch.float64)
    for g, (start, end) in enumerate(bounds):
        mine = {name: (v[g] if name in group_args else v) for name, v in args.items()}
        out[g] = gemm(chain, a[:, start:end].cpu(), b[start:end].cpu(), mine)
    return out


class RaggedKProblem:
    def __init__(self, spec: dict, case: Case, tag: str, device: str = "cpu") -> None:
        self.spec, self.case, self.device = spec, case, device
        self.gen = torch.Generator().manual_seed(zlib.crc32(f"{spec['name']}/{tag}".encode()))
        self.m = case.k  # the output's rows

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def operands(self) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        c, spec = self.case, self.spec
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        scale = max(max(c.sizes, default=1), 1) ** 0.5  # each out[g] sums a group's K products: O(1) results
        a, a_store = place((self.randn(self.m, c.rows) / scale).to(a_dt), -1 if spec["a"]["major"] == "k" else -2,
                           False, c.layout, self.device)
        b, b_store = place(self.randn(c.rows, c.n).to(b_dt), -2 if spec["b"]["major"] == "k" else -1, False, c.layout,
                           self.device)
        return a, b, [a_store, b_store]

    def index(self) -> torch.Tensor:
        sizes = torch.tensor(self.case.sizes, dtype=torch.int32)
        return (sizes.cumsum(0, dtype=torch.int32) if self.spec["groups"]["index"] == "offs" else sizes).to(self.device)

    def epilogue_args(self) -> list[tuple[str, object]]:
        args: list[tuple[str, object]] = []
        for op in self.spec["epilogue"]:
            if op["op"] == "bias":
                args.append((op["name"], self.randn(len(self.case.sizes), self.case.n).to(torch_dtype(op["dtype"])).to(self.device)))
            elif op["op"] == "scale" and op["value"] is None:  # by = "scalar" (a ragged-K spec takes no per-row scale)
                args.append((op["name"] or "alpha", 0.75))
        return args

    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A poisoned (G, M, N) output view inside a poisoned storage with BAND rows above and below each out[g] and
        BAND columns past each row: (view, storage)."""
        c, dtype = self.case, torch_dtype(self.spec["out"]["dtype"])
        storage = torch.full((len(c.sizes), self.m + 2 * BAND, c.n + BAND), poison(dtype), dtype=dtype, device=self.device)
        return storage[:, BAND: BAND + self.m, : c.n], storage


class RaggedKNumericsTests(GroupedNumericsTests):
    """A subclass gives `SPECS` (name -> ragged-K spec, plain data) and may override `cases()`, `module` and `run`
    (GroupedNumericsTests': the torch entry's `name(a, b, index, *args, out=out)`)."""

    def test_matches_the_per_group_loop(self, name: str, case: str, module) -> None:
        spec = self.SPECS[name]
        problem = RaggedKProblem(spec, CASES[case], case, self.DEVICE)
        a, b, stores = problem.operands()
        index = problem.index()
        args = problem.epilogue_args()
        out, out_store = problem.out()
        tensors = [*stores, index, *(v for _, v in args if isinstance(v, torch.Tensor))]
        before = [t.clone() for t in tensors]

        result = self.run(module(spec), spec, a, b, index, args, out)

        assert result is out
        assert written_rows_and_band(out, out_store).isnan().all(), "the kernel wrote outside the output"
        for t, was in zip(tensors, before, strict=True):
            torch.testing.assert_close(t, was, rtol=0, atol=0, equal_nan=True)  # inputs untouched
        got = result.cpu().double()
        assert not got.isnan().any(), f"{int(got.isnan().sum())} elements of out unwritten"
        want = ragged_k(spec, a, b, index, {n: v.cpu() if isinstance(v, torch.Tensor) else v for n, v in args})
        torch.testing.assert_close(got, want, **tolerance(spec), msg=lambda m: f"{name} {case}: {m}")


def padded_out(groups: int, m: int, n: int, dtype: torch.dtype, device: str = "cpu",
               row_pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A NaN-poisoned (G, M, N) out inside a NaN storage with BAND rows above and below each out[g] and columns past
    N: (view, storage). `row_pad` 0 gives rows of 16-byte multiples (N rounded up to 16 bytes, plus 16 bytes) and a
    16-byte base, so the kernel's TMA store takes out in place and its boxes' rows past M and columns past N would
    land in the poison; any other row_pad makes rows of N + row_pad elements (the pointer store's layout where that is
    no 16-byte multiple), with 16 bytes of rows above each out[g] so that its base stays on 16 bytes (the guards
    stage an out whose base is off them)."""
    per = max(1, 16 // dtype.itemsize)
    cols, band = (-(-n // per) * per + per, BAND) if row_pad == 0 else (n + row_pad, per)
    storage = torch.full((groups, m + 2 * band, cols), poison(dtype), dtype=dtype, device=device)
    return storage[:, band: band + m, :n], storage
