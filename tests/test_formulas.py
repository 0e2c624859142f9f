"""The epilogue formula table (specgen/spec/formulas.py): it is torch's functions, special values
included, and every backend's rendered epilogue is spelled from it (no NaN-dropping max / min).

(a) The table evaluated by a tiny evaluator here equals specgen/kinds/gemm/testing/reference.py (torch) in float64 on random
values and on NaN, +-inf, -0.0, +-1e30, +-3e38; evaluated in float32, as the kernels do, it gives
torch's float64 answer's class (NaN, the same infinity, the same zero sign) and its value to f32
precision. (b) One spec with every activation and clamp renders, on each backend, exactly the line a
per-backend spelling of the table gives. (c) Through the Triton interpreter, a kernel whose bias
carries the specials returns the reference's classes: NaN stays NaN through relu and clamp.
"""

from __future__ import annotations

import json
import math
import re
import zlib

import pytest
import torch
from kernels import MINIMAL_SPEC, load_module
from specials import BIAS_SPECIALS, CHAINS, assert_same_classes, chain_id, full

from specgen.kinds.gemm.testing.reference import ACTIVATIONS, REFERENCES
from specgen.render.catalogue import render_modules
from specgen.spec import formulas
from specgen.spec.formulas import FORMULAS, PRIMITIVES, Node
from specgen.spec.load import load_text

SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e30, -1e30, 3e38, -3e38, 1e-30, -1e-30, 50.0, -50.0]
CLAMPS = [{"min": -1.5, "max": 2.5}, {"min": 0.0, "max": None}, {"min": -0.0, "max": None},
          {"min": None, "max": 0.0}, {"min": None, "max": -2.0}, {"min": -3e38, "max": 3e38}]


def evaluate(e: Node, x: torch.Tensor, op: dict | None = None) -> torch.Tensor:
    """The formula on `x`, in x's dtype, left to right as the backends spell it."""
    def lit(value: float) -> torch.Tensor:
        return torch.tensor(value, dtype=x.dtype)

    k = e.kind
    if k == "x":
        return x
    if k in ("const", "param"):
        return lit(e.value if k == "const" else op[e.name])
    args = [evaluate(a, x, op) for a in e.args]
    if k == "add":
        return args[0] + args[1]
    if k == "mul":
        return args[0] * args[1]
    if k == "tanh":
        return torch.tanh(args[0])
    if k == "erf":
        return torch.erf(args[0])
    if k == "exp":  # the derivatives' (DERIVATIVES)
        return torch.exp(args[0])
    if k == "step":
        return torch.where(args[0] <= 0, lit(0.0), lit(1.0))
    if k == "where_lt":
        return torch.where(args[0] < args[1], args[1], args[0])
    assert k == "where_gt", k
    return torch.where(args[0] > args[1], args[1], args[0])


def clamp(x: torch.Tensor, op: dict) -> torch.Tensor:
    """A clamp op as the backends apply it: min, then max."""
    if op["min"] is not None:
        x = evaluate(FORMULAS["clamp_min"].expr, x, op)
    if op["max"] is not None:
        x = evaluate(FORMULAS["clamp_max"].expr, x, op)
    return x


def inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(17)
    wide = torch.randn(4000, generator=g, dtype=torch.float64) * 8
    return torch.cat([torch.tensor(SPECIALS, dtype=torch.float64), wide, torch.linspace(-30, 30, 601, dtype=torch.float64)])


# --- (a) the table is torch's functions ----------------------------------------------------------------


def test_the_table_has_every_activation_and_clamp_bound() -> None:
    from typing import get_args

    from specgen.spec.epilogue import Activation

    assert set(get_args(Activation.model_fields["fn"].annotation)) | {"clamp_min", "clamp_max"} == set(FORMULAS)
    for f in FORMULAS.values():
        assert f.expr.kinds() <= set(PRIMITIVES)
        assert f"`{f.expr.text()}`" in formulas.__doc__, f"the module's table does not show {f.op}"


@pytest.mark.parametrize("fn", list(ACTIVATIONS))
def test_activation_equals_torch_in_float64(fn: str) -> None:
    x = inputs()
    assert_same_classes(evaluate(FORMULAS[fn].expr, x), ACTIVATIONS[fn](x), x, rtol=1e-12, atol=1e-15, what=fn)


