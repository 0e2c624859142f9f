"""Epilogue ops: a typed chain applied, in order, to the f32 accumulator before the final store.

Each op is data. Templates render it through one macro per op and backend, so a spec can never inject
code. Ops that read memory declare their runtime arguments (`RuntimeArg`); the launcher takes them in
chain order after `a` and `b`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from specgen.spec.dtypes import DType
from specgen.spec.names import IDENTIFIER, MAX_NAME, check_arg_name
from specgen.values import value

# An argument's name becomes a launcher parameter, a kernel parameter and the locals derived from it:
# names.py says which names are refused and why (the schema shows the pattern too).
Identifier = Annotated[str, Field(max_length=MAX_NAME, json_schema_extra={"pattern": IDENTIFIER.pattern}),
                       AfterValidator(check_arg_name)]

# Largest finite float32: constants are applied to the float32 accumulator, where anything larger is inf.
F32_MAX = 3.4028234663852886e38


def _f32_range(value: float) -> float:
    if abs(value) > F32_MAX:
        raise ValueError(f"{value!r} is beyond float32's range (|x| <= {F32_MAX:.8g}): the epilogue computes in f32")
    return value


# A finite number (an integer is fine; a bool, a string such as "1e400", NaN or infinity are not).
Constant = Annotated[float, Field(strict=True, allow_inf_nan=False, json_schema_extra={"minimum": -F32_MAX,
                                                                                       "maximum": F32_MAX}),
                     AfterValidator(_f32_range)]

# What a runtime argument looks like to the launcher: its extent and element type.
ArgShape = Literal["scalar", "vec_m", "vec_n", "matrix"]


@value
class RuntimeArg:
    name: str
    shape: ArgShape
    dtype: DType
    doc: str


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def runtime_args(self) -> list[RuntimeArg]:
        return []


class Bias(_Op):
    """out += bias, a vector along the rows (`m`, one value per row) or the columns (`n`)."""

    op: Literal["bias"]
    along: Literal["m", "n"] = "n"
    dtype: DType = DType.f32
    name: Identifier = "bias"

    def runtime_args(self) -> list[RuntimeArg]:
        extent = "M" if self.along == "m" else "N"
        return [RuntimeArg(self.name, f"vec_{self.along}", self.dtype, f"bias, ({extent},) {self.dtype}")]


class Scale(_Op):
    """Multiply by a scalar, a per-row vector, a per-column vector, or both (fp8 rowwise scaling).

    A scalar with `value` is baked in as a constant; without it, the launcher takes `alpha`.
    `rowcol` takes `scale_a` (M,) and `scale_b` (N,), as `torch._scaled_mm` does.
    """

    op: Literal["scale"]
    by: Literal["scalar", "row", "col", "rowcol"]
    value: Constant | None = None
    name: Identifier | None = None

    @model_validator(mode="after")
    def _value_only_for_scalar(self) -> Scale:
        if self.value is not None and self.by != "scalar":
            raise ValueError(f"`value` is only for by = 'scalar' (got by = '{self.by}')")
        if self.name is not None and self.by == "rowcol":
            raise ValueError("by = 'rowcol' takes two arguments named scale_a and scale_b; drop `name`")
        return self

    def runtime_args(self) -> list[RuntimeArg]:
        if self.by == "scalar":
            if self.value is not None:
                return []
            return [RuntimeArg(self.name or "alpha", "scalar", DType.f32, "scalar multiplier, a Python float")]
        if self.by == "row":
            return [RuntimeArg(self.name or "row_scale", "vec_m", DType.f32, "per-row scale, (M,) f32")]
        if self.by == "col":
            return [RuntimeArg(self.name or "col_scale", "vec_n", DType.f32, "per-column scale, (N,) f32")]
        return [
            RuntimeArg("scale_a", "vec_m", DType.f32, "per-row scale of A, (M,) or (M, 1) f32"),
            RuntimeArg("scale_b", "vec_n", DType.f32, "per-column scale of B, (N,) or (1, N) f32"),
        ]


class Gated(_Op):
    """A gated linear unit, the MLP of most LLMs (SwiGLU, GeGLU): gate and up projections in one GEMM.

    B holds 2N columns, (K, 2N), and the kernel stores N: out[:, j] = fn(gate[:, j]) * up[:, j], each in f32,
    with `fn` the activation op's formula (specgen/spec/formulas.py: the same NaN, +-inf and -0.0 results)
    and one f32 multiply. `layout` says where gate and up sit in B's columns: `halves` has gate columns
    [0, N) and up columns [N, 2N), the weight `torch.cat([w_gate, w_up])` (each (N, K), B its transpose) as
    most checkpoints store gate_up_proj; `interleaved` has column 2j gate j and column 2j + 1 up j (one column
    at a time). It is the chain's first op (it turns the accumulator's 2N columns into the N outputs); every later op acts
    on those N outputs (a bias or column scale is (N,), a residual (M, N)).
    """

    op: Literal["gated"]
    fn: Literal["silu", "gelu", "gelu_tanh"]
    layout: Literal["halves", "interleaved"]


# What the gated op is called where its fn names it (docs, generated docstrings, bench labels).
GATED_NAMES = {"silu": "SwiGLU", "gelu": "GeGLU", "gelu_tanh": "GeGLU (tanh)"}


def gated_op(epilogue: list) -> Gated | None:
    """The chain's gated op, if it has one (`check_gated` keeps it first and alone)."""
    return epilogue[0] if epilogue and isinstance(epilogue[0], Gated) else None


