"""Numerics of the rendered Pallas TPU kernels in Pallas's TPU interpreter on the CPU: the GEMM kind's shared
numerics tests (specgen/kinds/gemm/testing/numerics.py: float64 reference, poisoned padding, inputs left
untouched, every epilogue op seen by the tolerance).

Every catalogue spec with a TPU target runs at its shipped blocks; extra specs with small blocks (many
grid steps) cover every epilogue op, both majors of A and B, batching, f32, int8 and fp8 operands. The
interpreter runs strict (`specgen.runtime.jax.strict_interpret()`): VMEM and block reads past an array's
end are NaN, so an unmasked K tail or an output element never written shows as NaN (poisoned outputs;
`test_interpreter_poisons_unwritten_and_out_of_bounds_blocks` proves the premise). Shapes: aligned to the
block, ragged in M, N and K, M = 1, K smaller than one block, and several K steps ending in a tail;
strided operands on the small ones.
The tolerance sees every op: the reference with any one op dropped fails it (on the ragged shape), but
for a rounding cast, which the tolerance of a chain holding one must absorb (f32 and float64 sums may
round to neighbouring bf16 values).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import pallas as pl

from backends.pallas.common import TPU_CATALOGUE, jnp_dtype, render_module
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.data import Problem
from specgen.kinds.gemm.testing.numerics import NumericsTests
from specgen.runtime.jax import from_torch, strict_interpret, to_torch

SMALL = {"m": 16, "n": 128, "k": 128}


def extra(name: str, *, a: str = "k", b: str = "k", dtype: str = "bf16", out: str | None = None,
          acc: str = "f32", epilogue: tuple = (), batch: bool = False, target: str = "pallas:tpu_v5e",
          ab_stages: int | str = "auto") -> dict:
    spec = {
        "name": f"xp_{name}", "kind": "gemm",
        "a": {"dtype": dtype, "major": a}, "b": {"dtype": dtype, "major": b}, "out": {"dtype": out or dtype},
        "accumulator": acc, "batch": batch, "epilogue": [dict(op) for op in epilogue],
        "tile": dict(SMALL if a == "k" else {**SMALL, "m": 128}), "targets": [target],
        "pipeline": {"ab_stages": ab_stages},
    }
    return GemmSpec.model_validate(spec).model_dump(mode="json")


EXTRAS = [
    extra("mn_k", a="mn", out="f32", epilogue=(
        {"op": "bias", "along": "m", "dtype": "bf16", "name": "bias_m"},
        {"op": "scale", "by": "row"},
        {"op": "activation", "fn": "silu"},
        {"op": "clamp", "min": -0.1, "max": 0.6},
        {"op": "cast", "dtype": "bf16"},
    )),
    extra("k_mn", b="mn", out="f32", epilogue=(
        {"op": "scale", "by": "scalar", "value": 0.5},
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "activation", "fn": "sigmoid"},
        {"op": "scale", "by": "col"},
        {"op": "clamp", "max": 0.4},
    )),
    extra("mn_mn", a="mn", b="mn", out="f32", epilogue=(
        {"op": "scale", "by": "rowcol"},
        {"op": "activation", "fn": "gelu"},
        {"op": "residual", "dtype": "bf16", "beta": -0.5},
    )),
    extra("k_k_tanh", out="f32", epilogue=(
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "scale", "by": "scalar", "name": "gain"},
        {"op": "activation", "fn": "relu"},
    )),
    extra("bmm_mn_k", a="mn", batch=True, epilogue=(
        {"op": "bias", "along": "n", "dtype": "bf16"},
        {"op": "activation", "fn": "gelu_tanh"},
        {"op": "residual", "dtype": "bf16"},
    )),
    extra("bmm_k_mn", b="mn", batch=True, out="f32", epilogue=(
        {"op": "scale", "by": "scalar"},
        {"op": "residual", "dtype": "f32", "beta": 0.5, "name": "skip"},
        {"op": "clamp", "min": -1.0},
    )),
    extra("f32", dtype="f32", epilogue=(
        {"op": "bias", "along": "n", "dtype": "f32"},
        {"op": "activation", "fn": "gelu"},
    )),
    extra("int8", dtype="int8", out="int32", acc="int32", ab_stages=1),  # single-buffered A and B
    extra("fp8_e5m2", dtype="fp8_e5m2", out="bf16", epilogue=({"op": "scale", "by": "rowcol"},)),
]

VARIANTS = {**TPU_CATALOGUE, **{s["name"]: s for s in EXTRAS}}


def shapes(spec: dict) -> dict[str, tuple[int, int, int]]:
    t = spec["tile"]
    return {
        "aligned": (2 * t["m"], 2 * t["n"], 2 * t["k"]),
        "ragged": (t["m"] + 37, t["n"] + 53, t["k"] + 29),  # M, N and K one block and a tail each
        "m1": (1, t["n"] + 3, t["k"] + 1),
        "ksmall": (20, 40, 5),  # every block clamped to its (small) array
        "deepk": (t["m"] + 1, 24, 3 * t["k"] + 4),  # four K steps, the last a tail of 4
    }


# Each shape costs one interpreter compile (seconds): each catalogue spec runs aligned, ragged, M = 1
# and one K tail (K < block and several K steps ending in a tail, in turn: the catalogue covers both);
# each extra spec the ragged shape (with the op-dropping checks) and one more, in turn.
_K_TAILS = ["ksmall", "deepk"]
_EDGE = ["m1", "ksmall", "deepk", "aligned"]
CASES = [(v, s) for i, v in enumerate(TPU_CATALOGUE) for s in ("aligned", "ragged", "m1", _K_TAILS[i % 2])] + [
    (spec["name"], s) for i, spec in enumerate(EXTRAS) for s in ("ragged", _EDGE[i % len(_EDGE)])
]
assert {s for _, s in CASES[:4 * len(TPU_CATALOGUE)]} == set(shapes(EXTRAS[0])), "a shape class lost"


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("pallas")
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = render_module(VARIANTS[name], folder)
        return cache[name]

    return get


# Strided operands (leading strides wider than the extent, the padding poisoned: the JAX import copies
# them) on the small shapes; the others as tight as they come.
LAYOUTS = {"aligned": "dense", "ragged": "dense", "m1": "strided", "ksmall": "strided", "deepk": "dense"}


class TestPallasTpuNumerics(NumericsTests):
    """The GEMM kind's numerics (specgen/kinds/gemm/testing/numerics.py) through the JAX entry: each torch
    operand handed over in its stored layout through DLPack (`from_torch`, as the torch entry does), the
    result (a new array: nothing to poison but the interpreter's VMEM) back to torch."""

    VARIANTS = VARIANTS
    WRITES_OUT = False
    # The tolerance sees every op on the ragged shape (on M = 1 or K < block, a clamp may not bite).
    MUTANT_SHAPES = frozenset({"ragged"})

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        return CASES

    def problem(self, spec: dict, shape: str) -> Problem:
        M, N, K = shapes(spec)[shape]
        return Problem(spec, M, N, K, LAYOUTS[shape], aligned=False, vectors_2d=shape == "ksmall", tag=shape)

    @pytest.fixture
    def module(self, modules):
        return lambda spec: modules(spec["name"])

    def run(self, module: object, spec: dict, a: torch.Tensor, b: torch.Tensor, args: list[tuple[str, object]],
            out: torch.Tensor | None) -> torch.Tensor:
        name = spec["name"]
        roles = {arg.name: arg.shape for arg in GemmSpec.model_validate(spec).runtime_args()}
        arrays = [from_torch(name, "a", a, transpose=spec["a"]["major"] != "k"),
                  from_torch(name, "b", b, transpose=spec["b"]["major"] == "k")]
        for arg, value in args:
            if roles[arg] == "scalar":
                arrays.append(value)
            else:
                arrays.append(from_torch(name, arg, value, transpose=None if roles[arg] != "matrix" else False))
        result = getattr(module, name)(*arrays)
        assert isinstance(result, jax.Array)
        assert result.dtype == jnp_dtype(spec["out"]["dtype"])
        return to_torch(result)


def test_interpreter_poisons_unwritten_and_out_of_bounds_blocks() -> None:
    """The premise of the NaN checks above: under the strict interpreter a block read past an array's
    end holds NaN there (so an unmasked K tail poisons the sums), and an output block whose VMEM buffer
    was never written reads back NaN. (A later unwritten block would hold the previous block's stale
    VMEM instead, as on a TPU: the reference comparison catches that.)"""

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 1)
        def _():
            o_ref[...] = x_ref[...]

    x = jnp.ones((12, 128), jnp.float32)  # block 1 covers rows 8..15: 12..15 are past the end
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
                         in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                         out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=strict_interpret())(x)
    got = np.asarray(out)
    assert np.isnan(got[:8]).all(), "block 0 was never written"
    assert (got[8:12] == 1).all()
    assert np.isnan(got[12:]).all(), "rows 12..15 were read past x's end"
