"""Numerics of rendered kernels (the Triton ones under the CPU interpreter) against the float64 reference.

Every catalogue kernel runs as its interpreter variant (bf16 / fp8 -> f16) and as an f32 variant, and a
set of extra specs covers what the catalogue does not: every epilogue op, both major modes of A and B in
both kernel kinds (one program per tile with pointer loads; persistent with TMA descriptors; persistent
with pointer loads), raster along N, the subtiled TMA store, an f16 accumulator and int8 -> int32.

Each case runs on fresh seeded data, with the output (and the padding around every operand) poisoned
with NaN: every output element must be written, nothing outside the output may be, and no load may
reach past an operand's extent. Shapes cover ragged M / N / K, M = 1, N = 1 (pointer kernels; TMA needs
16-byte rows), K smaller than tile.k, leading strides wider than the extent, and more row tiles than
GROUP_M. The tolerance must see every epilogue op: the reference with any one op dropped (but for a
cast to the out dtype right before the store) fails it, and so does the other GELU form in f32.
"""

from __future__ import annotations

import json
import math
import zlib

import pytest
import torch
from kernels import catalogue, interpreter_variant
from reference import REFERENCES

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType

# The interpreter evaluates sigmoid's exp in numpy, which warns when exp(-x) overflows to inf (the
# sigmoid is still exactly 0 there).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

CATALOGUE = catalogue()
TILE = {"m": 16, "n": 32, "k": 32}  # small, so M = 150 gives 10 row tiles: more than GROUP_M = 8
BATCH = 3


def torch_dtype(dt: str) -> torch.dtype:
    return getattr(torch, DType(dt).info.torch)


def is_tma(spec: dict) -> bool:
    return spec["triton"]["tma"]


# ---------------------------------------------------------------------------------------------------
# Variants


def f32_variant(spec: dict) -> dict:
    """The same kernel on f32 operands (input_precision ieee), f32 accumulator, f32 out and arguments."""
    spec = json.loads(json.dumps(spec))
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = "f32"
    spec["accumulator"] = "f32"
    for op in spec["epilogue"]:
        if "dtype" in op:
            op["dtype"] = "f32"
    spec["name"] += "_f32"
    return spec


def extra(name: str, *, a: str = "k", b: str = "k", dtype: str = "f16", out: str | None = None,
          acc: str = "f32", epilogue: tuple = (), batch: bool = False, persistent: bool = False,
          tma: bool | None = None, raster: str = "along_m", group_m: int = 8, subtile: bool = False) -> dict:
    """An extra spec; `tma` defaults to the schedule's usual form (persistent kernels use TMA)."""
    base = interpreter_variant(CATALOGUE["gemm_bf16"])
    spec = {
        **base,
        "name": f"x_{name}",
        "description": "",
        "a": {"dtype": dtype, "major": a},
        "b": {"dtype": dtype, "major": b},
        "out": {"dtype": out or dtype},
        "accumulator": acc,
        "batch": batch,
        "epilogue": [dict(op) for op in epilogue],
        "tile": dict(TILE),
        "schedule": {"persistent": persistent, "raster": raster, "group_m": group_m},
        "triton": {"num_warps": 4, "tma": persistent if tma is None else tma, "epilogue_subtile": subtile},
    }
    return GemmSpec.model_validate(spec).model_dump(mode="json")  # with every default spelled out


