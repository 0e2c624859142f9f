"""The CuTe modules and autograd on this CPU machine (forward-only kernels; a spec with a `training` section has a
backward on cute:sm90, whose numerics run on the GPU: tests/gpu/test_training_cute_gpu.py). The torch entry of a
forward-only kernel refuses a tensor that requires grad in grad mode before
its device check (so on CPU tensors too), naming the op and the argument; its TVM-FFI fast path (`_lean`:
the compiled function checks the rest, not requires_grad) declines such a call, and keeps a weight that
requires grad under torch.no_grad(); the custom op's fake refuses it under torch.compile. The JAX entry
(and its torch door) refuses derivatives when traced, naming the op and the arguments, where the
primitive had no rule (jax's bare "Differentiation rule for 'specgen_cute_call' not implemented")."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import torch

from specgen.compile import load_rendered
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.autograd import FakeCuda, derivative_message, grad_message
from specgen.kinds.gemm.testing.reference import TORCH_DTYPES
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "generated" / "cute"
# the dense kind's CuTe modules (the grouped kind's have their own tests: tests/grouped/test_cute_sm90.py)
GROUPED = {ls.name for ls in load_paths([ROOT / "specs"]) if ls.spec.kind != "gemm"}
NAMES = sorted(p.stem for p in GENERATED.glob("*.py")
               if p.stem != "__init__" and p.stem.removesuffix("_sm100") not in GROUPED)  # sm100 modules: <name>_sm100
# kernels with a backward (spec: training): their torch entry takes grad, their JAX entry is a jax.custom_vjp
# (tests/backends/cute/test_cute_training.py)
TRAINING = {ls.name for ls in load_paths([ROOT / "specs"]) if getattr(ls.spec, "training", None) is not None}
M, N, K = 64, 128, 64


@pytest.fixture(scope="module")
def modules() -> dict:
    return {n: load_rendered(GENERATED / f"{n}.py", f"_specgen_cute_autograd_test_{n}") for n in NAMES}


def torch_args(module, cls=lambda t: t) -> dict[str, object]:
    """Valid arguments in the torch entry's logical shapes (CPU tensors, each passed through `cls`)."""
    s = GemmSpec.model_validate(module.SPEC)
    lead = (3,) if s.batch else ()
    a = torch.randn(*lead, M, K).to(TORCH_DTYPES[s.a.dtype.value])
    b = torch.randn(*lead, N, K).to(TORCH_DTYPES[s.b.dtype.value]).transpose(-1, -2)
    args: dict[str, object] = {
        "a": a if s.a.major == "k" else a.transpose(-1, -2).contiguous().transpose(-1, -2),
        "b": b if s.b.major == "k" else b.contiguous(),
    }
    for arg in s.runtime_args():
        shape = {"vec_m": (M,), "vec_n": (N,), "matrix": (*lead, M, N)}.get(arg.shape)
        args[arg.name] = 0.5 if shape is None else torch.rand(shape).to(TORCH_DTYPES[arg.dtype.value])
    return {n: cls(v) if isinstance(v, torch.Tensor) else v for n, v in args.items()}


def kernel(module) -> str:
    return module.METADATA["kernel"]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in TRAINING])
def test_torch_entry_refuses_requires_grad(modules, name: str) -> None:
    """Each tensor argument in turn requires grad: refused, naming it, by the entry and the op's fake."""
    module = modules[name]
    fn = getattr(module, kernel(module))
    for arg, value in torch_args(module).items():
        if not isinstance(value, torch.Tensor):
            continue
        args = torch_args(module)
        args[arg].requires_grad_()
        with pytest.raises(NotImplementedError, match=grad_message(kernel(module), arg)):
            fn(*args.values())
        with pytest.raises(NotImplementedError, match=grad_message(kernel(module), arg)):
            module._fake(*args.values())
        with torch.no_grad():  # past the refusal: the device check (these are CPU tensors)
            with pytest.raises(ValueError, match=r"must be on a CUDA device"):
                fn(*args.values())
            assert module._fake(*args.values()).shape[-2:] == (M, N)


