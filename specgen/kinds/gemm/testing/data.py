"""The problems the GEMM numerics run on: seeded operands in the spec's major modes, each inside a poisoned
storage (NaN, or the integer minimum) padded around its view, the epilogue's runtime arguments in chain
order, and a poisoned output; and the tolerance that sees every epilogue op."""

from __future__ import annotations

import math
import zlib

import torch

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType

BATCH = 3


def torch_dtype(dt: str) -> torch.dtype:
    return getattr(torch, DType(dt).info.torch)


def poison(dtype: torch.dtype) -> float | int:
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min


def lead_extent(extent: int, dtype: torch.dtype, aligned: bool, layout: str) -> int:
    """The storage extent of a contiguous dim: 16-byte multiples where the kernel needs 16-byte strides
    (`aligned`: TMA), wider still when strided."""
    if aligned:
        align = max(1, 16 // dtype.itemsize)
        return -(-extent // align) * align + (align if layout == "strided" else 0)
    return extent + (3 if layout == "strided" else 0)


def place(values: torch.Tensor, contiguous: int, aligned: bool, layout: str,
          device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """`values` copied into a view whose dim `contiguous` (-1 or -2) has stride 1, inside a poisoned
    storage on `device` padded along that dim. Returns (view, storage)."""
    *batch, rows, cols = values.shape
    dtype = values.dtype
    if contiguous == -1:
        storage = torch.full((*batch, rows, lead_extent(cols, dtype, aligned, layout)), poison(dtype), dtype=dtype,
                             device=device)
        view = storage[..., :cols]
    else:
        storage = torch.full((*batch, cols, lead_extent(rows, dtype, aligned, layout)), poison(dtype), dtype=dtype,
                             device=device)
        view = storage[..., :rows].transpose(-1, -2)
    view.copy_(values.to(device))
    assert view.stride(contiguous) == 1 and view.shape == values.shape
    return view, storage


def outside(view: torch.Tensor, storage: torch.Tensor) -> torch.Tensor:
    """The elements of `storage` that `view` does not cover."""
    covered = torch.zeros(storage.shape, dtype=torch.bool, device=storage.device)
    covered.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
    return storage[~covered]


class Problem:
    """One problem for `spec`: M x N x K (a batch of BATCH when the spec is batched), operands laid out
    `layout` ("dense": as tight as the kernel allows; "strided": every leading stride wider than its
    extent, the padding poisoned). `aligned`: leading strides of 16-byte multiples (TMA); `exact`:
    multiples of 1/64 in [-1, 1] (exact in f16 and in f32 sums, so a cast rounds like the reference's);
    `vectors_2d`: vectors passed as (M, 1) and (1, N)."""

    def __init__(self, spec: dict, M: int, N: int, K: int, layout: str, *, aligned: bool, exact: bool = False,
                 vectors_2d: bool = False, tag: str = "", device: str = "cpu") -> None:
        self.spec, self.M, self.N, self.K, self.layout = spec, M, N, K, layout
        self.aligned, self.exact, self.vectors_2d, self.device = aligned, exact, vectors_2d, device
        self.batch = (BATCH,) if spec["batch"] else ()
        self.gen = torch.Generator().manual_seed(zlib.crc32(f"{spec['name']}/{tag}".encode()))

    def values(self, shape: tuple[int, ...], dtype: torch.dtype, kind: str = "normal") -> torch.Tensor:
        g = self.gen
        if not dtype.is_floating_point:
            return torch.randint(-8, 9, shape, generator=g).to(dtype)
        if self.exact:
            return (torch.randint(-64, 65, shape, generator=g) / 64).to(dtype)
        if kind == "positive":  # scales: away from 1 and from 0
            return (torch.rand(shape, generator=g) + 0.5).to(dtype)
        return torch.randn(shape, generator=g).to(dtype)

    def operands(self) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """A (M, K) and B (K, N) views in the spec's major modes (B (K, 2N) with a gated epilogue), and the
        storages behind them."""
        spec, M, N, K = self.spec, self.M, self.N, self.K
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        a_vals = self.values((*self.batch, M, K), torch.float32 if a_dt.is_floating_point else a_dt)
        if a_dt.is_floating_point and not self.exact:
            a_vals = a_vals / math.sqrt(max(K, 1))  # A @ B of unit variance, whatever K
        a, a_store = place(a_vals.to(a_dt), -1 if spec["a"]["major"] == "k" else -2, self.aligned, self.layout,
                           self.device)
        b_cols = 2 * N if gated_spec(spec) else N  # a gated epilogue's B holds gate and up columns
        b, b_store = place(self.values((*self.batch, K, b_cols), b_dt), -2 if spec["b"]["major"] == "k" else -1,
                           self.aligned, self.layout, self.device)
        return a, b, [a_store, b_store]

    def epilogue_args(self) -> tuple[list[tuple[str, object]], list[torch.Tensor]]:
        """The runtime arguments in chain order, and the poisoned storages behind the matrices."""
        M, N = self.M, self.N
        args, stores = [], []
        for op in self.spec["epilogue"]:
            if op["op"] == "bias":
                n = M if op["along"] == "m" else N
                args.append((op["name"], self.vector(n, op["along"], torch_dtype(op["dtype"]))))
            elif op["op"] == "scale" and op["by"] == "scalar" and op["value"] is None:
                args.append((op["name"] or "alpha", 0.75))
            elif op["op"] == "scale" and op["by"] == "row":
                args.append((op["name"] or "row_scale", self.vector(M, "m", torch.float32, "positive")))
            elif op["op"] == "scale" and op["by"] == "col":
                args.append((op["name"] or "col_scale", self.vector(N, "n", torch.float32, "positive")))
            elif op["op"] == "scale" and op["by"] == "rowcol":
                args.append(("scale_a", self.vector(M, "m", torch.float32, "positive")))
                args.append(("scale_b", self.vector(N, "n", torch.float32, "positive")))
            elif op["op"] == "residual":
                c, store = place(self.values((*self.batch, M, N), torch_dtype(op["dtype"])), -1, False, self.layout,
                                 self.device)
                args.append((op["name"], c))
                stores.append(store)
        want = [arg.name for arg in GemmSpec.model_validate(self.spec).runtime_args()]
        assert [name for name, _ in args] == want
        return args, stores

    def vector(self, n: int, along: str, dtype: torch.dtype, kind: str = "normal") -> torch.Tensor:
        v = self.values((n,), dtype, kind)
        if self.vectors_2d:
            v = v.reshape((n, 1) if along == "m" else (1, n))
        return v.to(self.device)

    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A poisoned output view (row-major) and its poisoned, padded storage."""
        dtype = torch_dtype(self.spec["out"]["dtype"])
        return place(torch.full((*self.batch, self.M, self.N), poison(dtype), dtype=dtype), -1, self.aligned,
                     self.layout, self.device)


def gated_spec(spec: dict) -> bool:
    """Whether the spec's chain opens with a gated op (B then has 2N columns)."""
    return bool(spec["epilogue"]) and spec["epilogue"][0]["op"] == "gated"


def gated_mutants(spec: dict, op: dict, n: int) -> list[tuple[str, dict]]:
    """Wrong readings of a gated op a kernel could make that the tolerance must see: the other layout (the same
    columns where N = 1), and each other fn (gelu and gelu_tanh told apart only where the out dtype is f32, as
    for the activation op)."""
    other = {**op, "layout": "interleaved" if op["layout"] == "halves" else "halves"}
    found = [(f"as {other['layout']}", other)] if n > 1 else []
    close = {"gelu", "gelu_tanh"}
    for fn in ("silu", "gelu", "gelu_tanh"):
        if fn != op["fn"] and (spec["out"]["dtype"] == "f32" or {fn, op["fn"]} != close):
            found.append((f"as {fn}", {**op, "fn": fn}))
    return found


# Half an ulp, relative, of each type a cast may round through: a cast moves values by at most this much.
HALF_ULP = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 2.0**-24}


def tolerance(spec: dict, exact: bool = False) -> dict[str, float]:
    """For O(1) results (A is scaled so that A @ B has unit variance): int32 exactly; the f16
    accumulator's error over K <= 72; one bf16 ulp where the out dtype or a cast in the chain is bf16 (f32
    and float64 sums may round to neighbouring bf16 values); the out dtype's rounding for f16; f32 outs
    from f32 sums (`exact`: casts of exactly representable values round like the reference's)."""
    out = spec["out"]["dtype"]
    casts = [op["dtype"] for op in spec["epilogue"] if op["op"] == "cast"]
    if out == "int32":
        return {"atol": 0.0, "rtol": 0.0}
    if spec["accumulator"] == "f16":
        return {"atol": 2e-2, "rtol": 2e-2}
    if out == "bf16" or ("bf16" in casts and not exact):
        return {"atol": 1e-2, "rtol": 1e-2}
    if out == "f16":
        return {"atol": 4e-3, "rtol": 4e-3}
    assert out == "f32", out
    return {"atol": 2e-5, "rtol": 2e-5}


def cast_within_tolerance(spec: dict, op: dict, tol: dict[str, float]) -> bool:
    """A cast the tolerance cannot see: to the out dtype right before the store (it changes nothing), or
    one whose rounding (half an ulp) the tolerance absorbs."""
    return op["dtype"] == spec["out"]["dtype"] or HALF_ULP.get(op["dtype"], 0.0) <= tol["rtol"]
