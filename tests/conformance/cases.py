"""The conformance cases: one spec, every backend, the same answer.

Specs:
- every shipped catalogue kernel (its per-target configs as shipped; a conformance target it does not
  list gets `CONFORMANCE_CONFIG`'s config there: the meaning is the spec's, the tile the target's);
- one spec per epilogue op (each op and each of its forms alone on a plain bf16 GEMM), so every op is
  held to the formula table (specgen/spec/formulas.py) on every backend;
- fp8 e4m3 and e5m2 with row and column scales.

Shapes: M in {1, 2, 7, 64, 129, 1000}, N in {8, 16, 24, 40, 72, 257, 4096}, K in {16, 40, 129, 4096},
batch 1 and 3 for batched specs: the whole grid is 336 problems a spec; `shapes(...)` samples it
deterministically, within a cost bound where the backend runs on an interpreter.

Layouts: "dense" (each operand contiguous in the spec's major mode) and "views" (every operand a view
with an odd leading stride and a storage offset of one element, i.e. not 16-byte aligned; `out=` too).
Data: "random" (normal, A scaled so A @ B has unit variance) and "specials" (rows of A led by NaN,
+inf, -inf, a huge value and -0.0, and a NaN and an inf in the first vector and residual argument),
so every op meets NaN, infinities and values whose cube overflows float32.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass

import torch
from kernels import catalogue

from specgen.bench.shapes import slot_for
from specgen.kinds.gemm.problem import Shape
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType

M_VALUES = (1, 2, 7, 64, 129, 1000)
N_VALUES = (8, 16, 24, 40, 72, 257, 4096)
K_VALUES = (16, 40, 129, 4096)
BATCH = 3

# A target a catalogue spec does not list takes this config in the conformance copy (and the op specs
# run at it): tiles each design renders (the TPU's blocks are (8, 128)-divisible; Triton's small for
# the CPU interpreter's sake).
CONFORMANCE_CONFIG: dict[str, dict] = {
    "triton:sm90": {"tile": {"m": 64, "n": 64, "k": 32}, "triton": {"num_warps": 4}, "variants": []},
    "cute:sm90": {"tile": {"m": 128, "n": 128, "k": 64}, "variants": []},
    "pallas:gpu_sm90": {"tile": {"m": 128, "n": 128, "k": 64}, "variants": []},
    "pallas:tpu_v7x": {"tile": {"m": 128, "n": 128, "k": 128}, "variants": []},
}

# Each epilogue op, alone, in each of its forms.
OPS: dict[str, dict] = {
    "bias_n": {"op": "bias", "along": "n", "dtype": "bf16"},
    "bias_m_f32": {"op": "bias", "along": "m", "dtype": "f32", "name": "row_bias"},
    "scale_const": {"op": "scale", "by": "scalar", "value": -1.5},
    "scale_alpha": {"op": "scale", "by": "scalar"},
    "scale_row": {"op": "scale", "by": "row"},
    "scale_col": {"op": "scale", "by": "col", "name": "gain"},
    "scale_rowcol": {"op": "scale", "by": "rowcol"},
    "relu": {"op": "activation", "fn": "relu"},
    "gelu": {"op": "activation", "fn": "gelu"},
    "gelu_tanh": {"op": "activation", "fn": "gelu_tanh"},
    "silu": {"op": "activation", "fn": "silu"},
    "sigmoid": {"op": "activation", "fn": "sigmoid"},
    "residual": {"op": "residual", "dtype": "bf16", "beta": -0.5},
    "clamp_min": {"op": "clamp", "min": -0.25},
    "clamp_max": {"op": "clamp", "max": 0.5},
    "clamp_both": {"op": "clamp", "min": -1.0, "max": 1.0},
    "cast_f16": {"op": "cast", "dtype": "f16"},
    # a gated epilogue: B (K, 2N) into N outputs (the Triton designs, CuTe and Mosaic GPU render it, Mosaic GPU not
    # the erf GELU: PAL009; the Pallas TPU kernel halves only, PAL013: an N-major B for N a multiple of the block)
    "gated_silu_halves": {"op": "gated", "fn": "silu", "layout": "halves"},
    "gated_gelu_interleaved": {"op": "gated", "fn": "gelu", "layout": "interleaved"},
}


def _with_targets(spec: dict) -> dict:
    """`spec` listing every conformance target, each unlisted one at its conformance config."""
    spec = json.loads(json.dumps(spec))
    per_target = spec.setdefault("per_target", {})
    for target, config in CONFORMANCE_CONFIG.items():
        if target not in spec["targets"]:
            per_target[target] = json.loads(json.dumps(config))
            spec["targets"].append(target)
        elif target.startswith("pallas:") and spec.get("variants"):
            # The kernel's variants are other backends' tunings: a Pallas target keeps its own list (Mosaic GPU
            # renders it; the TPU module renders one config, CFG003), else takes none.
            per_target.setdefault(target, {}).setdefault("variants", [])
    return spec


def _plain(name: str, **fields: object) -> dict:
    spec = {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "tile": {"m": 128, "n": 128, "k": 64}, "targets": [],
            "per_target": {}, **fields}
    return GemmSpec.model_validate(_with_targets(spec)).model_dump(mode="json")


def _specs() -> dict[str, dict]:
    specs = {f"cat_{name}": _with_targets(spec) for name, spec in catalogue().items()}
    for op, chain in OPS.items():
        specs[f"op_{op}"] = _plain(f"op_{op}", epilogue=[chain])
        if chain["op"] == "gated":  # gate and up accumulators of a 128x128 tile: two warpgroups on cute:sm90 (REG001)
            specs[f"op_{op}"]["per_target"]["cute:sm90"].setdefault("cute", {})["mma_warpgroups"] = 2
    fp8 = {"op": "scale", "by": "rowcol"}
    for dt in ("fp8_e4m3", "fp8_e5m2"):
        specs[f"fp8_{dt[4:]}"] = _plain(f"fp8_{dt[4:]}", a={"dtype": dt, "major": "k"}, b={"dtype": dt, "major": "k"},
                                        tile={"m": 128, "n": 128, "k": 128}, epilogue=[fp8])
    return specs


SPECS = _specs()


# ---------------------------------------------------------------------------------------------------
# Shapes


def shapes(spec_key: str, device: str) -> list[tuple[int, int, int, int]]:
    """(batch, M, N, K) problems for one spec: a deterministic sample of the grid, corners first. On an
    interpreter only problems of at most 2**21 multiply-adds, fewer of them."""
    spec = SPECS[spec_key]
    batches = (1, BATCH) if spec["batch"] else (1,)
    grid = [(bt, m, n, k) for bt in batches for m in M_VALUES for n in N_VALUES for k in K_VALUES]
    want = (4 if spec_key.startswith("cat_") else 2) if device == "cpu" else (12 if spec_key.startswith("cat_") else 4)
    if device == "cpu":
        grid = [g for g in grid if g[0] * g[1] * g[2] * g[3] <= 2**21 and g[2] <= 257 and g[3] <= 129]
    corners = [g for g in grid if g[1] == 1 or g[2] == min(N_VALUES) or g[3] == 129]
    seed = zlib.crc32(f"{spec_key}/{device}".encode())
    picked: list[tuple[int, int, int, int]] = []
    for pool in (corners, grid):
        order = sorted(pool, key=lambda g: zlib.crc32(f"{seed}/{g}".encode()))
        for g in order:
            if len(picked) >= want:
                break
            if g not in picked and (pool is grid or len(picked) < want // 2):
                picked.append(g)
    if device == "cuda" and spec_key.startswith("cat_"):  # the largest problem once, batch 1
        big = (1, max(M_VALUES), max(N_VALUES), max(K_VALUES))
        if big not in picked:
            picked.append(big)
        # every config of every target's module (its size-selected variants and its default) runs at least once
        parsed = GemmSpec.model_validate(spec)
        for target in parsed.targets:
            slots = [None, *range(len(parsed.variants_on(target)))]
            hit = {slot_for(parsed, target, Shape(m, n, k)) for _, m, n, k in picked}
            for slot in slots:
                if slot not in hit:
                    order = sorted(grid, key=lambda g: zlib.crc32(f"{seed}/{slot}/{g}".encode()))
                    extra = next((g for g in order if slot_for(parsed, target, Shape(*g[1:])) == slot), None)
                    if extra is not None:
                        picked.append(extra)
                        hit.add(slot)
    return picked


# ---------------------------------------------------------------------------------------------------
# Data


def op_of(spec: dict, arg: str) -> str:
    """The epilogue op that takes runtime argument `arg`."""
    for op in spec["epilogue"]:
        if arg in (op.get("name"), {"row": "row_scale", "col": "col_scale"}.get(op.get("by", ""))):
            return op["op"]
    return ""


def torch_dtype(dt: str) -> torch.dtype:
    return getattr(torch, DType(dt).info.torch)


HUGE = {torch.bfloat16: 1e30, torch.float16: 6e4, torch.float32: 1e30,
        torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def poison(dtype: torch.dtype) -> float:
    return float("nan")


def place(values: torch.Tensor, contiguous: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`values` as a view whose dim `contiguous` (-1 or -2) has stride 1, inside a NaN-poisoned storage.
    "views": the leading stride 3 elements wider than the extent and the base one element past a
    16-byte boundary (legal for torch.matmul; the kernels must cope). Returns (view, storage)."""
    *batch, rows, cols = values.shape
    inner, outer = (cols, rows) if contiguous == -1 else (rows, cols)
    lead = inner + (3 if layout == "views" else 0)
    offset = 1 if layout == "views" else 0
    count = math.prod(batch) * outer * lead + offset
    flat = torch.full((count,), poison(values.dtype), dtype=values.dtype, device=values.device)
    view = flat[offset:].view(*batch, outer, lead)[..., :inner]
    if contiguous == -2:
        view = view.transpose(-1, -2)
    view.copy_(values)
    assert view.stride(contiguous) == 1 and view.shape == values.shape
    return view, flat


