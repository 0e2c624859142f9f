"""The grouped entry under torch.compile: one opaque custom op in a `fullgraph=True` graph (no graph break),
eager's result, new group sizes through the same compiled graph (the index is data on the device), and `out=`
keeping the rows past the groups (the op writes into a copy of `out`)."""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.grouped.testing.data import CASES, Case, GroupedProblem
from specgen.kinds.grouped.testing.specs import FORMS

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_fullgraph_is_one_op_and_replays_new_group_sizes(load_kernel):
    s = FORMS["g_offs_zero_kmn"]
    module = load_kernel(s)
    fn = getattr(module, s["name"])
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend("aot_eager")(gm, example_inputs)

    def program(a, b, offs, bias):
        return fn(a, b, offs, bias).float() * 2

    compiled = torch.compile(program, fullgraph=True, backend=backend)
    problem = GroupedProblem(s, CASES["ragged"], "compile")
    a, b, _ = problem.operands()
    ((_, bias),) = problem.epilogue_args()
    for sizes in ((5, 17, 33), (0, 55, 0), (30, 0, 2)):  # the same shapes, new sizes: the same graph
        offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        assert torch.equal(compiled(a, b, offs, bias), program(a, b, offs, bias))
    assert len(graphs) == 1, "graph break or recompile"
    assert sum(n.target in (module._op, module._op.default) for gm in graphs for n in gm.graph.nodes) == 1


def test_fullgraph_out_keeps_untouched_rows(load_kernel):
    s = FORMS["g_offs_untouched_kk"]
    fn = getattr(load_kernel(s), s["name"])
    problem = GroupedProblem(s, Case((4, 0, 9), tail=6), "compile_out")
    a, b, _ = problem.operands()
    offs = problem.index()
    out = torch.full((a.shape[0], b.shape[2]), 3.0, dtype=torch.float16)
    torch.compile(lambda out, *args: fn(*args, out=out), fullgraph=True, backend="aot_eager")(out, a, b, offs)
    want = fn(a, b, offs)
    assert torch.equal(out[:13], want[:13]) and (out[13:] == 3.0).all()