@pytest.mark.parametrize("name", ["gemm_fp8_rowwise", "gemm_residual_bf16", "bmm_bf16_sm100"])
def test_lean_fast_path_declines_requires_grad_in_grad_mode(modules, name: str) -> None:
    """`_lean` on stand-ins for CUDA tensors: None (then `_check` / `_validate`, which raise) when one
    requires grad in grad mode; the staged call otherwise, under torch.no_grad() too."""
    module = modules[name]
    args = torch_args(module, FakeCuda)
    assert module._lean(*args.values(), None) is not None
    tensors = [n for n, v in args.items() if isinstance(v, FakeCuda)]
    for n in tensors:
        args[n].t.requires_grad_()
        assert module._lean(*args.values(), None) is None, n
        with torch.no_grad():
            assert module._lean(*args.values(), None)[0] == 0, n
        args[n].t.requires_grad_(False)


def test_torch_compile_refuses_requires_grad(modules) -> None:
    """Under torch.compile (a graph break allowed) the traced refusal sends the frame to eager, which raises."""
    module = modules["gemm_bias_gelu_bf16"]
    args = torch_args(module)
    args["bias"].requires_grad_()
    torch._dynamo.reset()
    try:
        with pytest.raises(NotImplementedError, match=grad_message("gemm_bias_gelu_bf16", "bias")):
            torch.compile(lambda *xs: module.gemm_bias_gelu_bf16(*xs) + 0, backend="eager")(*args.values())
    finally:
        torch._dynamo.reset()


def jax_args(module) -> tuple[list[str], list]:
    """The JAX entry's arguments in its stored layouts (abstract; scalars as Python floats)."""
    e = module._jax_entry()
    lead = (3,) if e.batch else ()
    shapes = {"a": lead + ((M, K) if e.a_major == "k" else (K, M)), "b": lead + ((N, K) if e.b_major == "k" else (K, N)),
              "vec_m": (M,), "vec_n": (N,), "matrix": lead + (M, N)}
    return ([o.name for o in e.operands],
            [0.5 if o.role == "scalar" else jax.ShapeDtypeStruct(shapes[o.role], o.jnp_dtype) for o in e.operands])


@pytest.mark.parametrize("name", [n for n in NAMES if not n.endswith("_sm100") and n not in TRAINING])
def test_jax_entry_derivatives_raise_naming_the_op(modules, name: str) -> None:
    module = modules[name]
    fn = getattr(module, f"{kernel(module)}_jax")
    names, values = jax_args(module)
    arrays = [i for i, v in enumerate(values) if not isinstance(v, float)]

    def call(*xs):
        full = list(values)
        for i, x in zip(arrays, xs, strict=True):
            full[i] = x
        return fn(*full)

    structs = [values[i] for i in arrays]
    out = jax.eval_shape(call, *structs)  # the forward traces as before
    assert out.shape[-2:] == (M, N)
    every = derivative_message(kernel(module), *[names[i] for i in arrays])
    with pytest.raises(NotImplementedError, match=every):
        jax.make_jaxpr(jax.grad(lambda *xs: call(*xs).astype(jnp.float32).sum(), argnums=tuple(range(len(arrays)))))(
            *structs)
    with pytest.raises(NotImplementedError, match=derivative_message(kernel(module), "b")):
        jax.make_jaxpr(lambda *xs: jax.jvp(lambda x: call(xs[0], x, *xs[2:]), (xs[1],), (xs[1],)))(*structs)
    jax.make_jaxpr(jax.grad(lambda a, *r: call(jax.lax.stop_gradient(a), *r).astype(jnp.float32).sum()
                            + a.astype(jnp.float32).sum()))(*structs)


def test_jax_torch_door_refuses_requires_grad(modules) -> None:
    """`<name>_jax_torch` (DLPack to the JAX entry): refused naming the argument in grad mode; under
    torch.no_grad() the tensor is shared (DLPack could not export it before) and the call gets as far as the
    CPU lowering, which CuTe refuses."""
    module = modules["gemm_bias_gelu_bf16"]
    args = torch_args(module)
    args["b"].requires_grad_()
    with pytest.raises(NotImplementedError, match=grad_message("gemm_bias_gelu_bf16", "b")):
        module.gemm_bias_gelu_bf16_jax_torch(*args.values())
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"CuTe kernels run on a CUDA sm_90a device"):
        module.gemm_bias_gelu_bf16_jax_torch(*args.values())
