"""The torch entry of a Pallas training module is differentiable (issue 38, session 34; specgen/runtime/jax_torch.py):
with grad on and a tensor that requires grad (or under torch.compile) `<name>_torch` is the torch op
`specgen::<name>_torch_<hash>`, its backward a second op running jax.vjp of the module's JAX entry (its custom_vjp),
joined by torch.library.register_autograd. Here, on torch CPU tensors in Pallas's strict TPU interpreter: gradients
against float64 torch autograd of the reference (f32 specs: the TPU path has no float64) for a bias + GELU preact
layer with the weight held (N, K) as nn.Linear's, a recompute chain with a runtime scalar and mn-major operands, a
batched gated op with a frozen weight, M = 0; torch.autograd.gradcheck in float32 (eps 1e-2);
torch.compile(fullgraph=True) of a step with no graph break, equal to eager; an fp8 module's refusal of a gradient to
its scales; a module without training refusing as before; and the Mosaic GPU training module's ops (registered, their
fakes) on the CPU. JAX allocates every gradient (no caller buffer to poison with NaN); the strict interpreter reads
uninitialized VMEM and reads past an array's end as NaN, so an unwritten or unmasked element shows in the compare.
Shapes are few and small: each new shape, form or argument set compiles the interpreted programs again"""

from __future__ import annotations

import functools
import importlib

import pytest
import torch

from backends.pallas.common import render_module
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}
BIAS = {"op": "bias", "along": "n", "dtype": "f32", "name": "bias"}
# name: (epilogue, save, A's major, B's major, batch)
FORMS = {
    "ttg_bias_gelu_pre": ([BIAS, {"op": "activation", "fn": "gelu_tanh"}], "preact", "k", "k", False),
    "ttg_chain_rec_mn": ([{"op": "scale", "by": "scalar", "name": "alpha"}, {"op": "residual", "dtype": "f32", "name": "c"},
                          {"op": "activation", "fn": "sigmoid"}, {"op": "bias", "along": "m", "dtype": "f32", "name": "rb"}],
                         "recompute", "mn", "mn", False),
    "ttg_gated_batch_pre": ([{"op": "gated", "fn": "silu", "layout": "halves"}, BIAS], "preact", "k", "k", True),
}


def form_spec(name: str) -> dict:
    epilogue, save, a, b, batch = FORMS[name]
    return GemmSpec.model_validate({
        "name": name, "kind": "gemm", "batch": batch, "a": {"dtype": "f32", "major": a}, "b": {"dtype": "f32", "major": b},
        "out": {"dtype": "f32"}, "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        "tile": {"m": 128 if a == "mn" else 16, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e"],
    }).model_dump(mode="json")


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("torch_grad")
    return {name: render_module(form_spec(name), out) for name in FORMS}


def leaves(spec: dict, shape: tuple[int, ...], seed: int = 0) -> dict[str, torch.Tensor | float]:
    """The arguments as a model holds them (leaves in their stored layouts: a K-major weight (N, K)), float32 (a
    runtime scalar a float)."""
    *lead, M, N, K = shape
    g = torch.Generator().manual_seed(seed)
    bn = 2 * N if any(op["op"] == "gated" for op in spec["epilogue"]) else N
    out: dict[str, torch.Tensor | float] = {
        "a": torch.randn(*lead, M, K, generator=g) / K ** 0.5 if spec["a"]["major"] == "k" else torch.randn(*lead, K, M, generator=g) / K ** 0.5,
        "b": torch.randn(*lead, bn, K, generator=g) if spec["b"]["major"] == "k" else torch.randn(*lead, K, bn, generator=g),
    }
    for arg in GemmSpec.model_validate(spec).runtime_args():
        out[arg.name] = 0.75 if arg.shape == "scalar" else torch.randn(
            *{"vec_m": (M,), "vec_n": (N,), "matrix": (*lead, M, N)}[arg.shape], generator=g)
    return out


def logical(spec: dict, xs: dict) -> list:
    """The torch entry's arguments: A (..., M, K) and B (..., K, N) views of the stored leaves."""
    a, b, *rest = xs.values()
    return [a if spec["a"]["major"] == "k" else a.mT, b.mT if spec["b"]["major"] == "k" else b, *rest]