EXTRAS = [
    # One program per tile, pointer loads.
    extra("ptr_mn_k", a="mn", b="k", raster="along_n", group_m=2, epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16", "name": "bias_m"},
        {"op": "scale", "by": "row"},
        {"op": "activation", "fn": "silu"},
        {"op": "clamp", "min": -0.1, "max": 0.6},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("ptr_k_mn", a="k", b="mn", epilogue=(
        {"op": "scale", "by": "scalar", "value": 0.5},
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "activation", "fn": "sigmoid"},
        {"op": "scale", "by": "col"},
        {"op": "clamp", "max": 0.4},
    )),
    extra("ptr_mn_mn", a="mn", b="mn", epilogue=(
        {"op": "scale", "by": "rowcol"},
        {"op": "activation", "fn": "gelu"},
        {"op": "residual", "dtype": "f16", "beta": -0.5},
    )),
    # Persistent, TMA descriptors.
    extra("tma_mn_k", a="mn", b="k", persistent=True, raster="along_n", subtile=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "scale", "by": "col", "name": "gain"},
        {"op": "activation", "fn": "gelu"},
        {"op": "residual", "dtype": "f16", "beta": 0.5},
        {"op": "clamp", "min": -0.25},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("tma_mn_mn", a="mn", b="mn", persistent=True, group_m=4, epilogue=(
        {"op": "scale", "by": "scalar"},
        {"op": "activation", "fn": "silu"},
        {"op": "residual", "dtype": "f32", "beta": -1.0, "name": "skip"},
        {"op": "clamp", "min": -1.0, "max": 1.0},
    )),
    extra("tma_k_mn", a="k", b="mn", persistent=True, epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16"},
        {"op": "scale", "by": "row"},
        {"op": "activation", "fn": "sigmoid"},
        {"op": "clamp", "max": 0.5},
    )),
    extra("tma_k_k_relu", persistent=True, subtile=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "relu"},
    )),
    # Persistent, pointer loads (triton.tma = false).
    extra("pptr_mn_mn", a="mn", b="mn", persistent=True, tma=False, raster="along_n", epilogue=(
        {"op": "bias", "along": "m", "dtype": "f32"},
        {"op": "activation", "fn": "relu"},
        {"op": "cast", "dtype": "f16"},
    )),
    extra("pptr_k_k", persistent=True, tma=False, epilogue=(
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "scale", "by": "scalar", "name": "gain"},
    )),
    # Batched: one program per tile; persistent pointer; persistent TMA with the subtiled store.
    extra("bmm_ptr_mn_k", a="mn", b="k", batch=True, raster="along_n", epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "residual", "dtype": "f16"},
    )),
    extra("bmm_pptr_k_mn", a="k", b="mn", batch=True, persistent=True, tma=False, epilogue=(
        {"op": "scale", "by": "scalar"},
        {"op": "residual", "dtype": "f16", "beta": 0.5},
        {"op": "activation", "fn": "relu"},
    )),
    extra("bmm_tma_mn_k", a="mn", b="k", batch=True, persistent=True, subtile=True, epilogue=(
        {"op": "scale", "by": "rowcol"},
        {"op": "residual", "dtype": "f16"},
        {"op": "clamp", "min": -1.0, "max": 1.0},
    )),
    extra("bmm_tma_k_mn", a="k", b="mn", batch=True, persistent=True, raster="along_n", epilogue=(
        {"op": "bias", "along": "m", "dtype": "f16"},
        {"op": "activation", "fn": "sigmoid"},
    )),
    # One program per tile, TMA descriptors.
    extra("tile_tma_k_k", tma=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "f16"},
        {"op": "activation", "fn": "gelu_tanh"},
    )),
    extra("tile_tma_mn_mn", a="mn", b="mn", tma=True, raster="along_n", subtile=True, epilogue=(
        {"op": "residual", "dtype": "f16", "beta": 2.0},
    )),
    extra("bmm_tile_tma_k_mn", a="k", b="mn", batch=True, tma=True, epilogue=(
        {"op": "scale", "by": "rowcol"},
    )),
    # Accumulator and operand types.
    extra("f16acc", b="mn", acc="f16", epilogue=({"op": "bias", "along": "n", "dtype": "f16"},)),
    extra("int8_ptr", dtype="int8", out="int32", acc="int32"),
    extra("int8_tma", dtype="int8", out="int32", acc="int32", persistent=True),
    # f32 out with a rounding cast in the middle of the chain (on exactly representable data, below).
    extra("cast_f32", a="mn", b="k", dtype="f32", epilogue=(
        {"op": "cast", "dtype": "f16"},
        {"op": "bias", "along": "n", "dtype": "f32"},
    )),
    extra("cast_f32_tma", a="k", b="mn", dtype="f32", persistent=True, epilogue=(
        {"op": "activation", "fn": "relu"},
        {"op": "cast", "dtype": "f16"},
    )),
]

VARIANTS: dict[str, dict] = {}
for _name, _spec in CATALOGUE.items():
    if not any(t.startswith("triton:") for t in _spec["targets"]):  # TPU-only specs: no Triton kernel
        continue
    VARIANTS[f"{_name}-f16"] = interpreter_variant(_spec, tile=dict(TILE))
    VARIANTS[f"{_name}-f32"] = f32_variant(VARIANTS[f"{_name}-f16"])
for _spec in EXTRAS:
    VARIANTS[_spec["name"]] = _spec
# The f32 forms tell gelu from gelu_tanh and catch an f32 epilogue rounding anywhere in the chain.
for _key in ("x_ptr_mn_k", "x_ptr_mn_mn", "x_tma_mn_k", "x_tma_mn_mn", "x_bmm_tma_mn_k"):
    VARIANTS[_key + "_f32"] = f32_variant(VARIANTS[_key])
# Exactly representable data (the f32 accumulation is exact, so a cast rounds like the reference's).
EXACT = {"x_cast_f32", "x_cast_f32_tma"}

