"""The gated epilogue op (SwiGLU, GeGLU; specgen/spec/epilogue.py `Gated`) beside what the numerics run
(tests/backends/triton/variants.py and the grouped FORMS run it through the interpreter): its spec errors on
both kinds, each naming the field; its special values through a Triton kernel (the activation's row of the
formula table, then one multiply); the host guard on B's 2N columns; the fake (meta) shape; the doubled B box
of an interleaved tile; the module's words."""

from __future__ import annotations

import json
import math

import pytest
import torch
from kernels import MINIMAL_SPEC, load_module
from specials import assert_same_classes

from specgen.kinds.gemm.designs.triton.design import DESIGN as TRITON
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.render.env import describe_op
from specgen.spec.formulas import ARITHMETIC
from specgen.spec.load import SpecError, load_text
from specgen.targets import TARGETS

SWIGLU = {"op": "gated", "fn": "silu", "layout": "halves"}
F32 = {"a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"}, "out": {"dtype": "f32"}}
SMALL = {"tile": {"m": 16, "n": 32, "k": 32}, "triton": {"num_warps": 4, "tma": False}}


def issues(kernel: dict) -> list[str]:
    """The spec errors of one kernel, as `specgen check` prints them (file:line:col: path: message)."""
    with pytest.raises(SpecError) as e:
        load_text(json.dumps({"kernels": [kernel]}, indent=1), "<gated>", ".json")
    return [str(i) for i in e.value.issues]


# --- spec errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gemm", "grouped"])
def test_a_gated_op_stands_first(kind: str) -> None:
    first = {"op": "scale", "by": "scalar", "value": 2.0}
    (msg,) = issues({**MINIMAL_SPEC, "kind": kind, "epilogue": [first, SWIGLU]})
    assert "kernels[0].epilogue: epilogue[1]: a `gated` op must be the chain's first" in msg
    assert "move it before epilogue[0] (scale)" in msg


def test_one_gated_op_per_chain() -> None:
    (msg,) = issues({**MINIMAL_SPEC, "epilogue": [SWIGLU, {**SWIGLU, "layout": "interleaved"}]})
    assert "epilogue[1]: a `gated` op must be the chain's first" in msg and "keep one gated op" in msg


@pytest.mark.parametrize(("op", "path", "words"), [
    ({"op": "gated", "fn": "relu", "layout": "halves"}, "epilogue[0].fn", "Input should be 'silu', 'gelu' or 'gelu_tanh'"),
    ({"op": "gated", "fn": "silu"}, "epilogue[0].layout", "Field required"),
    ({"op": "gated", "layout": "halves"}, "epilogue[0].fn", "Field required"),
    ({"op": "gated", "fn": "silu", "layout": "stacked"}, "epilogue[0].layout", "Input should be 'halves' or 'interleaved'"),
    ({**SWIGLU, "name": "w"}, "epilogue[0].name", "Extra inputs are not permitted"),
])
@pytest.mark.parametrize("kind", ["gemm", "grouped"])
def test_each_malformed_gated_op_names_its_field(kind: str, op: dict, path: str, words: str) -> None:
    found = issues({**MINIMAL_SPEC, "kind": kind, "epilogue": [op]})
    assert any(f"kernels[0].{path}: {words}" in m for m in found), found


def test_later_ops_act_on_the_n_outputs() -> None:
    """After a gated op a bias, column scale and residual are shaped by N (the outputs), as without it."""
    spec = GemmSpec.model_validate({**MINIMAL_SPEC, "epilogue": [
        SWIGLU, {"op": "bias", "along": "n"}, {"op": "scale", "by": "col"}, {"op": "residual", "dtype": "bf16"}]})
    assert [(a.name, a.shape) for a in spec.runtime_args()] == [("bias", "vec_n"), ("col_scale", "vec_n"), ("c", "matrix")]


def test_the_docs_and_the_module_describe_it() -> None:
    assert "fn(gate) * up" in ARITHMETIC["gated"]
    assert describe_op(SWIGLU) == "gated: silu(gate) * up (SwiGLU; B has 2N columns, gate columns [0, N), up [N, 2N))"
    assert describe_op({"op": "gated", "fn": "gelu", "layout": "interleaved"}) == (
        "gated: gelu(gate) * up (GeGLU; B has 2N columns, gate column 2j, up 2j + 1)")


