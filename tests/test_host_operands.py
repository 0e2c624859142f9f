"""The GEMM kind's host operand records (issue 35): the torch and JAX host templates read A, B and the output
from `gemm_operands` (specgen.abi.HostOperand), never by name. Every major of A and B, batched or not."""

from __future__ import annotations

import itertools

import pytest

from specgen.abi import Arg, Extent, HostOperand, bind_operands
from specgen.kinds.gemm.plan import gemm_operands
from specgen.spec.dtypes import DType

A, B, OUT = (Arg(n, n, DType.f16, "") for n in ("a", "b", "out"))


@pytest.mark.parametrize(("a_major", "b_major", "batch"), list(itertools.product(["k", "mn"], ["k", "mn"], [False, True])))
def test_gemm_operand_records(a_major: str, b_major: str, batch: bool):
    (a, b), out = gemm_operands(A, B, OUT, a_major, b_major, batch)
    outer = ("batch",) if batch else ()
    r = len(outer) + 2
    assert (a.arg, b.arg, out.arg) == (A, B, OUT)
    assert (a.dims, b.dims, out.dims) == ((*outer, "M", "K"), (*outer, "K", "N"), (*outer, "M", "N"))
    assert (a.rank, b.rank, out.rank) == (r, r, r)
    assert (a.stride, a.pointer, b.stride, b.pointer, out.stride, out.pointer) == ("sa", "pa", "sb", "pb", "so", "po")
    assert (a.shape, out.shape) == (f"({'batch, ' if batch else ''}M, K)", f"({'batch, ' if batch else ''}M, N)")

    # contiguous and leading dims (indices from the front; the templates subtract the rank for [-1]/[-2])
    assert a.contiguous == ("K" if a_major == "k" else "M")
    assert b.contiguous == ("K" if b_major == "k" else "N")
    assert (a.contiguous_at - r, a.leading_at - r) == ((-1, -2) if a_major == "k" else (-2, -1))
    assert (b.contiguous_at - r, b.leading_at - r) == ((-2, -1) if b_major == "k" else (-1, -2))
    assert a.leading == ("M" if a_major == "k" else "K")
    assert b.leading == ("N" if b_major == "k" else "K")
    assert (out.contiguous, out.contiguous_at - r, out.leading, out.leading_at - r) == ("N", -1, "M", -2)
    assert a.outer_at == b.outer_at == out.outer_at == ((0,) if batch else ())

    # stored order (JAX) and whether the torch-to-JAX door transposes
    assert a.stored == ((*outer, "M", "K") if a_major == "k" else (*outer, "K", "M"))
    assert b.stored == ((*outer, "N", "K") if b_major == "k" else (*outer, "K", "N"))
    assert (a.transposed, b.transposed, out.transposed) == (a_major == "mn", b_major == "k", False)

    # bindings: A binds every symbol it has; B binds N and repeats batch and K (checked against A)
    assert a.extents == tuple(Extent(s, i, s, s) for i, s in enumerate(a.dims))
    assert (a.binds, a.repeats) == (a.dims, ())
    assert b.binds == ("N",)
    repeats = ([Extent("batch", 0, "batch_b", "_", "a.shape[0]")] if batch else []) + [
        Extent("K", r - 2, "K_b", "K_b", f"a.shape[{r - 1}]")]
    assert b.repeats == tuple(repeats)
    assert [e.bound for e in b.extents] == [*(["batch_b"] if batch else []), "K_b", "N"]
    assert [e.fast for e in b.extents] == [*(["_"] if batch else []), "K_b", "N"]
    # the output binds nothing: each symbol's first position (the fake's shape)
    assert out.binds == ()
    assert [e.first for e in out.extents] == [*(["a.shape[0]"] if batch else []), f"a.shape[{r - 2}]", f"b.shape[{r - 1}]"]


def test_records_describe_other_operand_lists():
    """Nothing in the records is GEMM-only: a ragged A (total_rows, K), a stacked B (G, N, K) and an int32
    offs (G,) bind and check the same way (no such kind is built here)."""
    offs = Arg("offs", "offs", DType.int32, "")
    (a, b, o), out = bind_operands([(A, ("total_rows", "K"), "K", "a"), (B, ("G", "N", "K"), "K", "b"),
                                    (offs, ("G",), "G", "offs")], (OUT, ("total_rows", "N"), "N", "o"))
    assert b.binds == ("G", "N") and b.repeats == (Extent("K", 2, "K_b", "K_b", "a.shape[1]"),)
    assert (b.outer_at, b.leading, b.stored, b.transposed) == ((0,), "N", ("G", "N", "K"), False)
    assert (o.stride, o.rank, o.leading, o.outer_at, o.shape) == ("soffs", 1, None, (), "(G,)")
    assert o.repeats == (Extent("G", 0, "G_offs", "G_offs", "b.shape[0]"),)
    assert [e.first for e in out.extents] == ["a.shape[0]", "b.shape[1]"]


def test_records_refuse_what_they_cannot_describe():
    with pytest.raises(ValueError, match="contiguous"):
        HostOperand(A, (Extent("batch", 0, "batch", "batch"), Extent("M", 1, "M", "M"), Extent("K", 2, "K", "K")),
                    "batch", "sa", "pa")
    with pytest.raises(ValueError, match="no operand binds"):
        bind_operands([(A, ("M", "K"), "K", "a")], (OUT, ("M", "N"), "N", "o"))
