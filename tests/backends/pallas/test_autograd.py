"""The Pallas modules (TPU in the CPU interpreter; Mosaic GPU traced without a GPU) have no derivative rule
yet: jax.grad, jax.vjp, jax.jvp and jax.linearize through them raise when traced, naming the op and the
arguments being differentiated (pallas_call's own JVP rule failed on them with a bare AssertionError),
while the forward, jax.jit and arguments under jax.lax.stop_gradient work as before. Their torch entries
refuse a tensor that requires grad in grad mode, and run (DLPack could not export one before) under
torch.no_grad() or on detached tensors."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import CATALOGUE, TPU_CATALOGUE, Data, reference, tolerance
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.autograd import FakeCuda, derivative_message, grad_message

# (a spec with `training` is differentiable: backends/pallas/test_training_tpu.py, test_training_mgpu.py)
TPU = sorted(name for name, spec in TPU_CATALOGUE.items() if not spec.get("training"))
MGPU = sorted(name for name, spec in CATALOGUE.items() if "pallas:gpu_sm90" in spec["targets"] and not spec.get("training"))


def tpu(name: str):
    return importlib.import_module(f"generated.pallas.{name}")


def mgpu(name: str):
    return importlib.import_module(f"generated.pallas.gpu_sm90.{name}")


def arrays(spec: dict, m: int = 16, n: int = 128, k: int = 128) -> tuple[list[str], list]:
    """The call's argument names and values (stored layouts; scalars as Python floats)."""
    data = Data(spec, m, n, k, tag="autograd")
    a, b = data.operands()
    extra = data.epilogue_args()
    return ["a", "b", *[name for name, _ in extra]], [a, b, *[value for _, value in extra]]


def differentiable(names: list[str], values: list) -> list[int]:
    return [i for i, v in enumerate(values) if not isinstance(v, float) and jnp.issubdtype(v.dtype, jnp.floating)]


def loss_of(fn, values: list, wrt: list[int]):
    """A scalar function of the arguments at `wrt` (the others fixed)."""
    def loss(*xs):
        full = list(values)
        for i, x in zip(wrt, xs, strict=True):
            full[i] = x
        return fn(*full).astype(jnp.float32).sum()
    return loss


@pytest.mark.parametrize("name", TPU)
def test_tpu_derivatives_raise_naming_the_op(name: str) -> None:
    module = tpu(name)
    fn = lambda *xs: getattr(module, name)(*xs, interpret=True)  # noqa: E731
    names, values = arrays(TPU_CATALOGUE[name])
    wrt = differentiable(names, values)
    loss = loss_of(fn, values, wrt)
    every = derivative_message(name, *[names[i] for i in wrt])
    with pytest.raises(NotImplementedError, match=every):
        jax.grad(loss, argnums=tuple(range(len(wrt))))(*[values[i] for i in wrt])
    with pytest.raises(NotImplementedError, match=derivative_message(name, "a")):
        jax.jit(jax.grad(loss_of(fn, values, [0])))(values[0])
    with pytest.raises(NotImplementedError, match=derivative_message(name, names[wrt[-1]])):
        jax.vjp(lambda x: fn(*values[:wrt[-1]], x, *values[wrt[-1] + 1:]), values[wrt[-1]])
    with pytest.raises(NotImplementedError, match=derivative_message(name, "b")):
        jax.jvp(lambda x: fn(values[0], x, *values[2:]), (values[1],), (jnp.ones_like(values[1]),))
    with pytest.raises(NotImplementedError, match=derivative_message(name, "a")):
        jax.linearize(lambda x: fn(x, *values[1:]), values[0])


