"""The Triton modules' torch entry and autograd, under the CPU interpreter: the ops have no backward yet, so
a tensor that requires grad while grad mode is on is refused before anything launches (eagerly, through
the custom op, and under torch.compile), naming the op and the argument; under torch.no_grad(),
torch.inference_mode() or on detached tensors the call runs as before (numerics against float64) and a
weight that requires grad keeps the one-boolean fast path. Also the interpreter's bf16 refusal: Triton's
CPU interpreter multiplies bf16 tiles as their raw bits, so a module with bf16 operands refuses to run
under it, while bf16 outputs and epilogue operands, f16, f32 and fp8 operands run and are right."""

from __future__ import annotations

import importlib
import re

import pytest
import torch
from kernels import catalogue, interpreter_variant

from backends.triton.variants import KERNELS, guard_call
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.autograd import grad_message
from specgen.kinds.gemm.testing.guards import Call, Tripwire
from specgen.kinds.gemm.testing.reference import REFERENCES, TORCH_DTYPES

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

TOL = {"atol": 4e-3, "rtol": 4e-3}  # f16 outputs of O(1) values (specgen/kinds/gemm/testing/data.py)


def tensors(call: Call) -> list[str]:
    return [n for n, v in call.args.items() if isinstance(v, torch.Tensor)]


def want(call: Call) -> torch.Tensor:
    args = {n: v.detach() if isinstance(v, torch.Tensor) else v for n, v in call.args.items()}
    return REFERENCES[call.spec["kind"]](call.spec["epilogue"], args.pop("a"), args.pop("b"), args)


CASES = [(k, arg) for k in KERNELS for arg in ("a", "b", *[a.name for a in GemmSpec.model_validate(KERNELS[k]).runtime_args()
                                                       if a.shape != "scalar"])]


@pytest.mark.parametrize(("kernel", "arg"), CASES, ids=[f"{k}-{a}" for k, a in CASES])
def test_requires_grad_is_refused_before_launch(kernel: str, arg: str, load_kernel, monkeypatch) -> None:
    call = guard_call(kernel, load_kernel)
    call.args[arg].requires_grad_()
    monkeypatch.setattr(call.module, "_launcher", Tripwire())
    with pytest.raises(NotImplementedError, match=grad_message(call.name, arg)) as info:
        call()
    assert "torch.no_grad()" in str(info.value) and f"{arg}.detach()" in str(info.value)
    assert call.out.isnan().all(), "the output was written"
    with pytest.raises(NotImplementedError, match=grad_message(call.name, arg)):  # the custom op's eager call
        call.module._op(*call.args.values())
    with pytest.raises(NotImplementedError, match=grad_message(call.name, arg)):  # its fake, under compile
        call.module._fake(*call.args.values())


def test_torch_func_grad_is_refused(load_kernel) -> None:
    """torch.func.grad's tensors require grad (and hold no storage: the refusal comes before data_ptr())."""
    call = guard_call("relu", load_kernel)
    b = call.args["b"]
    with pytest.raises(NotImplementedError, match=grad_message(call.name, "a")):
        torch.func.grad(lambda a: call.fn(a, b).float().sum())(call.args["a"])


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("how", ["no_grad", "inference_mode", "detach"])
def test_without_grad_the_call_runs(kernel: str, how: str, load_kernel) -> None:
    """Every tensor argument requires grad (a model's parameters): under no_grad / inference_mode, or
    detached, the call runs and matches the float64 reference."""
    call = guard_call(kernel, load_kernel)
    for n in tensors(call):
        call.args[n].requires_grad_()
    if how == "detach":
        call.args = {n: v.detach() if isinstance(v, torch.Tensor) else v for n, v in call.args.items()}
        result = call()
    else:
        with torch.no_grad() if how == "no_grad" else torch.inference_mode():
            result = call()
    assert result is call.out and not result.requires_grad
    torch.testing.assert_close(result.double(), want(call), **TOL)


@pytest.mark.parametrize("kernel", ["relu", "tma"])
def test_weight_that_requires_grad_keeps_the_fast_path_under_no_grad(kernel: str, load_kernel, monkeypatch) -> None:
    """Inference with parameters (requires_grad=True) under torch.no_grad(): `_check`'s one boolean holds,
    nothing goes to `_validate` (the slow path that raises or stages)."""
    call = guard_call(kernel, load_kernel)
    call.args["b"].requires_grad_()

    def slow(*_: object) -> None:
        raise AssertionError("_validate was called")

    monkeypatch.setattr(call.module, "_validate", slow)
    with torch.no_grad():
        assert call.module._check(*call.args.values(), call.out)[0] == -1
        assert call.module._check(*call.args.values(), None)[0] == -1
    with pytest.raises(AssertionError, match="_validate was called"):  # grad mode on: the slow path refuses
        call.module._check(*call.args.values(), call.out)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("fresh_dynamo")
def test_torch_compile_refuses_requires_grad(load_kernel) -> None:
    """Under torch.compile the entry refuses before the custom op: with a graph break allowed, the frame
    runs eagerly and raises the same error; with fullgraph=True Dynamo reports the refusal it traced."""
    call = guard_call("tma", load_kernel)
    fn = call.fn
    a = call.args["a"].clone().requires_grad_()
    rest = [v for n, v in call.args.items() if n != "a"]
    with pytest.raises(NotImplementedError, match=grad_message(call.name, "a")):
        torch.compile(lambda *xs: fn(*xs) + 0, backend="aot_eager")(a, *rest)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=grad_message(call.name, "a")):
        torch.compile(lambda *xs: fn(*xs) + 0, fullgraph=True, backend="aot_eager")(a, *rest)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=grad_message(call.name, "a")):  # the op called directly: its fake refuses
        torch.compile(lambda *xs: call.module._op(*xs) + 0, fullgraph=True, backend="aot_eager")(a, *rest)