def reference(spec: dict, xs: dict, grad: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """float64 torch autograd of the reference epilogue (the spec's), gradients in the stored layouts."""
    ref = {k: v.detach().double().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in xs.items()}
    a, b, *_ = logical(spec, ref)
    out = REFERENCES["gemm"](spec["epilogue"], a, b, {k: v for k, v in ref.items() if k not in ("a", "b")})
    out.backward(grad.double())
    return out.detach(), {k: v.grad for k, v in ref.items() if isinstance(v, torch.Tensor)}


def close(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 1e-5) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert not got.isnan().any(), f"{what}: NaN"
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


def check(modules: dict, name: str, shape: tuple[int, ...], seed: int = 0) -> None:
    spec = form_spec(name)
    fn = functools.partial(getattr(modules[name], f"{name}_torch"), interpret=True)
    xs = {k: v.requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in leaves(spec, shape, seed).items()}
    out = fn(*logical(spec, xs))
    assert out.grad_fn is not None and "specgen_" in type(out.grad_fn).__name__
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1))
    out.backward(grad)
    want_out, want = reference(spec, xs, grad)
    close(out.detach(), want_out, "out")
    for k, w in want.items():
        close(xs[k].grad, w, f"d{k}")


def test_linear_layer_eager_compiled_and_gradcheck(modules: dict) -> None:
    """The weight held (N, K) as nn.Linear's, passed as w.t(): eager gradients equal float64 autograd's;
    torch.compile(fullgraph=True, aot_eager) of a step over the entry has no graph break and gives eager's gradients
    (the op and its backward op, their fakes traced); torch.autograd.gradcheck's finite differences in float32 (the
    spec dtypes have no float64, nor has the TPU path; eps 1e-2, fast mode). One shape throughout: one compile of the
    interpreted forward and backward programs. M = 0: an empty output, empty and zero gradients. The pullback's
    lifetime: the graph's."""
    from torch._dynamo.utils import counters

    name = "ttg_bias_gelu_pre"
    check(modules, name, (9, 45, 29))
    check(modules, name, (0, 45, 29))
    spec, fn = form_spec(name), functools.partial(getattr(modules[name], f"{name}_torch"), interpret=True)
    xs = leaves(spec, (9, 45, 29), seed=5)

    def step(a, w, bias):
        return (fn(a, w.t(), bias) * 0.5).square().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = [x.clone().requires_grad_() for x in xs.values()]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = [x.clone().requires_grad_() for x in xs.values()]
    step(*eager).backward()
    for got, want, k in zip(compiled, eager, xs, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-6, atol=1e-6, msg=f"d{k}")
    args = [x.detach().clone().requires_grad_() for x in xs.values()]
    assert torch.autograd.gradcheck(lambda a, w, bias: fn(a, w.t(), bias), args, eps=1e-2, atol=2e-2, rtol=2e-2,
                                    fast_mode=True)
    with torch.no_grad():
        assert fn(*logical(spec, {k: v for k, v in zip(xs, args, strict=True)})).grad_fn is None
    # the pullback (with pre) is kept while the graph that saves its handle lives: a backward kept with
    # retain_graph runs twice (the gradients accumulate), the graph's release drops it, as does an unused forward's
    from specgen.runtime import jax_torch

    before = len(jax_torch._PENDING)
    leaves_ = [x.detach().clone().requires_grad_() for x in xs.values()]
    out = fn(leaves_[0], leaves_[1].t(), leaves_[2])
    assert len(jax_torch._PENDING) == before + 1
    out.sum().backward(retain_graph=True)
    once = [x.grad.clone() for x in leaves_]
    out.sum().backward()
    for x, g in zip(leaves_, once, strict=True):
        torch.testing.assert_close(x.grad, 2 * g)
    del out
    assert len(jax_torch._PENDING) == before
    fn(leaves_[0], leaves_[1].t(), leaves_[2])  # not kept: its graph is freed at once
    assert len(jax_torch._PENDING) == before


def test_a_chain_with_a_scalar_and_mn_major_operands(modules: dict) -> None:
    """recompute; A (K, M) and B (K, N) stored: their gradients in those layouts; a runtime scalar (no gradient), a
    residual's and a row vector's gradients."""
    check(modules, "ttg_chain_rec_mn", (40, 40, 24))


