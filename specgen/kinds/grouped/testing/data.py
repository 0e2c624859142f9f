"""The problems the grouped numerics run on: group sizes (empty groups first, in the middle, last, several in a
row, all of them; a group holding every row; sizes no multiple of the tile; a tile shared by three or more
groups; groups of one row; 256 groups of 0-2 rows) over a few rows past the last group, seeded operands in the
spec's majors inside poisoned storages (kinds/gemm/testing/data.py's `place`), and a NaN-poisoned output with a
guard band of poisoned rows above and below it and columns beside it."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import torch

from specgen.kinds.gemm.testing.data import gated_spec, place, poison, torch_dtype

BAND = 3  # poisoned rows above and below the output, and columns past its rows


@dataclass(frozen=True)
class Case:
    """Group sizes, then rows past the last group (`tail`), N and K, and whether operands are strided."""

    sizes: tuple[int, ...]
    n: int = 24
    k: int = 40
    tail: int = 5
    layout: str = "dense"

    @property
    def rows(self) -> int:
        return sum(self.sizes) + self.tail


def tiny_groups(count: int = 256, seed: int = 37) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.choice((0, 0, 1, 2)) for _ in range(count))


# With a 16-row tile: 5 + 17 + 33 rows cross tile edges everywhere; 3 + 4 + 5 + 2 rows share one tile.
CASES: dict[str, Case] = {
    "ragged": Case((5, 17, 33)),
    "empty_first": Case((0, 9, 20)),
    "empty_middle_consecutive": Case((7, 0, 0, 11)),
    "empty_last": Case((12, 19, 0, 0)),
    "all_empty": Case((0, 0, 0)),
    "one_group_holds_all": Case((0, 37, 0)),
    "tile_shared_by_4": Case((3, 4, 5, 2), tail=0),
    "rows_of_one": Case((1, 1, 0, 1), tail=1),
    "k_tail_strided": Case((6, 21), n=20, k=37, layout="strided"),
    "k_below_tile": Case((9, 8), k=5),
    "no_tail": Case((16, 16, 3), tail=0),
    "g256_tiny": Case(tiny_groups(), n=16, k=16, tail=2),
    "no_groups": Case((), tail=9),  # G = 0: every row is past the groups
}


class GroupedProblem:
    """One case for `spec`: A (rows, K), B (G, K, N) in the spec's majors (G, K, 2N with a gated epilogue) and dtypes
    (fp8 ones rounded from the same normal draws), the group index as the spec passes it (int32 offs or sizes), the
    epilogue's arguments in chain order (scales positive: a per-row one (rows,), per-group column ones (G, N)), and
    the poisoned output."""

    def __init__(self, spec: dict, case: Case, tag: str, device: str = "cpu") -> None:
        self.spec, self.case, self.device = spec, case, device
        self.gen = torch.Generator().manual_seed(zlib.crc32(f"{spec['name']}/{tag}".encode()))

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def positive(self, *shape: int) -> torch.Tensor:
        """Scales in [0.5, 1.5) (f32): a row's, or a group's column factors."""
        return (torch.rand(*shape, generator=self.gen) + 0.5).to(self.device)

    def operands(self) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        c, spec = self.case, self.spec
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        a, a_store = place((self.randn(c.rows, c.k) / max(c.k, 1) ** 0.5).to(a_dt), -1, False, c.layout, self.device)
        b_cols = 2 * c.n if gated_spec(spec) else c.n  # a gated epilogue's B holds gate and up columns
        b, b_store = place(self.randn(len(c.sizes), c.k, b_cols).to(b_dt), -2 if spec["b"]["major"] == "k" else -1,
                           False, c.layout, self.device)
        return a, b, [a_store, b_store]

    def index(self) -> torch.Tensor:
        sizes = torch.tensor(self.case.sizes, dtype=torch.int32)
        index = sizes.cumsum(0, dtype=torch.int32) if self.spec["groups"]["index"] == "offs" else sizes
        return index.to(self.device)

    def epilogue_args(self) -> list[tuple[str, object]]:
        c, g = self.case, len(self.case.sizes)
        args: list[tuple[str, object]] = []
        for op in self.spec["epilogue"]:
            if op["op"] == "bias":
                args.append((op["name"], self.randn(g, c.n).to(torch_dtype(op["dtype"])).to(self.device)))
            elif op["op"] == "scale" and op["by"] == "row":
                args.append((op["name"] or "row_scale", self.positive(c.rows)))
            elif op["op"] == "scale" and op["by"] == "col":
                args.append((op["name"] or "col_scale", self.positive(g, c.n)))
            elif op["op"] == "scale" and op["by"] == "rowcol":  # torch._scaled_grouped_mm's rowwise fp8 scales
                args += [("scale_a", self.positive(c.rows)), ("scale_b", self.positive(g, c.n))]
            elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
                args.append((op["name"] or "alpha", 0.75))
        return args

    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A poisoned (rows, N) output view inside a poisoned storage with BAND rows above and below it and BAND
        columns past each row: (view, storage)."""
        c = self.case
        dtype = torch_dtype(self.spec["out"]["dtype"])
        storage = torch.full((c.rows + 2 * BAND, c.n + BAND), poison(dtype), dtype=dtype, device=self.device)
        return storage[BAND: BAND + c.rows, : c.n], storage