@pytest.mark.usefixtures("fresh_dynamo")
def test_torch_compile_without_grad_runs(load_kernel) -> None:
    call = guard_call("tma", load_kernel)
    fn = call.fn
    a = call.args["a"].clone().requires_grad_()
    rest = [v for n, v in call.args.items() if n != "a"]
    compiled = torch.compile(lambda *xs: fn(*xs) + 0, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        got = compiled(a, *rest)
    torch.testing.assert_close(got.double(), want(call), **TOL)
    torch.testing.assert_close(compiled(a.detach(), *rest).double(), want(call), **TOL)


# ---- bf16 under the interpreter ------------------------------------------------------------------

TILE = {"m": 16, "n": 32, "k": 32}
M, N, K = 24, 48, 64


def dtype_variant(name: str, a: str, b: str, out: str, bias: str | None = None) -> dict:
    base = "gemm_bias_gelu_bf16" if bias else "gemm_bf16"
    spec = interpreter_variant(catalogue()[base], name=name, tile=dict(TILE), variants=[])
    spec.pop("per_target", None)
    spec["a"]["dtype"], spec["b"]["dtype"], spec["out"]["dtype"] = a, b, out
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            op["dtype"] = bias
    return GemmSpec.model_validate(spec).model_dump(mode="json")


def operands(spec: dict) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(M, K, generator=g) / K**0.5).to(TORCH_DTYPES[spec["a"]["dtype"]])
    b = torch.randn(K, N, generator=g).to(TORCH_DTYPES[spec["b"]["dtype"]])
    if spec["a"]["major"] == "mn":
        a = a.t().contiguous().t()
    if spec["b"]["major"] == "k":
        b = b.t().contiguous().t()
    args = [a, b]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(torch.randn(N, generator=g).to(TORCH_DTYPES[op["dtype"]]))
    return args


BF16_OPERANDS = [("bf16", "bf16", "bf16"), ("bf16", "bf16", "f32"), ("bf16", "bf16", "f16")]


@pytest.mark.parametrize(("a", "b", "out"), BF16_OPERANDS, ids=["-".join(c) for c in BF16_OPERANDS])
def test_bf16_operands_are_refused_under_the_interpreter(a: str, b: str, out: str, load_kernel) -> None:
    """The launcher refuses before the interpreter runs (the poisoned output stays NaN); the guards still
    accept the call (they are tested on the catalogue's bf16 modules under the interpreter)."""
    spec = dtype_variant(f"interp_{a}_{b}_{out}", a, b, out)
    module = load_kernel(spec)
    result = torch.full((M, N), float("nan"), dtype=TORCH_DTYPES[out])
    message = re.escape(f"{spec['name']}: Triton's CPU interpreter (TRITON_INTERPRET=1) computes bf16 dot products wrongly")
    with pytest.raises(NotImplementedError, match=message):
        getattr(module, spec["name"])(*operands(spec), out=result)
    assert result.isnan().all()
    with pytest.raises(NotImplementedError, match=message):  # the custom op (torch.compile's path) launches alike
        module._op(*operands(spec))


def test_the_catalogue_bf16_module_refuses_under_the_interpreter() -> None:
    module = importlib.import_module("generated.triton.gemm_bf16")
    a, b = torch.randn(32, 64).bfloat16(), torch.randn(64, 32).bfloat16().t().contiguous().t()
    with pytest.raises(NotImplementedError, match=r"^gemm_bf16: Triton's CPU interpreter .* run it on a GPU"):
        module.gemm_bf16(a, b)


# What the interpreter gets right (the refusal leaves them alone): bf16 stores (rounded toward zero, within one
# bf16 ulp) and loads of bf16 epilogue operands, f16, f32 and fp8 operands (converted to f16 before its dot).
RIGHT = [("f16", "f16", "bf16", None), ("f32", "f32", "bf16", None), ("f16", "f16", "bf16", "bf16"),
         ("fp8_e4m3", "fp8_e4m3", "f16", None), ("fp8_e5m2", "fp8_e5m2", "f32", None)]


@pytest.mark.parametrize(("a", "b", "out", "bias"), RIGHT, ids=["-".join(filter(None, c)) for c in RIGHT])
def test_other_dtypes_run_right_under_the_interpreter(a: str, b: str, out: str, bias: str | None, load_kernel) -> None:
    spec = dtype_variant(f"interp_ok_{a}_{b}_{out}_{bias}", a, b, out, bias)
    args = operands(spec)
    got = getattr(load_kernel(spec), spec["name"])(*args)
    kwargs = {op["name"]: args[2] for op in spec["epilogue"] if op["op"] == "bias"}
    ref = REFERENCES["gemm"](spec["epilogue"], args[0], args[1], kwargs)
    tol = {"bf16": 1e-2, "f16": 4e-3, "f32": 2e-5}[out]
    torch.testing.assert_close(got.double(), ref, atol=tol, rtol=tol)
