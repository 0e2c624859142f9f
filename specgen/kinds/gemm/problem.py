"""The GEMM kind's problem for `specgen bench` and `specgen tune` (the API specgen/bench/problem.py lists):
a shape is (M, N, K, batch); `--shapes` reads `MxNxK` or `BxMxNxK`; the default shapes are each size
variant's upper corner plus the catalogue's model shapes (BASELINES.md's prefill and decode workloads);
the work is 2 M N K per batch; the inputs, the peers (cuBLAS through `torch.matmul`, `torch._scaled_mm`,
eager torch, XLA) live in peers.py, imported (with torch, jax) only when a GPU call needs them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from specgen.spec.epilogue import b_columns
from specgen.spec.load import quote

if TYPE_CHECKING:
    from specgen.kinds.gemm.spec import GemmSpec
    from specgen.spec.models import Target


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

INT32_MAX = 2**31 - 1  # the launchers' grids and the kernels' offsets take 32-bit sizes
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes '²' and '１２８'


def shape(values: Sequence[int]) -> Shape:
    """A Shape from its tuple (M, N, K[, batch]): a cache entry's, a Ray job's."""
    return Shape(*values)


def parse_size(text: str) -> int:
    """A size in ASCII digits; -1 for anything else, INT32_MAX + 1 past 11 digits (int() refuses 4300)."""
    if not _DIGITS.fullmatch(text):
        return -1
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 11 else INT32_MAX + 1


def parse_shapes(text: str) -> list[Shape]:
    """`MxNxK` or `BxMxNxK` items, comma-separated: "8192x8192x8192,16x8192x8192"."""
    # imported here: `check` imports this module (config_label) and nothing of bench
    from specgen.bench.problem import ShapeError

    shapes = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        parts = item.lower().split("x")
        nums = [parse_size(p) for p in parts]
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


def runs_at(spec: GemmSpec, shape: Shape) -> bool:
    """A batched shape only for a batched spec (an unbatched one takes a batch of 1)."""
    return shape.batch == 1 or spec.batch


def flops(shape: Shape, spec: GemmSpec | None = None) -> int:
    """Multiply-adds counted twice: 2 M N K per batch (the epilogue's elementwise work left out); a gated
    epilogue's GEMM has 2N columns (N is the output's)."""
    return 2 * shape.m * shape.n * b_columns(spec) * shape.k * shape.batch



def bytes_moved(spec: GemmSpec, shape: Shape) -> int:
    """Each operand read once and the output written once: A (M, K), B (K, N) (or (K, 2N), gated), the output and every
    epilogue tensor (an (M, N) matrix per batch, a vector of M or N shared by the batches; scalars are
    none), in their dtypes."""
    m, n, k, batch = shape
    total = batch * (m * k * spec.a.dtype.bytes + k * n * b_columns(spec) * spec.b.dtype.bytes
                     + m * n * spec.out.dtype.bytes)
    for arg in spec.runtime_args():
        if arg.shape == "matrix":
            total += batch * m * n * arg.dtype.bytes
        elif arg.shape in ("vec_m", "vec_n"):
            total += (m if arg.shape == "vec_m" else n) * arg.dtype.bytes
    return total


def operand_bits(spec: GemmSpec) -> int:
    """The width the tensor cores' peak is quoted for: A's element."""
    return spec.a.dtype.bytes * 8


def record_shape(shape: Shape) -> tuple[tuple[int, int, int], int]:
    """(M, N, K) and the batch, as a bench record's row holds them."""
    return shape.mnk, shape.batch


def config_label(spec: GemmSpec) -> str:
    """A config as `check` shows it: the tile, split-K where it splits (`split-K 2`, `atomic` when so)."""
    tile, sched = spec.tile, spec.schedule
    split = f" split-K {sched.split_k}" if sched.split_k > 1 else ""
    return f"{tile.m}x{tile.n}x{tile.k}{split}{' atomic' if split and sched.split_k_reduction == 'atomic' else ''}"


def inputs(spec: GemmSpec, shape: Shape, seed: int = 0) -> tuple[Any, ...]:
    """A, B and the epilogue's arguments on the GPU (peers.py: torch)."""
    from specgen.kinds.gemm import peers

    return peers.inputs(spec, Shape(*shape), seed)


def peer_name(spec: GemmSpec, target: Target) -> str:
    from specgen.kinds.gemm import peers

    return peers.peer_name(spec, target)


def peer_call(spec: GemmSpec, target: Target, args: tuple[Any, ...]) -> Any:
    """The peer's call on `args` (peers.py: torch, and jax for XLA)."""
    from specgen.kinds.gemm import peers

    return peers.peer_call(spec, target, args)