@pytest.mark.parametrize("name", ["gemm_bias_gelu_tpu", "gemm_residual_tpu"])
def test_tpu_forward_and_stop_gradient_unchanged(name: str) -> None:
    """The forward matches the float64 reference, under jax.jit too; with the op's arguments under
    jax.lax.stop_gradient, a loss that also uses them elsewhere differentiates (the op adds nothing)."""
    spec, module = TPU_CATALOGUE[name], tpu(name)
    names, values = arrays(spec)
    fn = lambda *xs: getattr(module, name)(*xs, interpret=True)  # noqa: E731
    want = reference(spec, values[0], values[1], list(zip(names[2:], values[2:], strict=True))).numpy()
    for got in (fn(*values), jax.jit(fn)(*values)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, **tolerance(spec))

    def loss(a):
        return fn(jax.lax.stop_gradient(a), *values[1:]).astype(jnp.float32).sum() + (a.astype(jnp.float32) ** 2).sum()

    grad = jax.grad(loss)(values[0])
    np.testing.assert_allclose(np.asarray(grad, np.float32), 2 * np.asarray(values[0], np.float32), rtol=1e-2)


def torch_args(spec: dict, values: list, requires_grad: bool) -> list:
    """The call's values as torch tensors in the logical shapes the torch entry takes (A (M, K), B (K, N)),
    each a leaf in its stored layout (a weight stored (N, K) passed as w.t(), as models hold them)."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, float):
            out.append(v)
            continue
        t = torch.from_dlpack(v).clone().requires_grad_(requires_grad)
        transposed = (i == 0 and spec["a"]["major"] == "mn") or (i == 1 and spec["b"]["major"] == "k")
        out.append(t.transpose(-1, -2) if transposed else t)
    return out


@pytest.mark.parametrize("name", ["gemm_bias_gelu_tpu", "gemm_residual_tpu", "bmm_tpu"])
def test_tpu_torch_entry_refuses_requires_grad(name: str) -> None:
    spec, module = TPU_CATALOGUE[name], tpu(name)
    names, values = arrays(spec)
    fn = getattr(module, f"{name}_torch")
    args = torch_args(spec, values, requires_grad=True)
    with pytest.raises(NotImplementedError, match=grad_message(name, "a")):
        fn(*args, interpret=True)
    for i, arg in enumerate(args[1:], start=1):  # each argument is named when it is the one
        if isinstance(arg, torch.Tensor):
            only = [x.detach() if isinstance(x, torch.Tensor) and j != i else x for j, x in enumerate(args)]
            with pytest.raises(NotImplementedError, match=grad_message(name, names[i])):
                fn(*only, interpret=True)


@pytest.mark.parametrize("how", ["no_grad", "inference_mode", "detach"])
@pytest.mark.parametrize("name", ["gemm_bias_gelu_tpu", "gemm_residual_tpu"])
def test_tpu_torch_entry_without_grad_runs(name: str, how: str) -> None:
    spec, module = TPU_CATALOGUE[name], tpu(name)
    names, values = arrays(spec)
    fn = getattr(module, f"{name}_torch")
    args = torch_args(spec, values, requires_grad=True)
    if how == "detach":
        got = fn(*[x.detach() if isinstance(x, torch.Tensor) else x for x in args], interpret=True)
    else:
        with torch.no_grad() if how == "no_grad" else torch.inference_mode():
            got = fn(*args, interpret=True)
    want = reference(spec, values[0], values[1], list(zip(names[2:], values[2:], strict=True)))
    torch.testing.assert_close(got.double(), want, **tolerance(spec))


def mgpu_structs(spec: dict, m: int = 64, n: int = 128, k: int = 128) -> tuple[list[str], list]:
    s = GemmSpec.model_validate(spec)
    lead = (3,) if s.batch else ()
    from backends.pallas.common import jnp_dtype

    names = ["a", "b"]
    values: list = [jax.ShapeDtypeStruct((*lead, m, k) if s.a.major == "k" else (*lead, k, m), jnp_dtype(s.a.dtype.value)),
                    jax.ShapeDtypeStruct((*lead, n, k) if s.b.major == "k" else (*lead, k, n), jnp_dtype(s.b.dtype.value))]
    for arg in s.runtime_args():
        names.append(arg.name)
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        values.append(jax.ShapeDtypeStruct(shape, jnp_dtype("f32" if arg.shape == "scalar" else arg.dtype.value)))
    return names, values


@pytest.mark.parametrize("name", MGPU)
def test_mgpu_derivatives_raise_naming_the_op(name: str) -> None:
    """Traced without a GPU (the jitted call, past the public function's GPU check): the forward traces as
    before, every derivative raises naming the op and the differentiated arguments."""
    module = mgpu(name)
    names, values = mgpu_structs(CATALOGUE[name])
    out = jax.eval_shape(module._call, *values)
    assert out.shape[-2:] == (64, 128)
    wrt = [i for i, v in enumerate(values) if jnp.issubdtype(v.dtype, jnp.floating)]

    def loss(*xs):
        full = list(values)
        for i, x in zip(wrt, xs, strict=True):
            full[i] = x
        return module._call(*full).astype(jnp.float32).sum()

    with pytest.raises(NotImplementedError, match=derivative_message(name, *[names[i] for i in wrt])):
        jax.make_jaxpr(jax.grad(loss, argnums=tuple(range(len(wrt)))))(*[values[i] for i in wrt])
    with pytest.raises(NotImplementedError, match=derivative_message(name, "b")):
        jax.make_jaxpr(lambda *xs: jax.jvp(lambda x: module._call(xs[0], x, *xs[2:]), (xs[1],), (xs[1],)))(*values)
    # Under stop_gradient the op's inputs carry no tangent: the derivative of the rest traces.
    jax.make_jaxpr(jax.grad(lambda a, *r: module._call(jax.lax.stop_gradient(a), *r).astype(jnp.float32).sum()
                            + a.astype(jnp.float32).sum()))(*values)


def test_mgpu_torch_entry_refuses_requires_grad(monkeypatch) -> None:
    """CPU tensors, past the GPU check: the direct path declines them and the DLPack path refuses the tensor
    that requires grad before anything is traced."""
    module = mgpu("gemm_bias_gelu_bf16")
    monkeypatch.setattr(module._mg, "require_gpu", lambda fn: None)
    a, b, bias = torch.randn(64, 128).bfloat16(), torch.randn(128, 128).bfloat16().t(), torch.randn(128).bfloat16()
    with pytest.raises(NotImplementedError, match=grad_message("gemm_bias_gelu_bf16", "bias")):
        module.gemm_bias_gelu_bf16_torch(a, b, bias.requires_grad_())


@pytest.mark.parametrize("requires_grad", ["none", "b", "out-of-grad-mode"])
def test_mgpu_direct_path_declines_requires_grad_in_grad_mode(requires_grad: str, monkeypatch) -> None:
    """`_direct` (the torch entry's launch without jax), on stand-ins for CUDA tensors with a recorded launch:
    a tensor that requires grad in grad mode goes to the DLPack path (None, nothing launched); under
    torch.no_grad() a weight that requires grad launches directly, as one that does not."""
    import specgen.runtime.mgpu_torch as mt

    module = mgpu("gemm_relu_f16")
    m, n, k = 128, 256, 256
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    if requires_grad != "none":
        b.requires_grad_()
    launches: list = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(mt, "stream", lambda device: 7)
    cfg = module._config_for(m, n, k)
    monkeypatch.setitem(module._DIRECT, (0, cfg, m, n, k), lambda addresses, stream: launches.append(addresses))
    if requires_grad == "out-of-grad-mode":
        with torch.no_grad():
            out = module._direct(FakeCuda(a), FakeCuda(b))
    else:
        out = module._direct(FakeCuda(a), FakeCuda(b))
    if requires_grad == "b":
        assert out is None and not launches
    else:
        assert out.shape == (m, n) and launches == [(a.data_ptr(), b.data_ptr(), out.data_ptr())]
