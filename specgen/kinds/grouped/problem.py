"""The grouped kind's problem for `specgen bench` and `specgen tune` (the API specgen/bench/problem.py lists).

A shape is (G, M, N, K, distribution): G groups (experts) of M rows each on average, so G x M rows in all, times
each group's (K, N) weight. The distribution says how the rows fall into groups, from a seed, never only even
splits: `even` (M each), `skewed` (Dirichlet(0.3) proportions, as routers skew), `empty` (every fourth group
empty, the others even). `--shapes` reads `GxMxNxK` or `GxMxNxK:skewed`. The work is 2 x rows x N x K; the peer
is torch._grouped_mm (then the epilogue in eager torch), torch._scaled_grouped_mm for fp8 e4m3 operands (taking a
leading rowwise `scale` itself), imported only when a GPU call needs it.

A ragged-K spec (`groups.ragged = "k"`) reads the same shape as the layer's weight gradient: each group's rows are
its K run, A the layer's input passed transposed (K, rows), B the output gradient (rows, N), out (G, K, N): the
kernel's own M is the layer's K and its K every group's rows (what its variants' bounds compare)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from specgen.kinds.gemm.problem import INT32_MAX, parse_size
from specgen.spec.epilogue import b_columns
from specgen.spec.load import quote

if TYPE_CHECKING:
    from specgen.kinds.grouped.spec import GroupedSpec
    from specgen.spec.models import Target

DISTRIBUTIONS = ("even", "skewed", "empty")
DIRICHLET_ALPHA = 0.3  # the skewed rows (routers concentrate tokens on a few experts)


class Shape(NamedTuple):
    g: int  # groups
    m: int  # rows per group, on average
    n: int
    k: int
    dist: int = 0  # index into DISTRIBUTIONS

    @property
    def rows(self) -> int:
        return self.g * self.m

    def __str__(self) -> str:
        tail = f":{DISTRIBUTIONS[self.dist]}" if self.dist else ""
        return f"{self.g}x{self.m}x{self.n}x{self.k}{tail}"


# The workloads (bf16; G experts x rows each, N, K): DeepSeek-V3 up and down (even and skewed), Mixtral
# up and down, Qwen3-235B up, and decode (2 rows per expert).
MODEL_SHAPES = (Shape(32, 128, 4096, 7168), Shape(32, 128, 7168, 2048), Shape(32, 128, 4096, 7168, 1),
                Shape(8, 1024, 14336, 4096), Shape(8, 1024, 4096, 14336), Shape(128, 32, 3072, 4096),
                Shape(32, 2, 4096, 7168), Shape(32, 128, 4096, 7168, 2))


def shape(values: Sequence[int]) -> Shape:
    return Shape(*values)


def parse_shapes(text: str) -> list[Shape]:
    """`GxMxNxK[:even|skewed|empty]` items, comma-separated: "32x128x4096x7168:skewed,8x1024x14336x4096"."""
    from specgen.bench.problem import ShapeError

    shapes = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        sizes, _, dist = item.lower().partition(":")
        nums = [parse_size(p) for p in sizes.split("x")]
        if len(nums) != 4 or min(nums) <= 0 or (dist and dist not in DISTRIBUTIONS):
            raise ShapeError(f"shape {quote(item)} is not GxMxNxK (positive integers in ASCII digits) with an optional "
                             f":{'|:'.join(DISTRIBUTIONS)} (in --shapes {quote(text)})")
        if max(nums) > INT32_MAX or nums[0] * nums[1] > INT32_MAX:
            raise ShapeError(f"shape {quote(item)}: a size (or G x M rows) past {INT32_MAX}, the largest a launcher takes")
        shapes.append(Shape(*nums, DISTRIBUTIONS.index(dist) if dist else 0))
    if not shapes:
        raise ShapeError(f"--shapes {quote(text)} names no shape")
    return shapes


def group_sizes(shape: Shape, seed: int = 0) -> list[int]:
    """The rows of each group, summing to G x M, drawn from the shape's distribution (seeded: the same sizes
    for every kernel and peer of a run)."""
    g, total = shape.g, shape.rows
    if DISTRIBUTIONS[shape.dist] == "even":
        weights = [1.0] * g
    elif DISTRIBUTIONS[shape.dist] == "empty":
        weights = [0.0 if i % 4 == 3 else 1.0 for i in range(g)]
    else:
        rng = random.Random(seed)
        weights = [rng.gammavariate(DIRICHLET_ALPHA, 1.0) for _ in range(g)]
    scale = total / sum(weights)
    sizes = [int(w * scale) for w in weights]
    # the rows rounding left over go to the groups with the largest remainders (ties: the first)
    order = sorted(range(g), key=lambda i: sizes[i] - weights[i] * scale)
    for i in order[: total - sum(sizes)]:
        sizes[i] += 1
    return sizes


def slot_for(spec: GroupedSpec, target: object, shape: Shape) -> int | None:
    """The variant the launcher would pick by total rows, N and K (the Triton design renders none yet)."""
    m, k = (shape.k, shape.rows) if spec.groups.ragged == "k" else (shape.rows, shape.k)  # the launcher's M and K
    for i, v in enumerate(spec.variants_on(target)):
        w = v.when
        if all(b is None or d <= b for b, d in ((w.m_max, m), (w.n_max, shape.n), (w.k_max, k))):
            return i
    return None


def default_shapes(spec: GroupedSpec, target: object) -> list[Shape]:
    return list(MODEL_SHAPES)


def runs_at(spec: GroupedSpec, shape: Shape) -> bool:
    return True


def flops(shape: Shape, spec: GroupedSpec | None = None) -> int:
    """2 x rows x N x K: each row meets its own group's weight only (2N columns with a gated epilogue)."""
    return 2 * shape.rows * shape.n * b_columns(spec) * shape.k