# --- boxes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("layout", "major", "box"), [("interleaved", "k", (256, 64)), ("interleaved", "mn", (64, 256)),
                                                      ("halves", "k", (128, 64)), ("halves", "mn", (64, 128))])
def test_an_interleaved_tile_loads_one_box_of_2n_columns(layout: str, major: str, box: tuple[int, int]) -> None:
    """The TMA rules see the B box the module builds: 2 tile.n columns interleaved, tile.n twice for halves."""
    spec = GemmSpec.model_validate({**MINIMAL_SPEC, "b": {"dtype": "bf16", "major": major},
                                    "epilogue": [{**SWIGLU, "layout": layout}]})
    (b,) = [x for x in TRITON.tma_boxes(spec, TARGETS["triton:sm90"]) if x.operand == "B"]
    assert (b.outer, b.inner) == box


# --- the Triton kernel: special values, guards, the fake ----------------------------------------------------
# gate = x and up = +-x / 2: x * x / 2 stays in f32's range (past it the f32 product is inf where float64's is not).
# No zeros: the K sum starts from +0.0, so a GEMM's -0.0 product (-0.0 * 1, 0 * -0.5) comes out +0.0, where
# torch's one-term float64 matmul keeps -0.0 (test_formulas checks fn of signed zeros).
SPECIAL_X = [math.nan, math.inf, -math.inf, 1e15, -1e15, 0.25, -0.75, 50.0, -50.0, 1e-30, -1e-30]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("layout", ["halves", "interleaved"])
@pytest.mark.parametrize("fn", ["silu", "gelu", "gelu_tanh"])
def test_special_values_follow_the_formula_table(fn: str, layout: str, tmp_path) -> None:
    """A (M, 1) carries NaN, +-inf, large and tiny values; B's one row holds 1 in every gate
    column and -0.5 or 0.5 in the up columns, so gate = x and up = +-x / 2 exactly: fn(gate) * up has torch's
    class in every element (NaN kept, fn(-inf) = NaN times inf, inf * inf, the signs of fn's -0.0 times +-up)."""
    name = f"gated_specials_{fn}_{layout}"
    spec = {**MINIMAL_SPEC, **F32, **SMALL, "name": name, "epilogue": [{"op": "gated", "fn": fn, "layout": layout}]}
    module = load_module(spec, tmp_path)
    n = 6
    x = torch.tensor(SPECIAL_X, dtype=torch.float32)[:, None]
    ups = torch.tensor([-0.5, 0.5, -0.5, 0.5, -0.5, 0.5])
    gate_up = (torch.ones(n), ups)
    b = torch.cat(gate_up) if layout == "halves" else torch.stack(gate_up, 1).flatten()
    out = getattr(module, name)(x, b[None, :])
    want = REFERENCES["gemm"](spec["epilogue"], x.double(), b[None, :].double(), {})
    assert out.shape == (len(SPECIAL_X), n)
    assert_same_classes(out, want, x.expand(-1, n), rtol=1e-5, atol=1e-6, what=f"{fn} {layout}")


@pytest.fixture(scope="module")
def swiglu(tmp_path_factory):
    spec = {**MINIMAL_SPEC, **F32, **SMALL, "name": "gated_guards", "epilogue": [SWIGLU, {"op": "bias", "along": "n"}]}
    return load_module(spec, tmp_path_factory.mktemp("gated"))


def weight(k: int, cols: int) -> torch.Tensor:
    """B (K, cols), K-major as the spec says: a (cols, K) weight transposed."""
    return torch.randn(cols, k).T


def test_b_has_an_even_column_count(swiglu) -> None:
    a, b, bias = torch.randn(5, 8), weight(8, 13), torch.randn(6)
    with pytest.raises(ValueError, match=r"gated_guards: b\.shape\[1\] = 13 must be even: the gated epilogue reads "
                                         r"gate and up columns, 2N of them for N outputs"):
        swiglu.gated_guards(a, b, bias)