@pytest.mark.parametrize("fn", list(ACTIVATIONS))
def test_activation_in_float32_gives_torchs_float64_classes(fn: str) -> None:
    x = inputs()
    x32 = x.float()  # 3e38 and 1e30 stay finite in f32
    # f32 tanh / erf and a one-tanh sigmoid (absolute error ~2^-24, times x in silu)
    assert_same_classes(evaluate(FORMULAS[fn].expr, x32), ACTIVATIONS[fn](x32.double()), x32.double(), rtol=2e-6, atol=3e-7,
                what=f"{fn} f32")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("op", CLAMPS, ids=str)
def test_clamp_equals_torch_clamp(op: dict, dtype: torch.dtype) -> None:
    x = inputs().to(dtype)
    rtol = 0.0 if dtype == torch.float64 else 2.0**-24  # an f32 kernel holds its bounds rounded to f32
    assert_same_classes(clamp(x, op), x.double().clamp(min=op["min"], max=op["max"]), x.double(), rtol=rtol, atol=0.0,
                what=f"clamp {op}")


def pairs(specials: str) -> list[tuple[float, str]]:
    """The `input -> result` pairs of a Formula's specials (notes in parentheses dropped)."""
    out = []
    for item in specials.split(", "):
        lhs, rhs = item.split(" -> ")
        out.append((float(lhs), rhs.split(" (")[0]))
    return out


@pytest.mark.parametrize("op", list(FORMULAS))
def test_each_special_the_table_states_holds_in_f32_and_is_torchs(op: str) -> None:
    f = FORMULAS[op]
    bounds = {"min": -1.5, "max": 2.5}
    stated = pairs(f.specials)
    assert {"nan", "inf", "-inf"} <= {str(x) for x, _ in stated}, f"{op} states no NaN / inf rule"
    x = torch.tensor([v for v, _ in stated], dtype=torch.float32)
    got = evaluate(f.expr, x, bounds)
    if op.startswith("clamp"):
        torch_ = x.double().clamp(**{op[6:]: bounds[op[6:]]})
    else:
        torch_ = ACTIVATIONS[op](x.double())
    for (v, rhs), g, t in zip(stated, got.tolist(), torch_.tolist(), strict=True):
        want = bounds[rhs] if rhs in bounds else float(rhs)
        for who, value in (("f32 formula", g), ("torch float64", t)):
            same = (math.isnan(value) and math.isnan(want)) or (
                value == pytest.approx(want, rel=1e-6) and math.copysign(1, value) == math.copysign(1, want))
            assert same, f"{op}({v}): {who} gives {value!r}, the table says {rhs}"


def test_a_where_compares_x_with_a_number_and_arity_is_checked() -> None:
    with pytest.raises(ValueError, match="compares x"):
        Node("where_lt", (formulas.mul(formulas.X, formulas.X), formulas.ZERO))
    with pytest.raises(ValueError, match="takes 1 operands"):
        Node("tanh", (formulas.X, formulas.X))


# --- (b) every backend spells the table ----------------------------------------------------------------

EVERY_FN = [*({"op": "activation", "fn": fn} for fn in ACTIVATIONS),
            *({"op": "clamp", **{k: v for k, v in c.items() if v is not None}} for c in CLAMPS)]

# Each backend's spelling of the primitives, written here independently of its template.
CALLS = {
    "triton": {"tanh": "_tanh({}, FAST_MATH)", "erf": "tl.erf({})", "where": "tl.where({v} {cmp} {b}, {b}, {v})"},
    "cute": {"tanh": "cute.math.tanh({}, fastmath=True)", "erf": "cute.math.erf({})",
             "where": "cute.where({v} {cmp} {b}, cute.full_like({v}, {b}), {v})"},
    "pallas": {"tanh": "jnp.tanh({})", "erf": "lax.erf({})", "where": "jnp.where({v} {cmp} {b}, {b}, {v})"},
}
CALLS["mgpu"] = CALLS["pallas"]
VALUE = {"triton": "acc", "cute": "acc", "pallas": "acc", "mgpu": "x"}


def spell(e: Node, backend: str, op: dict, need: int = 0) -> str:
    v, calls = VALUE[backend], CALLS[backend]
    k = e.kind
    if k == "x":
        s = v
    elif k == "const":
        s = repr(e.value)
    elif k == "param":
        s = repr(float(op[e.name]))
    elif k == "add":
        s = f"{spell(e.args[0], backend, op, 1)} + {spell(e.args[1], backend, op, 2)}"
    elif k == "mul":
        s = f"{spell(e.args[0], backend, op, 2)} * {spell(e.args[1], backend, op, 3)}"
    elif k in ("tanh", "erf"):
        s = calls[k].format(spell(e.args[0], backend, op))
    else:
        s = calls["where"].format(v=v, cmp="<" if k == "where_lt" else ">", b=spell(e.args[1], backend, op))
    return f"({s})" if e.prec < need else s