def bytes_moved(spec: GroupedSpec, shape: Shape) -> int:
    """A, every group's weight, the output and the epilogue's tensors, each once, in their dtypes (a decode shape
    reads all G weights for a few rows: the weights dominate)."""
    rows, n, k, g = shape.rows, shape.n, shape.k, shape.g
    if spec.groups.ragged == "k":  # A (K, rows), B (rows, N), out (G, K, N)
        total = rows * k * spec.a.dtype.bytes + rows * n * spec.b.dtype.bytes + g * k * n * spec.out.dtype.bytes + 4 * g
    else:
        total = (rows * k * spec.a.dtype.bytes + g * k * n * b_columns(spec) * spec.b.dtype.bytes
                 + rows * n * spec.out.dtype.bytes + 4 * g)
    for arg in spec.runtime_args():
        if arg.shape == "group_n":
            total += g * n * arg.dtype.bytes
        elif arg.shape == "vec_m":
            total += rows * arg.dtype.bytes
    return total


def operand_bits(spec: GroupedSpec) -> int:
    return spec.a.dtype.bytes * 8


def record_shape(shape: Shape) -> tuple[tuple[int, int, int], int]:
    """(rows, N, K) and the group count, as a bench record's row holds them."""
    return (shape.rows, shape.n, shape.k), shape.g


def config_label(spec: GroupedSpec) -> str:
    t = spec.tile
    return f"{t.m}x{t.n}x{t.k}"


def inputs(spec: GroupedSpec, shape: Shape, seed: int = 0) -> tuple[Any, ...]:
    """A, B in the spec's major, the group index (offs or sizes, int32) and the epilogue's arguments on the GPU."""
    import torch

    from specgen.spec.dtypes import DType

    s = Shape(*shape)
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*dims: int, dtype: DType) -> Any:
        return torch.randn(*dims, generator=gen, device="cuda").to(getattr(torch, dtype.info.torch))

    if spec.groups.ragged == "k":  # the weight gradient: A = x.T (K, rows), B = dy (rows, N), in the spec's majors
        a = (randn(s.rows, s.k, dtype=spec.a.dtype).t() if spec.a.major == "mn" else
             randn(s.k, s.rows, dtype=spec.a.dtype)) / s.m**0.5
        b = randn(s.n, s.rows, dtype=spec.b.dtype).t() if spec.b.major == "k" else randn(s.rows, s.n, dtype=spec.b.dtype)
    else:
        a = randn(s.rows, s.k, dtype=spec.a.dtype) / s.k**0.5
        bn = s.n * b_columns(spec)  # a gated epilogue's B holds gate and up columns
        b = randn(s.g, bn, s.k, dtype=spec.b.dtype).transpose(-1, -2) if spec.b.major == "k" else randn(
            s.g, s.k, bn, dtype=spec.b.dtype)
    sizes = torch.tensor(group_sizes(s, seed), dtype=torch.int32, device="cuda")
    index = sizes.cumsum(0, dtype=torch.int32) if spec.groups.index == "offs" else sizes
    args: list[Any] = []
    for op in spec.epilogue:
        for arg in op.runtime_args():
            if arg.shape == "scalar":
                args.append(0.5)
            elif op.op == "bias":
                args.append(randn(s.g, s.n, dtype=arg.dtype))
            else:  # scales in [0.5, 1): router weights (M,), fp8's scale_a (M,) and scale_b (G, N)
                dims = (s.rows,) if arg.shape == "vec_m" else (s.g, s.n)
                args.append(torch.rand(*dims, generator=gen, device="cuda") * 0.5 + 0.5)
    return (a, b, index, *args)