@dataclass
class Case:
    spec: dict  # the spec as the backend sees it (backends.as_backend_sees_it)
    batch: int
    M: int
    N: int
    K: int
    layout: str  # "dense" | "views"
    data: str  # "random" | "specials"
    device: str

    def __post_init__(self) -> None:
        self.gen = torch.Generator().manual_seed(zlib.crc32(
            f"{self.spec['name']}/{self.batch}/{self.M}/{self.N}/{self.K}/{self.layout}/{self.data}".encode()))
        self.lead = (self.batch,) if self.spec["batch"] else ()

    def _normal(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, dtype=torch.float64)

    def _positive(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.rand(shape, generator=self.gen, dtype=torch.float64) + 0.5

    def _to(self, values: torch.Tensor, dt: str) -> torch.Tensor:
        return values.to(torch_dtype(dt)).to(self.device)

    def inputs(self) -> tuple[list[tuple[str, object]], list[torch.Tensor]]:
        """[(name, value)] for a, b and the epilogue's runtime arguments in chain order, and the
        poisoned storages behind them (which the call must leave as they were)."""
        spec, M, N, K = self.spec, self.M, self.N, self.K
        a_dt, b_dt = spec["a"]["dtype"], spec["b"]["dtype"]
        a_vals = self._normal((*self.lead, M, K)) / math.sqrt(max(K, 1))
        gated = bool(spec["epilogue"]) and spec["epilogue"][0]["op"] == "gated"
        b_vals = self._normal((*self.lead, K, 2 * N if gated else N))  # gated: gate and up columns
        if self.data == "specials" and K:
            huge = HUGE[torch_dtype(a_dt)]
            specials = [float("nan"), float("inf"), -float("inf"), huge, -huge, -0.0]
            for i, v in zip(range(M), specials, strict=False):
                a_vals[..., i, 0] = v
        a, a_store = place(self._to(a_vals, a_dt), -1 if spec["a"]["major"] == "k" else -2, self.layout)
        b, b_store = place(self._to(b_vals, b_dt), -2 if spec["b"]["major"] == "k" else -1, self.layout)
        args: list[tuple[str, object]] = [("a", a), ("b", b)]
        stores = [a_store, b_store]
        first = True
        for arg in GemmSpec.model_validate(spec).runtime_args():
            if arg.shape == "scalar":
                args.append((arg.name, 0.75))
                continue
            if arg.shape == "matrix":
                vals = self._normal((*self.lead, M, N))
            else:
                n = M if arg.shape == "vec_m" else N
                vals = self._positive((n,)) if arg.name.startswith(("scale", "row_scale", "col_scale", "gain")) \
                    else self._normal((n,))
            if self.data == "specials" and first and vals.numel() >= 2:
                # inf where it adds; a huge finite value where it multiplies (inf times an accumulator
                # within rounding of zero has no agreed sign)
                multiplies = arg.name in ("scale_a", "scale_b") or op_of(spec, arg.name) == "scale"
                vals.view(-1)[0], vals.view(-1)[-1] = float("nan"), 1e30 if multiplies else float("inf")
            first = False
            if arg.shape == "matrix":
                view, store = place(self._to(vals, arg.dtype.value), -1, self.layout)
            elif self.layout == "views":  # every other element of a longer vector
                store = torch.full((2 * vals.numel() + 1,), float("nan"), dtype=torch_dtype(arg.dtype.value),
                                   device=self.device)
                view = store[1::2]
                view.copy_(self._to(vals, arg.dtype.value))
            else:
                view = store = self._to(vals, arg.dtype.value)
            args.append((arg.name, view))
            stores.append(store)
        return args, stores

    def out(self) -> tuple[torch.Tensor, torch.Tensor]:
        dt = self.spec["out"]["dtype"]
        empty = torch.full((*self.lead, self.M, self.N), poison(torch_dtype(dt)), dtype=torch_dtype(dt))
        return place(empty.to(self.device), -1, self.layout)


def tolerance(spec: dict) -> float:
    """Relative to each output row's scale: the out dtype's rounding (bf16 2**-8, f16 2**-11) with margin
    for accumulation order and fast tanh; fp8 wgmma adds in a narrower accumulator than f32."""
    if spec["a"]["dtype"].startswith("fp8"):
        return 2e-2
    return {"bf16": 1e-2, "f16": 4e-3, "f32": 1e-3}[spec["out"]["dtype"]]


def compare(got: torch.Tensor, want: torch.Tensor, spec: dict, what: str) -> None:
    """`got` equals the float64 reference rounded to the output dtype: the same NaNs, the same
    infinities, and finite values within `tolerance` of each row's finite scale (a row led by a huge
    value has a huge scale; the others keep theirs)."""
    want = want.to(got.dtype).double().cpu()
    got = got.double().cpu()
    nan_got, nan_want = got.isnan(), want.isnan()
    if not torch.equal(nan_got, nan_want):
        extra, missing = int((nan_got & ~nan_want).sum()), int((nan_want & ~nan_got).sum())
        raise AssertionError(f"{what}: {extra} NaN where the reference has none, {missing} reference NaN not "
                             f"produced (of {got.numel()}); first at {torch.nonzero(nan_got != nan_want)[0].tolist()}")
    inf_want = want.isinf()
    bad_inf = (got.isinf() != inf_want) | (inf_want & (got != want))
    if bad_inf.any():
        i = torch.nonzero(bad_inf)[0].tolist()
        raise AssertionError(f"{what}: infinities differ at {int(bad_inf.sum())} elements; first {i}: got "
                             f"{got[tuple(i)].item()}, want {want[tuple(i)].item()}")
    finite = torch.where(torch.isfinite(want), want.abs(), torch.zeros_like(want))
    row_scale = finite.amax(dim=-1, keepdim=True) + 1.0 if want.numel() else finite
    eps = tolerance(spec)
    ok = torch.isfinite(want)
    err = (got - want).abs()
    bound = eps * want.abs() + eps * row_scale
    bad = ok & ~(err <= bound)
    if bad.any():
        i = torch.nonzero(bad)[0].tolist()
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} elements off; first {i}: got "
                             f"{got[tuple(i)].item()}, want {want[tuple(i)].item()} (bound {bound[tuple(i)].item():.3g})")
