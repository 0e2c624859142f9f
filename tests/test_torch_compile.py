"""The generated functions under torch.compile: inside a `fullgraph=True` graph they are one opaque
custom op (`specgen::<name>_<spec hash>`), with no graph break, and give eager's result; the op's fake
implementation gives the right output shape and dtype without running anything."""

from __future__ import annotations

import pytest
import torch
from kernels import catalogue, interpreter_variant
from torch._subclasses.fake_tensor import FakeTensorMode

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

TILE = {"m": 16, "n": 32, "k": 32}
M, N, K, BATCH = 20, 40, 24, 3
CATALOGUE = catalogue()


def _variant(base: str, name: str, **changes: object) -> dict:
    spec = interpreter_variant(CATALOGUE[base], name=name, tile=dict(TILE), **changes)
    return GemmSpec.model_validate(spec).model_dump(mode="json")


KERNELS = {
    "residual": _variant("gemm_residual_bf16", "compile_residual"),  # pointer, scalar alpha + residual
    "bias_gelu": _variant("gemm_bias_gelu_bf16", "compile_bias_gelu"),  # persistent TMA + bias
    "rowwise": _variant("gemm_fp8_rowwise", "compile_rowwise"),  # TMA, two vectors
    "bmm": _variant("bmm_bf16", "compile_bmm"),  # batched persistent TMA
}


def torch_dtype(dt: str) -> torch.dtype:
    return getattr(torch, DType(dt).info.torch)


def make_args(spec: dict, m: int = M, seed: int = 0) -> list[object]:
    g = torch.Generator().manual_seed(seed)
    batch = (BATCH,) if spec["batch"] else ()
    a = torch.randn(*batch, m, K, generator=g).to(torch_dtype(spec["a"]["dtype"]))
    if spec["a"]["major"] == "mn":
        a = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    b = torch.randn(*batch, K, N, generator=g).to(torch_dtype(spec["b"]["dtype"]))
    if spec["b"]["major"] == "k":
        b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
    args: list[object] = [a, b]
    for arg in GemmSpec.model_validate(spec).runtime_args():
        dt = torch_dtype(arg.dtype)
        args.append({
            "scalar": lambda: 0.75,
            "vec_m": lambda dt=dt: (torch.rand(m, generator=g) + 0.5).to(dt),
            "vec_n": lambda dt=dt: (torch.rand(N, generator=g) + 0.5).to(dt),
            "matrix": lambda dt=dt: torch.randn(*batch, m, N, generator=g).to(dt),
        }[arg.shape]())
    return args


class GraphRecorder:
    """A torch.compile backend that keeps every FX graph it is given, then runs aot_eager."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs.append(gm)
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend("aot_eager")(gm, example_inputs)

    def op_calls(self, op: object) -> int:
        return sum(node.target in (op, op.default) for gm in self.graphs for node in gm.graph.nodes)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_fullgraph_matches_eager(kernel: str, load_kernel) -> None:
    spec = KERNELS[kernel]
    module = load_kernel(spec)
    fn = getattr(module, spec["name"])
    args = make_args(spec)

    def program(*args):
        y = fn(*args)
        return y.float().relu() * 2 + 1, y

    recorder = GraphRecorder()
    compiled = torch.compile(program, fullgraph=True, backend=recorder)
    got_post, got = compiled(*args)
    want_post, want = program(*args)
    assert got.dtype == want.dtype == torch_dtype(spec["out"]["dtype"])
    assert got.shape == want.shape
    assert torch.equal(got, want)  # the same kernel on the same data
    torch.testing.assert_close(got_post, want_post, rtol=0, atol=0)
    assert len(recorder.graphs) == 1, "graph break"
    assert recorder.op_calls(module._op) == 1, "the kernel is not one custom op in the graph"

    # A new M: the fake implementation sizes the output symbolically (or the graph recompiles).
    args2 = make_args(spec, m=M + 7, seed=1)
    got_post2, got2 = compiled(*args2)
    want_post2, want2 = program(*args2)
    assert got2.shape == want2.shape and torch.equal(got2, want2)
    torch.testing.assert_close(got_post2, want_post2, rtol=0, atol=0)


def test_fullgraph_with_out(load_kernel) -> None:
    """`out=` under compile: the op's result is copied into it, as eager writes it in place."""
    spec = KERNELS["residual"]
    fn = getattr(load_kernel(spec), spec["name"])
    args = make_args(spec)

    def program(out, *args):
        return fn(*args, out=out) + 0

    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    result = torch.compile(program, fullgraph=True, backend="aot_eager")(out, *args)
    want = fn(*args)
    assert torch.equal(out, want) and torch.equal(result, want)


def test_fullgraph_dynamic_shapes(load_kernel) -> None:
    spec = KERNELS["bmm"]
    fn = getattr(load_kernel(spec), spec["name"])
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (M, M + 9):
        args = make_args(spec, m=m, seed=m)
        assert torch.equal(compiled(*args), fn(*args))


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_fake_tensor_shapes(kernel: str, load_kernel) -> None:
    spec = KERNELS[kernel]
    op = load_kernel(spec)._op
    real = make_args(spec)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in real]
        result = op(*fake)
    assert type(result).__name__ == "FakeTensor"
    assert result.shape == ((BATCH,) if spec["batch"] else ()) + (M, N)
    assert result.dtype == torch_dtype(spec["out"]["dtype"])
    assert result.device == real[0].device


def test_opcheck(load_kernel) -> None:
    """torch.library's own checks: schema, autograd registration, fake vs real, AOT dispatch."""
    spec = KERNELS["residual"]
    op = load_kernel(spec)._op
    results = torch.library.opcheck(op, tuple(make_args(spec)))
    assert set(results.values()) == {"SUCCESS"}, results


def test_one_kernel_name_in_two_packages_never_aliases(tmp_path) -> None:
    """Two rendered packages, each with a kernel named `alias_k` from a different spec (relu vs sigmoid,
    the same arguments): under torch.compile each call runs its own package's kernel."""
    from kernels import load_module

    relu = _variant("gemm_relu_f16", "alias_k")
    sigmoid = {**relu, "epilogue": [{"op": "activation", "fn": "sigmoid"}]}
    modules = []
    for i, spec in enumerate((relu, sigmoid)):
        folder = tmp_path / f"pkg{i}"
        folder.mkdir()
        modules.append(load_module(spec, folder, f"_alias_pkg{i}_alias_k"))
    m1, m2 = modules
    assert m1._op is not m2._op and m1.METADATA["custom_op"] != m2.METADATA["custom_op"]
    args = make_args(relu)
    eager1, eager2 = m1.alias_k(*args), m2.alias_k(*args)
    assert not torch.allclose(eager1.float(), eager2.float())  # the two kernels differ on these inputs

    def program(*args):
        return m1.alias_k(*args), m2.alias_k(*args)

    recorder = GraphRecorder()
    got1, got2 = torch.compile(program, fullgraph=True, backend=recorder)(*args)
    assert torch.equal(got1, eager1) and torch.equal(got2, eager2)
    assert recorder.op_calls(m1._op) == 1 and recorder.op_calls(m2._op) == 1
