"""The epilogue's formula table: what each elementwise op computes, on every backend, as data.

Each activation and each clamp bound is a small expression tree over the running f32 value `x`,
constants, the op's own parameters and a few primitives. Every backend renders it through one
recursive Jinja macro, `formula`, that only maps primitives to its syntax (templates/gemm/triton/epilogue.jinja,
templates/gemm/cute/epilogue.jinja, templates/gemm/pallas/formula.jinja for both Pallas kernels), so an op means
the same thing everywhere and a spec can never inject code. Standard library only: `specgen check` and
`render` import it.

| op | formula (f32, evaluated left to right) | NaN | +inf | -inf | -0.0 | huge (+-1e30, +-3e38) |
|---|---|---|---|---|---|---|
| relu | `where(x < 0.0, 0.0, x)` | NaN | +inf | 0 | -0.0 | x / 0 |
| gelu | `0.5 * x * (1.0 + erf(x * sqrt(1/2)))` | NaN | +inf | NaN | -0.0 | x / -0.0 |
| gelu_tanh | `0.5 * x * (1.0 + tanh(x * (sqrt(2/pi) + 0.0356774081363001 * x * x)))` (0.044715 sqrt(2/pi)) | NaN | +inf | NaN | -0.0 | x / -0.0 |
| silu | `x * (0.5 + 0.5 * tanh(0.5 * x))` | NaN | +inf | NaN | -0.0 | x / -0.0 |
| sigmoid | `0.5 + 0.5 * tanh(0.5 * x)` | NaN | 1 | 0 | 0.5 | 1 / 0 |
| clamp_min | `where(x < min, min, x)` | NaN | +inf | min | -0.0 unless min > 0 | x or min |
| clamp_max | `where(x > max, max, x)` | NaN | max | -inf | -0.0 unless max < 0 | x or max |

Every row is torch's float64 answer (specgen/kinds/gemm/testing/reference.py): NaN in gives NaN out (`where` keeps NaN,
since `NaN < c` is false; max / min instructions would drop it on a GPU), `gelu`, `gelu_tanh` and
`silu` of -inf are NaN as in torch (-inf times a factor that is exactly 0), a huge negative input
gives -0.0 (a finite negative times +0.0) and a huge positive one stays finite: the factor saturates
at 1 (or 2 for `0.5 * x * (...)`, whose `0.5 * x` comes first so 3e38 does not overflow). A clamp with
both bounds applies `min` then `max` (two statements).

Error bounds (f32): relu and clamp are exact; gelu is f32 arithmetic and the backend's f32 erf (a
few ulp). `tanh` is the backend's: CuTe's `cute.math.tanh(fastmath=True)` and Triton's FAST_MATH path
on the GPU are one `tanh.approx.f32` (MUFU.TANH, relative error about 2^-11 = 4.9e-4); Triton under
the interpreter computes `2 sigmoid(2x) - 1`; Mosaic GPU compiles with `approx_math` (the same
`tanh.approx.f32`); Pallas TPU's `jnp.tanh` is f32 tanh to a few ulp. With the fast tanh that is an absolute error of about 2^-12 in
sigmoid and |x| 2^-12 in silu and gelu_tanh. In f32, deep in the negative tail (x below about -17)
sigmoid is 0 and silu -0.0 where torch gives a tiny number (a difference under any tolerance). silu
and sigmoid use the one-tanh form, not `1 / (1 + exp(-x))`, because one MUFU op is cheaper than an
exp and a divide; gelu_tanh multiplies `0.5 * x` by `1 + tanh(...)` (one add more than `h + h * tanh`)
because that keeps -0.0 and huge negative inputs at -0.0, as torch does, where `h + h * tanh` gives +0.0.

The gated op (SwiGLU, GeGLU) applies its `fn` row of this table to the gate column and multiplies by the up
column, `fn(gate) * up`, one f32 multiply after the formula (so the product of a finite up and the row's NaN,
inf or -0.0 is IEEE's: NaN stays NaN, fn(-inf) = NaN gives NaN, +inf times a positive up is +inf, and 0 times
inf is NaN, as torch's `F.silu(gate) * up` gives in float64). Its error is the formula's plus one rounding.

The other ops are plain IEEE f32 arithmetic and need no formula: `bias` and `residual` add (`x +
beta * c` for a residual), `scale` multiplies, and `cast` rounds to its dtype (round to nearest even;
NaN stays NaN) and continues in f32, as an unfused torch program would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# x: the running value; const: a number; param: the op's own field (clamp's min / max); add, mul:
# binary, evaluated left to right; tanh, erf: the backend's f32 functions; where_lt / where_gt:
# where(x < b, b, x) / where(x > b, b, x), NaN-propagating (a NaN compares false and is kept).
# The derivatives (DERIVATIVES, below) use two more: exp (f32 exp) and step (0 where its operand <= 0,
# else 1: a NaN compares false and gives 1, as torch's relu backward passes the gradient of a NaN).
Kind = Literal["x", "const", "param", "add", "mul", "tanh", "erf", "where_lt", "where_gt", "exp", "step"]
PRIMITIVES: tuple[Kind, ...] = ("x", "const", "param", "add", "mul", "tanh", "erf", "where_lt", "where_gt")
DERIVATIVE_PRIMITIVES: tuple[Kind, ...] = (*PRIMITIVES, "exp", "step")

# Precedence, for the renderers' parentheses: a sum binds loosest, then a product, then calls and atoms.
_PREC = {"add": 1, "mul": 2}


@dataclass(frozen=True)
class Node:
    """One node of a formula. `args` are the operands; `value` a constant's; `name` a param's field
    (or a constant's name, for reading)."""

    kind: Kind
    args: tuple[Node, ...] = ()
    value: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        arity = {"x": 0, "const": 0, "param": 0, "tanh": 1, "erf": 1, "exp": 1, "step": 1}.get(self.kind, 2)
        if len(self.args) != arity:
            raise ValueError(f"{self.kind} takes {arity} operands, got {len(self.args)}")
        # where's value is spelled twice by the renderers, so it must be `x`; its bound is a number
        if self.kind in ("where_lt", "where_gt") and (self.args[0].kind != "x"
                                                      or self.args[1].kind not in ("const", "param")):
            raise ValueError(f"{self.kind} compares x with a constant or a parameter")

    @property
    def prec(self) -> int:
        return _PREC.get(self.kind, 3)

    def kinds(self) -> set[str]:
        """Every primitive this formula uses."""
        return {self.kind}.union(*(a.kinds() for a in self.args))

    def text(self, need: int = 0) -> str:
        """The formula in Python-like notation (for docs and messages; templates do not read it)."""
        k = self.kind
        if k == "x":
            s = "x"
        elif k == "const":
            s = self.name or repr(self.value)
        elif k == "param":
            s = self.name
        elif k == "add":
            s = f"{self.args[0].text(1)} + {self.args[1].text(2)}"
        elif k == "mul":
            s = f"{self.args[0].text(2)} * {self.args[1].text(3)}"
        elif k in ("tanh", "erf", "exp", "step"):
            s = f"{k}({self.args[0].text()})"
        else:
            s = f"where(x {'<' if k == 'where_lt' else '>'} {self.args[1].text()}, {self.args[1].text()}, x)"
        return f"({s})" if self.prec < need else s


X = Node("x")


def const(value: float, name: str = "") -> Node:
    return Node("const", value=value, name=name)


def param(field: str) -> Node:
    return Node("param", name=field)


def add(a: Node, b: Node) -> Node:
    return Node("add", (a, b))


def mul(a: Node, b: Node) -> Node:
    return Node("mul", (a, b))


def tanh(a: Node) -> Node:
    return Node("tanh", (a,))


def erf(a: Node) -> Node:
    return Node("erf", (a,))


def exp(a: Node) -> Node:
    return Node("exp", (a,))


def step(a: Node) -> Node:
    return Node("step", (a,))


SQRT_HALF = 0.7071067811865476  # sqrt(1/2)
SQRT_2_OVER_PI = 0.7978845608028654  # sqrt(2/pi)
GELU_TANH_C1 = 0.0356774081363001  # 0.044715 * sqrt(2/pi)

ZERO, HALF, ONE = const(0.0), const(0.5), const(1.0)
_SIGMOID = add(HALF, mul(HALF, tanh(mul(HALF, X))))  # sigmoid(x) = (1 + tanh(x / 2)) / 2


@dataclass(frozen=True)
class Formula:
    """One op of the table: its title (the generated code's comment), its expression and what it does
    with special values: `input -> result` pairs, a note in parentheses (tests/test_formulas.py
    evaluates each pair in f32 and checks it against torch in float64)."""

    op: str
    title: str
    expr: Node
    specials: str

    @property
    def transcendental(self) -> bool:
        """Whether it calls tanh or erf (one per element: the cost estimates count them)."""
        return bool(self.expr.kinds() & {"tanh", "erf"})


FORMULAS: dict[str, Formula] = {f.op: f for f in (
    Formula("relu", "ReLU, NaN kept", Node("where_lt", (X, ZERO)),
            "NaN -> NaN, +inf -> +inf, -inf -> 0, -0.0 -> -0.0, -1e30 -> 0, 3e38 -> 3e38"),
    Formula("gelu", "GELU, erf form", mul(mul(HALF, X), add(ONE, erf(mul(X, const(SQRT_HALF, "sqrt(1/2)"))))),
            "NaN -> NaN, +inf -> +inf, -inf -> NaN (-inf * 0), -0.0 -> -0.0, -1e30 -> -0.0, 3e38 -> 3e38"),
    Formula("gelu_tanh", "GELU, tanh form",
            mul(mul(HALF, X), add(ONE, tanh(mul(X, add(const(SQRT_2_OVER_PI, "sqrt(2/pi)"),
                                                    mul(mul(const(GELU_TANH_C1), X), X)))))),
            "NaN -> NaN, +inf -> +inf, -inf -> NaN (-inf * 0), -0.0 -> -0.0, -1e30 -> -0.0, 3e38 -> 3e38"),
    Formula("silu", "SiLU, x * sigmoid(x)", mul(X, _SIGMOID),
            "NaN -> NaN, +inf -> +inf, -inf -> NaN (-inf * 0), -0.0 -> -0.0, -1e30 -> -0.0, 3e38 -> 3e38"),
    Formula("sigmoid", "sigmoid", _SIGMOID,
            "NaN -> NaN, +inf -> 1, -inf -> 0, -0.0 -> 0.5, -1e30 -> 0, 3e38 -> 1"),
    Formula("clamp_min", "clamp below, NaN kept", Node("where_lt", (X, param("min"))),
            "NaN -> NaN, -inf -> min, +inf -> +inf, -0.0 -> -0.0 (when min <= 0)"),
    Formula("clamp_max", "clamp above, NaN kept", Node("where_gt", (X, param("max"))),
            "NaN -> NaN, +inf -> max, -inf -> -inf, -0.0 -> -0.0 (when max >= 0)"),
)}

# The ops that are plain IEEE arithmetic, for the conformance suite's documentation.
ARITHMETIC: dict[str, str] = {
    "bias": "x + bias (f32 add; the bias converted to f32 exactly)",
    "scale": "x * s (f32 multiply; s a constant, a runtime scalar, or per-row / per-column vectors)",
    "residual": "x + beta * c (f32; beta = 1 adds c itself)",
    "gated": "fn(gate) * up (fn: the silu, gelu or gelu_tanh row above on the gate column, then an f32 multiply by the up column)",
    "cast": "round x to dtype (round to nearest even, NaN kept, out of range as the dtype's conversion does), back to f32",
}


# The activations' derivatives, for the backward kernels (training): act'(x) of the pre-activation x, in f32,
# multiplied into the output's gradient (dOut * act'(pre)). Each is the derivative of the float64 reference
# (torch.relu, F.gelu, F.gelu(approximate="tanh"), F.silu, torch.sigmoid), so the gradients match float64
# autograd of the reference (tests/test_formulas.py: test_derivative_equals_torch_autograd_in_float64).
# relu's is torch's threshold_backward: 0 where x <= 0 (x = 0 included), 1 elsewhere (NaN included). A step
# derivative is not multiplied in but selected (each backend's `times_derivative` template macro: where(x <= 0,
# 0, dOut)): threshold_backward gives 0 at x <= 0 whatever dOut is, a NaN or inf dOut included (0 x NaN is NaN).
# The sigmoid-based ones use s = 0.5 + 0.5 t and 1 - s = 0.5 - 0.5 t with t = tanh(x / 2), the forward's one-tanh
# form (1 - s written so keeps its precision where s is near 1); a backend CSEs the repeated tanh.
_T_HALF = tanh(mul(HALF, X))
_S = add(HALF, mul(HALF, _T_HALF))
_ONE_MINUS_S = add(HALF, mul(const(-0.5), _T_HALF))
_T_GELU = tanh(mul(X, add(const(SQRT_2_OVER_PI, "sqrt(2/pi)"), mul(mul(const(GELU_TANH_C1), X), X))))
INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)

