"""Training with `batch = true` on the Triton dense design, under the CPU interpreter: A (batch, M, K), B (batch, K, N)
(every batch its own B: the spec language has no broadcast B), out (batch, M, N). The backward's GEMMs run per batch
(dA[i] = G[i] @ B[i]^T, dB[i] = A[i]^T @ G[i]), a vector's gradient sums over the batches and rows in a fixed order
(no atomics), the streaming passes take the batch as their grid's third axis. Gradients against float64 autograd of
the reference with NaN-poisoned buffers, odd shapes (M, N, K off the 32 x 32 x 16 tile, M = 1, K = 1, batch 1 and 3),
each GEMM's TMA form (3-D descriptors) on aligned operands and its pointer form on odd ones, the other chains
(a residual per batch, a bias along m and a column scale shared by the batches), a gated epilogue, an fp8 forward,
gradcheck (f32: the spec dtypes have no float64) and torch.compile(fullgraph=True) of a training step."""

from __future__ import annotations

import pytest
import torch

from backends.triton.test_training import close, forms_launched
from specgen.kinds.gemm.testing.reference import REFERENCES

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Input #. requires gradient and is not a double:UserWarning")]

CHAINS = {
    "bias_gelu_tanh": [{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}],
    # a bias along m and a column scale shared by the batches (their gradients sum over them), a residual per batch
    "chain": [{"op": "bias", "along": "m", "name": "bm"}, {"op": "residual", "dtype": "f32"},
              {"op": "scale", "by": "col", "name": "cs"}, {"op": "activation", "fn": "silu"}],
    "gated": [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias"}],
    "interleaved": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias"}],
}


def batch_spec(chain: str, save: str, dtype: str = "f32") -> dict:
    return {
        "name": f"train_batch_{chain}_{save}_{dtype}", "kind": "gemm", "batch": True,
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": "k"}, "out": {"dtype": dtype},
        "epilogue": CHAINS[chain], "training": {"save": save},
        "tile": {"m": 32, "n": 32, "k": 16}, "triton": {"num_warps": 4}, "targets": ["triton:sm90"],
    }


def inputs(spec: dict, shape: tuple[int, int, int, int], seed: int) -> dict[str, torch.Tensor]:
    """a (batch, M, K); b (batch, K, N) K-major (each batch an nn.Linear weight's w.t()); the epilogue's tensors."""
    batch, M, N, K = shape
    gen = torch.Generator().manual_seed(seed)
    dt = {"f32": torch.float32, "f16": torch.float16}[spec["a"]["dtype"]]
    cols = 2 * N if spec["epilogue"][0]["op"] == "gated" else N
    args = {"a": torch.randn(batch, M, K, generator=gen).to(dt), "b": torch.randn(batch, cols, K, generator=gen).to(dt).mT}
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args[op.get("name", "bias")] = torch.randn(M if op.get("along") == "m" else N, generator=gen)
        elif op["op"] == "residual":
            args["c"] = torch.randn(batch, M, N, generator=gen)
        elif op["op"] == "scale":
            args[op["name"]] = torch.rand(N, generator=gen) + 0.5
    return args


def reference(spec: dict, args: dict[str, torch.Tensor], grad: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The float64 reference's output and gradients (autograd in float64, batched matmul) for `grad`."""
    leaves = {n: t.detach().double().requires_grad_() for n, t in args.items()}
    rest = {n: t for n, t in leaves.items() if n not in ("a", "b")}
    defaults = {"bias": {"name": "bias", "along": "n"}, "residual": {"name": "c", "beta": 1.0}, "scale": {"value": None}}
    epilogue = [{**defaults.get(op["op"], {}), **op} for op in spec["epilogue"]]
    out = REFERENCES["gemm"](epilogue, leaves["a"], leaves["b"], rest)
    out.backward(grad.double())
    return out.detach(), {n: t.grad for n, t in leaves.items()}


def check(mod, spec: dict, args: dict, grad: torch.Tensor, rel: float = 1e-5, poison: bool = True) -> None:
    """Through autograd, then (`poison`) `_backward` into NaN-poisoned buffers: every gradient as float64's, every
    element written, each in its argument's shape and layout."""
    fn = getattr(mod, spec["name"])
    leaves = {n: t.detach().clone().requires_grad_() for n, t in args.items()}
    out = fn(*leaves.values())
    assert out.grad_fn is not None and out.shape == grad.shape
    out.backward(grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, rel, "out")
    for n, t in leaves.items():
        close(t.grad, want[n], rel, f"d{n}")
        assert t.grad.stride() == args[n].stride() or t.grad.is_contiguous(), n
    if not poison:
        return
    pre = mod._forward_pre(*args.values())[1] if spec["training"]["save"] == "preact" else None
    poisoned = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items() if n != "scale"}
    got = mod._backward(grad, *args.values(), pre, **poisoned)
    for g, n in zip(got, args, strict=True):
        assert g is poisoned[f"d{n}"] and not g.isnan().any(), f"d{n}: an element was not written"
        close(g, want[n], rel, f"d{n} (poisoned)")


ODD = (3, 37, 45, 29)  # batch, M, N, K: none a multiple of the tile; f32 rows of 29 and 45: the pointer forms
ALIGNED = (3, 40, 56, 40)  # every row and batch a multiple of 16 bytes: the TMA forms (3-D descriptors)
SMALL = (3, 20, 24, 17)  # one tile a batch, a tail in M, N and K
SHAPES = [(1, 1, 45, 29), (3, 37, 45, 1), (1, 40, 56, 40)]  # batch 1 at M = 1; K = 1; batch 1 aligned (TMA)


@pytest.mark.parametrize("save", ["preact", "recompute"])
def test_batched_gradients_equal_float64_autograd(save: str, load_kernel, monkeypatch) -> None:
    """[bias, gelu_tanh] per batch at odd shapes (batch 1 and 3, M = 1, K = 1), the pointer forms; aligned, every GEMM's
    TMA form with dB (K-major: w.t()) stored transposed through TMA."""
    spec = batch_spec("bias_gelu_tanh", save)
    mod = load_kernel(spec)
    for i, shape in enumerate(SHAPES if save == "preact" else ()):
        grad = torch.randn(shape[0], shape[1], shape[2], generator=torch.Generator().manual_seed(100 + i))
        check(mod, spec, inputs(spec, shape, seed=i), grad, poison=False)
    stores: list = []
    launched = forms_launched(mod, monkeypatch, stores)
    args = inputs(spec, ALIGNED, seed=7)
    check(mod, spec, args, torch.randn(*ALIGNED[:3], generator=torch.Generator().manual_seed(8)))
    first = "forward_pre" if save == "preact" else "recompute"
    # G and the batches' partial column sums, then their sum in order (batch, then band)
    assert launched[:5] == [(first, "tma"), ("grad_cols", ""), ("grad_cols", ""), ("dgrad", "tma"), ("wgrad", "tma")], launched
    assert stores[:2] == [("dgrad", True, False), ("wgrad", True, True)], stores
    launched.clear()
    odd = ODD if save == "preact" else SMALL
    check(mod, spec, inputs(spec, odd, seed=9), torch.randn(*odd[:3], generator=torch.Generator().manual_seed(10)))
    assert ("dgrad", "pointer") in launched and ("wgrad", "pointer") in launched, launched


def test_batched_chain_in_row_bands(load_kernel, monkeypatch) -> None:
    """A bias along m and a column scale shared by the batches (row and column sums over every batch's f32 partials,
    added in order), a residual per batch (its gradient per batch), silu; the chain pass in row bands."""
    from specgen.runtime.triton import training as runtime

    spec = batch_spec("chain", "preact")
    mod = load_kernel(spec)
    check(mod, spec, inputs(spec, ALIGNED, seed=11), torch.randn(*ALIGNED[:3], generator=torch.Generator().manual_seed(12)))
    monkeypatch.setattr(runtime, "BAND_MIN_ROWS", 8)
    monkeypatch.setitem(mod.CHAIN_COLS, "BLOCK_M", 8)
    assert runtime.row_bands(SMALL[1], 3, 8, -1) == (2, 16)  # 20 rows a batch: bands of 16 and 4, 3 batches
    grad = torch.randn(*SMALL[:3], generator=torch.Generator().manual_seed(13))
    check(mod, spec, inputs(spec, SMALL, seed=15), grad)


@pytest.mark.parametrize(("layout", "save"), [("gated", "preact"), ("interleaved", "recompute")])
def test_batched_gated_f16(layout: str, save: str, load_kernel, monkeypatch) -> None:
    """SwiGLU (halves) and GeGLU-tanh (interleaved) then a bias, f16: G (batch, M, 2N) per batch, dbias dOut's column
    sum over every batch; aligned (the TMA forms: a gate and an up box of one batch, or one 2 BLOCK_Q wide) and odd."""
    spec = batch_spec(layout, save, "f16")
    mod = load_kernel(spec)
    launched = forms_launched(mod, monkeypatch)
    for i, shape in enumerate([ALIGNED, SMALL]):
        grad = torch.randn(*shape[:3], generator=torch.Generator().manual_seed(20 + i)).half()
        check(mod, spec, inputs(spec, shape, seed=22 + i), grad, rel=1e-2, poison=i == 0)
        forms = {form for role, form in launched if role in ("dgrad", "wgrad") or (i == 0 and role != "grad_cols")}
        assert forms == ({"tma"} if i == 0 else {"pointer"}), launched  # odd: B's rows of 17 f16 (34 bytes)
        launched.clear()


def test_batched_fp8_forward(load_kernel) -> None:
    """An fp8 forward (e4m3, rowwise scales shared by the batches) with a batch: dA and dB (f16) are the dequantized
    operands' gradients per batch, dbias sums over the batches; the scales get none."""
    spec = {**batch_spec("bias_gelu_tanh", "recompute", "f16"), "name": "train_batch_fp8",
            "a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias"}, {"op": "activation", "fn": "gelu"}],
            "tile": {"m": 32, "n": 32, "k": 32}}
    mod = load_kernel(spec)
    batch, M, N, K = 3, 37, 48, 32
    gen = torch.Generator().manual_seed(30)
    a = torch.randn(batch, M, K, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(batch, N, K, generator=gen).to(torch.float8_e4m3fn).mT
    sa, sb, bias = torch.rand(M, generator=gen) + 0.5, torch.rand(N, generator=gen) + 0.5, torch.randn(N, generator=gen)
    grad = torch.randn(batch, M, N, generator=gen).half()
    poisoned = {"da": torch.full((batch, M, K), float("nan"), dtype=torch.half),
                "db": torch.full((batch, N, K), float("nan"), dtype=torch.half).mT, "dbias": torch.full((N,), float("nan"))}
    da, db, _, _, dbias = mod._backward(grad, a, b, sa, sb, bias, None, **poisoned)
    leaves = [(a.double() * sa.double()[:, None]).requires_grad_(), (b.double() * sb.double()[None, :]).requires_grad_(),
              bias.double().requires_grad_()]
    torch.nn.functional.gelu(leaves[0] @ leaves[1] + leaves[2]).backward(grad.double())
    for got, want, name in zip((da, db, dbias), leaves, ("da", "db", "dbias"), strict=True):
        assert not got.isnan().any(), name
        close(got, want.grad, 1e-2, name)


def test_batched_gradcheck_and_compiled_step(load_kernel) -> None:
    """gradcheck's finite differences over a, b and the bias (f32); torch.compile(fullgraph=True, aot_eager) of a
    training step with no graph break (the batched fakes' shapes), gradients equal eager's."""
    from torch._dynamo.utils import counters

    spec = batch_spec("bias_gelu_tanh", "preact")
    fn = getattr(load_kernel(spec), spec["name"])
    args = [t.detach().clone().requires_grad_() for t in inputs(spec, (2, 3, 4, 2), seed=40).values()]
    assert torch.autograd.gradcheck(fn, args, eps=1e-2, atol=2e-2, rtol=2e-2, nondet_tol=1e-6, fast_mode=True)

    def step(a, b, bias):
        return (fn(a, b, bias) * 0.5).square().sum()

    torch._dynamo.reset()
    counters.clear()
    args = inputs(spec, (2, 5, 6, 3), seed=41)
    leaves = [t.detach().clone().requires_grad_() for t in args.values()]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*leaves).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = [t.detach().clone().requires_grad_() for t in args.values()]
    step(*eager).backward()
    for got, want, name in zip(leaves, eager, args, strict=True):
        close(got.grad, want.grad.double(), 1e-6, f"d{name}")