def b_columns(spec: object) -> int:
    """B's columns per output column of a spec (None: 1): 2 with a gated epilogue (gate and up), else 1."""
    return 2 if spec is not None and gated_op(spec.epilogue) is not None else 1  # type: ignore[attr-defined]


def check_gated(epilogue: list) -> None:
    """A gated op stands first in the chain, once: it turns 2N accumulator columns into N outputs, and every
    later op acts on those N (ValueError naming the op's position otherwise)."""
    for i, op in enumerate(epilogue):
        if isinstance(op, Gated) and i > 0:
            raise ValueError(f"epilogue[{i}]: a `gated` op must be the chain's first (it turns B's 2N columns into "
                             f"the N outputs that every later op acts on); move it before epilogue[0] "
                             f"({epilogue[0].op})" + (", and keep one gated op" if isinstance(epilogue[0], Gated) else ""))


class Activation(_Op):
    """Elementwise activation; `gelu` is the erf form, `gelu_tanh` the tanh approximation.

    Every backend computes the same f32 formula (specgen/spec/formulas.py): `relu` is
    `where(x < 0, 0, x)`, `silu` is `x * sigmoid(x)`, `sigmoid` is `0.5 + 0.5 * tanh(0.5 * x)`. NaN,
    infinities and -0.0 give what torch gives: NaN stays NaN, and gelu, gelu_tanh and silu of -inf are NaN.
    """

    op: Literal["activation"]
    fn: Literal["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]


class Residual(_Op):
    """out += beta * C, C a matrix shaped like the output, in its own dtype."""

    op: Literal["residual"]
    dtype: DType
    beta: Constant = 1.0
    name: Identifier = "c"

    def runtime_args(self) -> list[RuntimeArg]:
        return [RuntimeArg(self.name, "matrix", self.dtype, f"residual, shaped like out, {self.dtype}")]


class Clamp(_Op):
    """Clamp to [min, max]; either bound may be left out. NaN stays NaN, as in torch.clamp, on every backend."""

    op: Literal["clamp"]
    min: Constant | None = None
    max: Constant | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Clamp:
        if self.min is None and self.max is None:
            raise ValueError("clamp needs `min`, `max` or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"clamp min {self.min} > max {self.max}")
        return self


class Cast(_Op):
    """Round the running value to `dtype` (and continue in f32), as an unfused chain would between ops."""

    op: Literal["cast"]
    dtype: DType


EpilogueOp = Annotated[Gated | Bias | Scale | Activation | Residual | Clamp | Cast, Field(discriminator="op")]
