"""Problem shapes: `--shapes` parsing, which config the launcher picks for a shape (the variant slot), and
the default shapes of a spec on a target: its variants' ranges (each variant's upper corner) plus the
catalogue's model shapes, prefill and decode (BASELINES.md's workloads)."""

from __future__ import annotations

import re
from typing import NamedTuple

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import quote


class Shape(NamedTuple):
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def mnk(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    def __str__(self) -> str:
        b = f"{self.batch}x" if self.batch > 1 else ""
        return f"{b}{self.m}x{self.n}x{self.k}"


# Linear layers of 8B-70B models: square prefill GEMMs, a narrow projection, an MLP up-projection
PREFILL = (Shape(8192, 8192, 8192), Shape(4096, 4096, 4096), Shape(2048, 2048, 2048), Shape(8192, 1024, 8192),
           Shape(4096, 14336, 4096))
# decode: a few tokens against a weight (memory-bound), and the fp8 mid-size problem
DECODE = (Shape(16, 8192, 8192), Shape(128, 8192, 8192), Shape(64, 4096, 14336), Shape(128, 14336, 4096),
          Shape(512, 2048, 2048))
BATCHED = (Shape(2048, 2048, 2048, 8), Shape(128, 4096, 4096, 8), Shape(4096, 4096, 4096, 4))
MODEL_SHAPES = PREFILL + DECODE
VARIANT_NK = 8192  # a variant bounding only M is measured at this N and K


class ShapeError(ValueError):
    pass


INT32_MAX = 2**31 - 1  # the launchers' grids and the kernels' offsets take 32-bit sizes
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes '²' and '１２８'


def _size(text: str) -> int:
    """A size in ASCII digits; -1 for anything else, INT32_MAX + 1 past 11 digits (int() refuses 4300)."""
    if not _DIGITS.fullmatch(text):
        return -1
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 11 else INT32_MAX + 1


def parse_shapes(text: str) -> list[Shape]:
    """`MxNxK` or `BxMxNxK` items, comma-separated: "8192x8192x8192,16x8192x8192"."""
    shapes = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        parts = item.lower().split("x")
        nums = [_size(p) for p in parts]
        if len(parts) not in (3, 4) or min(nums) <= 0:
            raise ShapeError(f"shape {quote(item)} is not MxNxK or BxMxNxK with positive integers in ASCII digits "
                             f"(in --shapes {quote(text)})")
        if max(nums) > INT32_MAX:
            raise ShapeError(f"shape {quote(item)}: a size past {INT32_MAX}, the largest a launcher takes (int32)")
        shapes.append(Shape(*nums[1:], nums[0]) if len(nums) == 4 else Shape(*nums))
    if not shapes:
        raise ShapeError(f"--shapes {quote(text)} names no shape")
    return shapes


def slot_for(spec: GemmSpec, target: object, shape: Shape) -> int | None:
    """The variant the launcher picks for `shape` on `target` (the first whose bounds admit it), or None
    for the target's default config."""
    for i, v in enumerate(spec.variants_on(target)):
        w = v.when
        if all(bound is None or dim <= bound for bound, dim in ((w.m_max, shape.m), (w.n_max, shape.n),
                                                               (w.k_max, shape.k))):
            return i
    return None


def slot_label(spec: GemmSpec, target: object, slot: int | None) -> str:
    return "default" if slot is None else f"variant {slot} ({spec.variants_on(target)[slot].when})"


def default_shapes(spec: GemmSpec, target: object) -> list[Shape]:
    """Each variant's upper corner on `target`, then the model shapes (batched ones for a batched spec)."""
    batch = 8 if spec.batch else 1
    corners = [Shape(v.when.m_max or VARIANT_NK, v.when.n_max or VARIANT_NK, v.when.k_max or VARIANT_NK, batch)
               for v in spec.variants_on(target)]
    model = BATCHED if spec.batch else MODEL_SHAPES
    out: list[Shape] = []
    for s in (*corners, *model):
        if s not in out:
            out.append(s)
    return out