def test_the_n_outputs_shape_the_other_arguments(swiglu) -> None:
    a, b = torch.randn(5, 8), weight(8, 12)
    with pytest.raises(ValueError, match="bias"):  # (N,) = (6,), not B's 12 columns
        swiglu.gated_guards(a, b, torch.randn(12))
    with pytest.raises(ValueError, match="out"):
        swiglu.gated_guards(a, b, torch.randn(6), out=torch.empty(5, 12))
    with pytest.raises(ValueError, match=r"b\.shape\[0\] \(K\) = 7 must equal a\.shape\[1\] = 8"):
        swiglu.gated_guards(a, weight(7, 12), torch.randn(6))
    got = swiglu.gated_guards(a, b, bias := torch.randn(6))
    want = REFERENCES["gemm"]([SWIGLU, {"op": "bias", "along": "n", "name": "bias"}], a, b, {"bias": bias})
    assert got.shape == (5, 6)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)


def test_the_fake_gives_n_columns(swiglu) -> None:
    """The torch.compile fake (meta) implementation: out (M, N) from B's 2N columns."""
    a, b = torch.empty(5, 8, device="meta"), torch.empty(8, 12, device="meta")
    assert swiglu._fake(a, b, torch.empty(6, device="meta")).shape == (5, 6)


def test_the_module_says_what_b_holds(swiglu) -> None:
    doc = swiglu.__doc__
    assert "b: (K, 2N) f32, k-major: gate columns [0, N), up columns [N, 2N)" in doc
    assert "0. gated: silu(gate) * up (SwiGLU" in doc


# --- bench: the peers compute what the kernel does ----------------------------------------------------------
@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_the_dense_peer_is_the_eager_mlp(layout: str) -> None:
    """`specgen bench`'s peer for a gated spec: x @ W (2N columns), then act(gate) * up and the rest, in eager
    torch; the work and bytes count B's 2N columns."""
    from specgen.kinds.gemm import problem
    from specgen.kinds.gemm.peers import _eager_chain

    op = {"op": "gated", "fn": "gelu_tanh", "layout": layout}
    spec = GemmSpec.model_validate({**MINIMAL_SPEC, **F32, "epilogue": [op, {"op": "bias", "along": "n"}]})
    a, b, bias = torch.randn(5, 8, dtype=torch.float64), torch.randn(8, 12, dtype=torch.float64), torch.randn(6)
    got = _eager_chain(spec)(a, b, bias.double())
    want = REFERENCES["gemm"]([op, {"op": "bias", "along": "n", "name": "bias"}], a, b, {"bias": bias})
    torch.testing.assert_close(got.double(), want)
    shape = problem.Shape(16, 8192, 4096)
    plain = GemmSpec.model_validate({**MINIMAL_SPEC, **F32})
    assert problem.flops(shape, spec) == 2 * problem.flops(shape, plain) == 4 * 16 * 8192 * 4096
    assert problem.bytes_moved(spec, shape) - problem.bytes_moved(plain, shape) == 4096 * 8192 * 4 + 8192 * 4


def test_the_grouped_peer_is_grouped_mm_then_the_eager_mlp() -> None:
    """The grouped kind's peer: torch._grouped_mm over B (G, K, 2N), then act(gate) * up (on the CPU here)."""
    from specgen.kinds.grouped import problem
    from specgen.kinds.grouped.spec import GroupedSpec
    from specgen.kinds.grouped.testing.reference import grouped
    from specgen.spec.models import parse_target

    op = {"op": "gated", "fn": "silu", "layout": "interleaved"}
    data = {**MINIMAL_SPEC, **F32, "kind": "grouped", "epilogue": [op]}
    spec = GroupedSpec.model_validate(data)
    a, b = torch.randn(20, 8), torch.randn(3, 8, 12)
    offs = torch.tensor([5, 5, 20], dtype=torch.int32)
    got = problem.peer_call(spec, parse_target("triton:sm90"), (a, b, offs))()
    want, written = grouped(spec.model_dump(mode="json"), a, b, offs, {})
    torch.testing.assert_close(got.double()[written], want[written], rtol=1e-5, atol=1e-5)
    shape = problem.Shape(8, 16, 1024, 2048)
    assert problem.flops(shape, spec) == 2 * problem.flops(shape)