def test_a_batched_gated_op_and_only_the_gradients_asked_for(modules: dict) -> None:
    """A batched SwiGLU + bias preact form (out's N half B's 2N; batch-leading A, B and dOut) with the weight frozen:
    a and the bias get float64's gradients, b none (the backward asks the JAX vjp for those two only)."""
    name = "ttg_gated_batch_pre"
    spec, fn = form_spec(name), functools.partial(getattr(modules[name], f"{name}_torch"), interpret=True)
    xs = leaves(spec, (2, 9, 45, 29), seed=3)
    xs["a"].requires_grad_()
    xs["bias"].requires_grad_()
    out = fn(*logical(spec, xs))
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    out.backward(grad)
    want_out, want = reference(spec, xs, grad)
    close(out.detach(), want_out, "out")
    assert xs["b"].grad is None
    close(xs["a"].grad, want["a"], "da")
    close(xs["bias"].grad, want["bias"], "dbias")


def test_fp8_scales_are_refused_a_gradient(tmp_path) -> None:
    """An fp8 module's torch entry refuses a gradient to its dequantization scales (and to its 8-bit operands: autograd
    would round their gradients to fp8), as the Triton and CuTe modules do (runtime/torch/training.py)."""
    from backends.pallas.test_training_tpu_fp8 import fp8_spec

    spec = fp8_spec("ttg", "bias", "preact")
    mod = render_module(spec, tmp_path)
    fn = getattr(mod, f"{spec['name']}_torch")
    g = torch.Generator().manual_seed(7)
    M, N, K = 9, 45, 29
    a = torch.randn(M, K, generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(N, K, generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M, generator=g) + 0.5, torch.rand(N, generator=g) + 0.5
    bias = torch.randn(N, generator=g).requires_grad_()
    with pytest.raises(RuntimeError, match=r"scale_a requires grad, but an fp8 forward's dequantization scales"):
        fn(a, w.t(), sa.clone().requires_grad_(), sb, bias)
    with pytest.raises(RuntimeError, match=r"tf8_ttg: a \(torch.float8_e4m3fn\) requires grad, .* jax.vjp of the JAX entry"):
        fn(a.float().requires_grad_().to(torch.float8_e4m3fn), w.t(), sa, sb, bias)


def test_a_module_without_training_still_refuses_grad() -> None:
    """The forward-only Pallas modules keep their refusal (tests/backends/pallas/test_autograd.py has each argument)."""
    from specgen.kinds.gemm.testing.autograd import grad_message

    mod = importlib.import_module("generated.pallas.gemm_bias_gelu_tpu")
    assert not hasattr(mod, "_torch_entry")
    a, b, bias = torch.randn(16, 128).requires_grad_(), torch.randn(128, 128), torch.randn(128)
    with pytest.raises(NotImplementedError, match=grad_message("gemm_bias_gelu_tpu", "a")):
        mod.gemm_bias_gelu_tpu_torch(a.bfloat16(), b.bfloat16(), bias.bfloat16(), interpret=True)


def test_mosaic_gpu_training_module_registers_its_op() -> None:
    """The Mosaic GPU training module's torch entry (no GPU here): its op and backward op are registered with fakes
    that give the output's and each gradient's shape, dtype and strides (what torch.compile traces); an eager call
    on the CPU raises Mosaic GPU's GPU requirement, naming the kernel. Numerics: tests/gpu/test_training_mgpu_gpu.py."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mod = importlib.import_module("generated.pallas.gpu_sm90.linear_gelu_train_mgpu")
    entry = mod._torch_entry()
    assert entry.op._qualified_op_name == f"specgen::linear_gelu_train_mgpu_torch_{mod.METADATA['spec_hash']}"
    assert entry.train_op._qualified_op_name == f"specgen::linear_gelu_train_mgpu_torch_train_{mod.METADATA['spec_hash']}"
    w = torch.randn(200, 72, dtype=torch.bfloat16)
    a, bias = torch.randn(37, 72, dtype=torch.bfloat16).requires_grad_(), torch.randn(200, dtype=torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        out, handle = entry.train_op(a, w.t(), bias, 0b011, 0)
        assert entry.op(a, w.t(), bias, 0).shape == out.shape
        da, db, dbias = entry.backward_op(out, handle, a, w.t(), bias, True, True, False, 0b011, 0)
    assert (out.shape, out.dtype, handle.shape, handle.dtype) == ((37, 200), torch.bfloat16, (), torch.int64)
    assert (da.shape, da.stride(), db.shape, db.stride(), dbias.shape) == ((37, 72), (72, 1), (72, 200), (1, 72), (0,))
    with pytest.raises(RuntimeError, match="linear_gelu_train_mgpu: Mosaic GPU kernels run on an sm90 CUDA device"):
        mod.linear_gelu_train_mgpu_torch(a, w.t(), bias)