def _scaled_peer(spec: GroupedSpec) -> bool:
    """torch._scaled_grouped_mm takes e4m3 operands only (its meta function's "Expected inputs of E4M3 FP8 type")."""
    from specgen.spec.dtypes import DType

    return spec.a.dtype == spec.b.dtype == DType.fp8_e4m3


def _folded(spec: GroupedSpec) -> bool:
    """Whether the peer's GEMM takes the chain's first op: an fp8 spec's leading rowwise scales."""
    return spec.a.dtype.is_fp8 and bool(spec.epilogue) and spec.epilogue[0].op == "scale" and spec.epilogue[0].by == "rowcol"


def gated(op: Any, h: Any, acts: dict[str, Any]) -> Any:
    """A gated op in eager torch over the GEMM's 2N columns h (the dense kind's peer does the same)."""
    from specgen.kinds.gemm.peers import gate_and_up

    gate, up = gate_and_up(op, h)
    return acts[op.fn](gate) * up


def peer_name(spec: GroupedSpec, target: Target) -> str:
    if spec.a.dtype.is_fp8:
        gemm = "torch._scaled_grouped_mm" if _scaled_peer(spec) else "torch._grouped_mm on bf16 copies"
        return gemm + (" + eager epilogue" if len(spec.epilogue) > int(_folded(spec)) else "")
    return "torch._grouped_mm + eager epilogue" if spec.epilogue else "torch._grouped_mm"


def peer_call(spec: GroupedSpec, target: Target, args: tuple[Any, ...]) -> Any:
    """torch._grouped_mm on the same tensors, then the epilogue op by op (a per-group operand gathered to the
    rows once, outside the timed call: torch has no per-group epilogue to call). fp8 e4m3 operands go through
    torch._scaled_grouped_mm (B column-major, scale_a (M,), scale_b (G, N), a bf16 result), which takes a leading
    rowwise `scale` itself (ones where the chain has none); e5m2, which it refuses, through torch._grouped_mm on
    bf16 copies made outside the timed call."""
    import torch
    import torch.nn.functional as F

    a, b, index, *rest = args
    offs = index if spec.groups.index == "offs" else index.cumsum(0, dtype=torch.int32)
    raw = {arg.name: value for arg, value in zip(spec.runtime_args(), rest, strict=True)}
    if spec.groups.ragged == "k":  # out (G, M, N): a per-group operand broadcasts over each out[g]'s rows
        env = {arg.name: raw[arg.name][:, None, :] if arg.shape == "group_n" else raw[arg.name] for arg in spec.runtime_args()}
    else:
        # each row's group (rows past the last group take the last one's: the peer leaves them as it likes)
        rows = torch.arange(a.shape[0], device=a.device, dtype=torch.int32)
        group = torch.searchsorted(offs, rows, right=True).clamp_(max=max(len(offs) - 1, 0))
        env = {arg.name: raw[arg.name][group] if arg.shape == "group_n" else raw[arg.name] for arg in spec.runtime_args()}
    acts = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid,
            "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
    ops = spec.epilogue[1:] if _folded(spec) else spec.epilogue
    if spec.a.dtype.is_fp8:
        sa = raw["scale_a"] if _folded(spec) else torch.ones(a.shape[0], device=a.device)
        sb = raw["scale_b"] if _folded(spec) else torch.ones(b.shape[0], b.shape[2], device=a.device)
        if _scaled_peer(spec):
            def gemm() -> Any:
                return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
        else:
            a16, b16, sb_rows = a.to(torch.bfloat16), b.to(torch.bfloat16), sb[group]

            def gemm() -> Any:
                return torch._grouped_mm(a16, b16, offs=offs) * sa[:, None] * sb_rows
    else:
        def gemm() -> Any:
            return torch._grouped_mm(a, b, offs=offs)

    def run() -> Any:
        x = gemm()
        for op in ops:
            if op.op == "gated":  # the eager MLP: act(h[..., :N]) * h[..., N:] (or the interleaved columns)
                x = gated(op, x, acts)
            elif op.op == "bias":
                x = x + env[op.name]
            elif op.op == "scale" and op.by == "scalar":
                x = x * (op.value if op.value is not None else env[op.name or "alpha"])
            elif op.op == "scale":  # a row's factor (M,), a group's column factors gathered to the rows (M, N)
                for arg in op.runtime_args():
                    x = x * (env[arg.name][:, None] if arg.shape == "vec_m" else env[arg.name])
            elif op.op == "activation":
                x = acts[op.fn](x)
            elif op.op == "clamp":
                x = x.clamp(min=op.min, max=op.max)
            else:  # cast
                x = x.to(getattr(torch, op.dtype.info.torch))
        return x

    return run