# Problem shapes: (M, N for pointer kernels, N for TMA kernels, K, layout). "strided": every operand's
# leading stride is wider than its extent (the padding poisoned); "dense": as tight as the kernel allows.
SHAPES = {
    "ragged": (70, 45, 56, 40, "dense"),  # M, N, K all off the tile; K = 32 + a tail
    "m1": (1, 40, 40, 72, "strided"),
    "n1": (33, 1, 8, 50, "strided"),  # TMA rows must be 16 bytes: N = 8 there
    "ksmall": (20, 24, 24, 5, "strided"),  # K < tile.k, odd; vectors passed as (M, 1) and (1, N)
    "groups": (150, 40, 40, 24, "dense"),  # 10 row tiles of 16: two GROUP_M groups, the second partial
    "k1": (17, 9, 16, 1, "strided"),
    "deepk": (40, 33, 40, 100, "dense"),  # four K steps, the last a tail of 4
}


# ---------------------------------------------------------------------------------------------------
# Data


def poison(dtype: torch.dtype) -> float | int:
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min


def lead_extent(extent: int, dtype: torch.dtype, tma: bool, layout: str) -> int:
    """The storage extent of a contiguous dim: 16-byte multiples for TMA, wider still when strided."""
    if tma:
        align = 16 // dtype.itemsize
        return -(-extent // align) * align + (align if layout == "strided" else 0)
    return extent + (3 if layout == "strided" else 0)


def place(values: torch.Tensor, contiguous: int, tma: bool, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`values` copied into a view whose dim `contiguous` (-1 or -2) has stride 1, inside a poisoned
    storage padded along that dim. Returns (view, storage)."""
    *batch, rows, cols = values.shape
    dtype = values.dtype
    if contiguous == -1:
        storage = torch.full((*batch, rows, lead_extent(cols, dtype, tma, layout)), poison(dtype), dtype=dtype)
        view = storage[..., :cols]
    else:
        storage = torch.full((*batch, cols, lead_extent(rows, dtype, tma, layout)), poison(dtype), dtype=dtype)
        view = storage[..., :rows].transpose(-1, -2)
    view.copy_(values)
    assert view.stride(contiguous) == 1 and view.shape == values.shape
    return view, storage


def outside(view: torch.Tensor, storage: torch.Tensor) -> torch.Tensor:
    """The elements of `storage` that `view` does not cover."""
    covered = torch.zeros(storage.shape, dtype=torch.bool)
    covered.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
    return storage[~covered]


class Case:
    def __init__(self, spec: dict, shape: str) -> None:
        self.spec = spec
        self.tma = is_tma(spec)
        M, n_ptr, n_tma, K, layout = SHAPES[shape]
        self.M, self.N, self.K, self.layout = M, (n_tma if self.tma else n_ptr), K, layout
        self.vectors_2d = shape == "ksmall"
        self.gen = torch.Generator().manual_seed(zlib.crc32(f"{spec['name']}/{shape}".encode()))

    def values(self, shape: tuple[int, ...], dtype: torch.dtype, kind: str = "normal") -> torch.Tensor:
        g = self.gen
        if not dtype.is_floating_point:
            return torch.randint(-8, 9, shape, generator=g).to(dtype)
        if self.spec["name"] in EXACT:  # multiples of 1/64 in [-1, 1]: exact in f16 and in f32 sums
            return (torch.randint(-64, 65, shape, generator=g) / 64).to(dtype)
        if kind == "positive":  # scales: away from 1 and from 0
            return (torch.rand(shape, generator=g) + 0.5).to(dtype)
        return torch.randn(shape, generator=g).to(dtype)

    def operands(self) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        spec, M, N, K = self.spec, self.M, self.N, self.K
        batch = (BATCH,) if spec["batch"] else ()
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        a_vals = self.values((*batch, M, K), torch.float32 if a_dt.is_floating_point else a_dt)
        if a_dt.is_floating_point and spec["name"] not in EXACT:
            a_vals = a_vals / math.sqrt(K)  # A @ B of unit variance, whatever K
        a, a_store = place(a_vals.to(a_dt), -1 if spec["a"]["major"] == "k" else -2, self.tma, self.layout)
        b, b_store = place(self.values((*batch, K, N), b_dt), -2 if spec["b"]["major"] == "k" else -1,
                           self.tma, self.layout)
        return a, b, [a_store, b_store]

    def epilogue_args(self) -> tuple[list[tuple[str, object]], list[torch.Tensor]]:
        """The runtime arguments in chain order, and the poisoned storages behind the matrices."""
        M, N = self.M, self.N
        batch = (BATCH,) if self.spec["batch"] else ()
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
                c, store = place(self.values((*batch, M, N), torch_dtype(op["dtype"])), -1, False, self.layout)
                args.append((op["name"], c))
                stores.append(store)
        want = [arg.name for arg in GemmSpec.model_validate(self.spec).runtime_args()]
        assert [name for name, _ in args] == want
        return args, stores

    def vector(self, n: int, along: str, dtype: torch.dtype, kind: str = "normal") -> torch.Tensor:
        v = self.values((n,), dtype, kind)
        if self.vectors_2d:
            v = v.reshape((n, 1) if along == "m" else (1, n))
        return v

    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = (BATCH,) if self.spec["batch"] else ()
        dtype = torch_dtype(self.spec["out"]["dtype"])
        return place(torch.full((*batch, self.M, self.N), poison(dtype), dtype=dtype), -1, self.tma, self.layout)


# ---------------------------------------------------------------------------------------------------
# Reference


def tolerance(spec: dict) -> dict[str, float]:
    """For O(1) results (A is scaled so that A @ B has unit variance): the out dtype's rounding, or the
    f16 accumulator's error over K <= 72; the f32 kernels compute in ieee f32."""
    out = spec["out"]["dtype"]
    if out in ("int32",):
        return {"atol": 0.0, "rtol": 0.0}
    if spec["accumulator"] == "f16":
        return {"atol": 2e-2, "rtol": 2e-2}
    if out == "f16":
        return {"atol": 4e-3, "rtol": 4e-3}
    assert out == "f32" and spec["a"]["dtype"] == "f32"
    return {"atol": 2e-5, "rtol": 2e-5}


# ---------------------------------------------------------------------------------------------------
# The test


class NumericsTests:
    """The numerics tests every backend's folder runs: subclass as `Test<Backend>Numerics` and override
    `check_module` for what only that backend's modules show."""

    def check_module(self, spec: dict, module: object) -> None:
        """Backend-specific checks of a loaded module before it runs (none by default)."""

    @pytest.mark.parametrize("shape", list(SHAPES))
    @pytest.mark.parametrize("variant", list(VARIANTS))
    def test_matches_float64_reference(self, variant: str, shape: str, load_kernel) -> None:
        spec = VARIANTS[variant]
        module = load_kernel(spec)
        self.check_module(spec, module)
        fn = getattr(module, spec["name"])
        case = Case(spec, shape)
        a, b, stores = case.operands()
        args, arg_stores = case.epilogue_args()
        out, out_store = case.out()
        inputs = [store.clone() for store in stores + arg_stores]

        result = fn(a, b, *(value for _, value in args), out=out)

        assert result is out
        assert result.dtype == torch_dtype(spec["out"]["dtype"])
        assert result.shape == ((BATCH,) if spec["batch"] else ()) + (case.M, case.N)
        poisoned = poison(out.dtype)
        if out.dtype.is_floating_point:
            assert not out.isnan().any(), f"{int(out.isnan().sum())} of {out.numel()} output elements never written"
            assert outside(out, out_store).isnan().all(), "the kernel wrote outside the output"
        else:
            assert not (out == poisoned).any(), "output elements never written"
            assert (outside(out, out_store) == poisoned).all(), "the kernel wrote outside the output"
        for store, before in zip(stores + arg_stores, inputs, strict=True):  # nor touched its inputs
            torch.testing.assert_close(store, before, rtol=0, atol=0, equal_nan=True)
        tol = tolerance(spec)
        kwargs = dict(args)
        want = REFERENCES[spec["kind"]](spec["epilogue"], a, b, kwargs)
        torch.testing.assert_close(out.double(), want, **tol, msg=lambda m: f"{variant} {shape}: {m}")

        # The tolerance is tight enough to see every op: dropping any one from the reference must fail it,
        # and so must the other GELU form where the tolerance is f32's.
        chain = spec["epilogue"]
        for i, op in enumerate(chain):
            mutants = []
            if not (op["op"] == "cast" and spec["out"]["dtype"] == op["dtype"]):  # a cast to the out dtype
                mutants.append(("dropped", chain[:i] + chain[i + 1:]))  # just before the store changes nothing
            if op["op"] == "activation" and op["fn"] in ("gelu", "gelu_tanh") and spec["out"]["dtype"] == "f32":
                other = {**op, "fn": "gelu" if op["fn"] == "gelu_tanh" else "gelu_tanh"}
                mutants.append((f"as {other['fn']}", chain[:i] + [other] + chain[i + 1:]))
            for how, mutant in mutants:
                wrong = REFERENCES[spec["kind"]](mutant, a, b, kwargs)
                assert not torch.allclose(out.double(), wrong, **tol), f"{variant} {shape}: epilogue[{i}] {op} {how} passes"

        if shape == "ragged":  # allocating the output gives the same bits
            again = fn(a, b, *(value for _, value in args))
            assert again.is_contiguous() and torch.equal(again, out)