DERIVATIVES: dict[str, Formula] = {f.op: f for f in (
    Formula("relu", "ReLU's derivative (0 at x <= 0)", step(X), "NaN -> 1 (the gradient passes), 0 -> 0, -0.0 -> 0"),
    Formula("gelu", "GELU's derivative, erf form: Phi(x) + x phi(x)",
            add(mul(HALF, add(ONE, erf(mul(X, const(SQRT_HALF, "sqrt(1/2)"))))),
                mul(X, mul(const(INV_SQRT_2PI, "1/sqrt(2 pi)"), exp(mul(mul(const(-0.5), X), X))))),
            "NaN -> NaN, +inf -> NaN (inf * 0), -inf -> NaN"),
    Formula("gelu_tanh", "GELU's derivative, tanh form",
            add(mul(HALF, add(ONE, _T_GELU)),
                mul(mul(mul(HALF, X), mul(add(ONE, _T_GELU), add(ONE, mul(const(-1.0), _T_GELU)))),
                    add(const(SQRT_2_OVER_PI, "sqrt(2/pi)"), mul(mul(const(3.0 * GELU_TANH_C1), X), X)))),
            "NaN -> NaN"),
    Formula("silu", "SiLU's derivative, s (1 + x (1 - s))", mul(_S, add(ONE, mul(X, _ONE_MINUS_S))), "NaN -> NaN"),
    Formula("sigmoid", "sigmoid's derivative, s (1 - s)", mul(_S, _ONE_MINUS_S), "NaN -> NaN"),
)}