def test_batched_backward_checks_the_output_gradient(load_kernel) -> None:
    spec = batch_spec("bias_gelu_tanh", "recompute")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=50)
    with pytest.raises(ValueError, match=r"gradient must have shape \(3, 37, 45\) \(the output's\), got \(37, 45\)"):
        mod._backward(torch.zeros(37, 45), *args.values(), None)


def test_tma_reads_a_batch_where_its_strides_allow() -> None:
    """A batch of matrices gets a 3-D descriptor with boxes of one batch where every batch stride is a multiple of 16
    bytes and the batches do not overlap; a batch of 1 any batch stride (never stepped); autograd's broadcast gradient
    of a sum (batch stride 0) none: the pointer form reads it."""
    from specgen.runtime.triton.training import tma_operand

    x = torch.zeros(3, 40, 56)
    (desc, flipped) = tma_operand(x, 32, 16)
    assert not flipped and desc.block_shape == [1, 32, 16] and desc.strides == [40 * 56, 56, 1]
    (desc, flipped) = tma_operand(x.mT, 16, 32)  # column-major: boxes of the transpose
    assert flipped and desc.block_shape == [1, 32, 16] and desc.shape == [3, 40, 56]
    one = torch.zeros(1, 40, 56).as_strided((1, 40, 56), (7, 56, 1))  # a batch stride of 28 bytes
    assert tma_operand(one, 32, 16)[0].strides == [40 * 56, 56, 1]
    assert tma_operand(torch.zeros(1, 1, 1).expand(3, 40, 56), 32, 16) is None
    assert tma_operand(torch.zeros(3, 40, 56)[:, :, :55], 32, 16) is not None
    # a store into rows of 55 f32 (220 bytes) in wider strides: no (it would write the row's last 16 bytes whole)
    assert tma_operand(torch.zeros(3, 40, 56)[:, :, :55], 32, 16, store=True) is None
    assert tma_operand(torch.zeros(3 * 40 * 56 + 1)[1:].view(3, 40, 56), 32, 16) is None  # a base off 16 bytes


def test_a_batched_launch_indexes_each_matrix_in_32_bits() -> None:
    """The pointer kernels index within one matrix in 32 bits and step the batches by int64 offsets: a batch of 128
    matrices of 8192 x 4096 (2**32 elements in all) is launched, one matrix past 2**31 elements is refused."""
    from specgen.runtime.triton.training import INT32_SPAN, _span

    batched = torch.empty((128, 8192, 4096), device="meta")
    assert _span(batched) >= INT32_SPAN > _span(batched, per_matrix=True)
    assert _span(torch.empty((1, 65536, 65536), device="meta"), per_matrix=True) >= INT32_SPAN