def rendered(epilogue: list[dict]) -> dict[str, str]:
    """{backend: module text} of one spec on triton:sm90, cute:sm90, pallas:tpu_v5e and pallas:gpu_sm90."""
    spec = {**MINIMAL_SPEC, "name": "every_fn", "epilogue": epilogue, "tile": {"m": 128, "n": 128, "k": 128},
            "targets": ["triton:sm90", "cute:sm90", "pallas:tpu_v5e", "pallas:gpu_sm90"]}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test:every_fn>", ".json")
    out = {}
    for backend in ("triton", "cute", "pallas"):
        targets = [t for t in loaded.spec.targets if t.backend.value == backend]
        for path, text in render_modules(loaded, targets).items():
            if path.endswith("every_fn.py"):
                out["mgpu" if "gpu_sm90" in path else backend] = text
    assert set(out) == set(VALUE)
    return out


# A max / min / clip drops NaN (PTX max.f32, fmaxf, jnp.maximum's lowering on GPU and Triton's own).
NAN_DROPPING = re.compile(r"\b(maximum|minimum|clip|fmax|fmin|fmaxf|fminf)\(|\bmax\(acc|\bmin\(acc")


@pytest.fixture(scope="module")
def modules() -> dict[str, str]:
    return rendered(EVERY_FN)


@pytest.mark.parametrize("backend", list(VALUE))
def test_each_backend_renders_every_op_from_the_table(modules: dict[str, str], backend: str) -> None:
    text = modules[backend]
    for op in EVERY_FN:
        if op["op"] == "activation":
            f = FORMULAS[op["fn"]]
            line = f"{VALUE[backend]} = {spell(f.expr, backend, op)}  # {f.title}"
            assert line in text, f"{backend} {op['fn']}: {line}"
            continue
        full = {"min": None, "max": None, **op}
        for bound in ("min", "max"):
            if full[bound] is not None:
                f = FORMULAS[f"clamp_{bound}"]
                assert f"{VALUE[backend]} = {spell(f.expr, backend, full)}  # {f.title}" in text, (backend, op, bound)


@pytest.mark.parametrize("backend", list(VALUE))
def test_no_backend_drops_nan_in_its_epilogue(modules: dict[str, str], backend: str) -> None:
    """The epilogue adds no max / min: the module with every op has as many as the one with none."""
    bare = rendered([])[backend]
    assert len(NAN_DROPPING.findall(modules[backend])) == len(NAN_DROPPING.findall(bare)), backend


# --- (c) through the Triton interpreter ----------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("chain", CHAINS, ids=chain_id)
def test_triton_kernel_keeps_the_tables_specials(chain: list[dict], tmp_path) -> None:
    """A bias carrying NaN, +-inf and huge values: each column's result has the reference's class (NaN
    stays NaN through relu and clamp, where tl.maximum used to give 0)."""
    name = f"specials_{zlib.crc32(json.dumps(chain).encode()):08x}"
    spec = {**MINIMAL_SPEC, "name": name, "a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"},
            "out": {"dtype": "f32"}, "tile": {"m": 16, "n": 32, "k": 32}, "triton": {"num_warps": 4, "tma": False},
            "epilogue": [{"op": "bias", "along": "n", "dtype": "f32"}, *chain]}
    module = load_module(spec, tmp_path)
    g = torch.Generator().manual_seed(5)
    m, n, k = 8, 24, 16
    a = torch.randn(m, k, generator=g) * 0.1
    b = torch.randn(n, k, generator=g) * 0.1
    bias = torch.tensor(BIAS_SPECIALS * (n // len(BIAS_SPECIALS) + 1))[:n].float()
    out = getattr(module, name)(a, b.T, bias)
    want = REFERENCES["gemm"]([{"op": "bias", "along": "n", "name": "bias"}, *full(chain)], a, b.T, {"bias": bias})
    x = (a.double() @ b.T.double()) + bias.double()
    assert_same_classes(out, want, x, rtol=1e-5, atol=1e-6, what=json.dumps(chain))
    if chain[0].get("fn") == "relu" or chain[0]["op"] == "clamp":
        assert out[:, 0].isnan().all(), "NaN dropped"
