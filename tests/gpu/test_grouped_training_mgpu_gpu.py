"""On an H100/H200 with jax[cuda]: the grouped Mosaic GPU backward (a ragged-M spec's `training` on pallas:gpu_sm90,
specgen/kinds/grouped/designs/pallas_mgpu/training.py), every MGPU_TRAINING_FORMS form and the catalogue's
moe_up_gelu_train_mgpu (the first form's layer and config, so that form is left to it): jax.grad under jax.jit of
sum(W * entry(...)) against float64 torch autograd on the CPU of the per-group loop, for dA, dB, dbias and (an untouched tail) the caller's `out`, and the forward's value against
the loop; group sizes with empty groups first, in the middle and last, groups off the tile, rows past the last group
(dA exactly 0 there, an empty group's dB[g] and dbias[g] exactly 0); M = 1; both B majors (the forms'). The plain
forms PASSED on an H200 (session 28). The gated forms (MGPU_GATED_TRAINING_FORMS: a halves SwiGLU + bias preact on
either B major, an interleaved GeGLU-tanh recompute; pre and G over B's 2N columns), two cases each, have not run on a
GPU until the lead reports they have. The torch entry (session 35: differentiable through runtime/jax_torch.py):
three forms' gradients against the same float64 loop and a compiled step with no graph break (-k torch_entry), 4
PASSED on an H200 (session 35). Marked `gpu`: CI (CPU only) deselects them. Under ~60 s on an H200:
python3 -m pytest -m gpu -q tests/gpu/test_grouped_training_mgpu_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backends.pallas.grouped_mgpu_shard import layout
from backends.pallas.test_grouped_mgpu import loaded, render
from backends.pallas.test_grouped_training_mgpu import CATALOGUE, _reference

from specgen.compile import load_rendered
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_GATED_TRAINING_FORMS, MGPU_TRAINING_FORMS
from specgen.spec.load import load_paths

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

# (M, N, K, sizes): rows past the last group in each; M, N, K off every tile
CASES = {
    "empty_first_middle_last": (517, 300, 200, (0, 130, 0, 250, 77, 0)),
    "off_the_tile_one_big": (300, 136, 72, (5, 290, 1)),
    "m_1": (1, 48, 40, (0, 1, 0)),
    "every_row": (192, 256, 128, (64, 0, 128)),
}
GATED_CASES = ("empty_first_middle_last", "m_1")  # the gated forms': B's 2N columns, N off the tile and M = 1


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("grouped_mgpu_train_gpu")
    out = {name: (render(s, tmp), s) for name, s in {**MGPU_TRAINING_FORMS, **MGPU_GATED_TRAINING_FORMS}.items()}
    (ls,) = [x for x in load_paths([ROOT / "specs" / "training.toml"]) if x.name == CATALOGUE]
    mod = load_rendered(ROOT / "generated" / "pallas" / "gpu_sm90" / f"{CATALOGUE}.py", f"_gmt_gpu_{CATALOGUE}")
    assert loaded(MGPU_TRAINING_FORMS["gmt_bias_gelu_tanh_preact_k"]).spec.tile == ls.spec.tile
    return {CATALOGUE: (mod, ls.spec.model_dump(mode="json")), **out}


@pytest.mark.parametrize(("name", "case"), [
    *((name, case) for name in [CATALOGUE, *(f for f in MGPU_TRAINING_FORMS if f != "gmt_bias_gelu_tanh_preact_k")]
      for case in CASES),
    *((name, case) for name in MGPU_GATED_TRAINING_FORMS for case in GATED_CASES)])
def test_grad_under_jit_against_float64_autograd(modules, name, case) -> None:
    mod, spec = modules[name]
    assert jax.default_backend() == "gpu"
    m, n, k, sizes = CASES[case]
    sizes = np.array(sizes, np.int32)
    g, inside = len(sizes), int(min(sizes.sum(), m))
    rng = np.random.default_rng(11)
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16}[spec["a"]["dtype"]]
    a = jnp.asarray(rng.standard_normal((m, k)) * 0.5, dt)
    nb = 2 * n if layout(spec) else n  # a gated op's gate and up columns
    b = jnp.asarray(rng.standard_normal((g, nb, k) if spec["b"]["major"] == "k" else (g, k, nb)) * (1.0 / np.sqrt(k)), dt)
    bias_op = next((op for op in spec["epilogue"] if op["op"] == "bias"), None)
    bias = None if bias_op is None else jnp.asarray(rng.standard_normal((g, n)),
                                                    {"bf16": jnp.bfloat16, "f32": jnp.float32}[bias_op["dtype"]])
    out = jnp.asarray(rng.standard_normal((m, n)), dt) if spec["groups"]["tail"] == "untouched" else None
    w = rng.standard_normal((m, n)).astype(np.float32)
    index = jnp.asarray(np.cumsum(sizes).astype(np.int32) if spec["groups"]["index"] == "offs" else sizes)
    xs = [a, b, index, *([bias] if bias is not None else [])]
    n_in = len(xs)

    def loss(*ys):
        y = mod._call(*ys[:n_in], ys[n_in] if out is not None else None)
        return jnp.sum(jnp.asarray(w) * y.astype(jnp.float32)), y

    argnums = (0, 1, *((3,) if bias is not None else ()), *((n_in,) if out is not None else ()))
    grads, y = jax.jit(jax.grad(loss, argnums=argnums, has_aux=True))(*xs, *([out] if out is not None else []))
    want = _reference(spec, a, b, sizes, bias, w, out)
    names = {0: 0, 1: 1, 3: 2, n_in: 3}
    for i, got in zip(argnums, grads, strict=True):
        got, ref = np.asarray(got, np.float64), want[names[i]]
        assert got.shape == ref.shape and np.isfinite(got).all(), (name, case, i)
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(got, ref, rtol=3e-2, atol=2e-2 * scale, err_msg=f"{name} {case} arg {i}")
    da, db = np.asarray(grads[0], np.float64), np.asarray(grads[1], np.float64)
    assert not da[inside:].any()  # rows past the last group: dA = 0
    empty = [gi for gi, s in enumerate(sizes) if s == 0]
    assert not db[empty].any()  # an empty group's dB[g] = 0
    if bias is not None:
        assert not np.asarray(grads[2], np.float64)[empty].any()  # and its dbias[g], exactly
    # the forward's value (the custom_vjp's forward rule: pre by the kernel, then the activation or gate; with
    # recompute, the forward kernel) against the loop
    y = np.asarray(y, np.float64)[:inside]
    ref = _forward_reference(spec, a, b, sizes, bias)[:inside]
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(ref).max())))


def _forward_reference(spec: dict, a, b, sizes, bias) -> np.ndarray:
    """The per-group loop in float64 (numpy); a gated op: act(gate) * up over B's 2N columns (its layout), then the
    bias."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rows, start = [], 0
    for gi, s in enumerate(np.maximum(sizes, 0)):
        end = min(start + int(s), a64.shape[0])
        bg = b64[gi].T if spec["b"]["major"] == "k" else b64[gi]
        acts = {"gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
                "silu": lambda v: v / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0.0)}
        add = np.asarray(bias, np.float64)[gi] if bias is not None else 0.0
        y = a64[start:end] @ bg
        if gated := layout(spec):
            n = y.shape[1] // 2
            gate, up = (y[:, :n], y[:, n:]) if gated == "halves" else (y[:, 0::2], y[:, 1::2])
            y = acts[spec["epilogue"][0]["fn"]](gate) * up + add
        else:
            y = y + add
            for op in spec["epilogue"]:
                if op["op"] == "activation":
                    y = acts[op["fn"]](y)
        rows.append(y)
        start = end
    return np.concatenate(rows)


# The torch entry (session 35, specgen/runtime/jax_torch.py as the dense module's): CUDA tensors that require grad take
# the torch op running jax.vjp of the JAX entry, its backward the pullback. (name, case): a K-major offs preact layer,
# an N-major f16 recompute with sizes and an untouched tail, a gated K-major SwiGLU at M = 1.
TORCH_CASES = [(CATALOGUE, "empty_first_middle_last"), ("gmt_bias_silu_recompute_mn", "off_the_tile_one_big"),
               ("gmt_swiglu_bias_preact_k", "m_1")]


def torch_problem(spec: dict, case: str, seed: int = 13) -> tuple:
    """CUDA leaves in the stored layouts (A, B, [bias]), the index, dOut weights W (M, N) f32, the group sizes."""
    import torch

    m, n, k, sizes = CASES[case]
    sizes = np.array(sizes, np.int32)
    g, rng = len(sizes), np.random.default_rng(seed)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["a"]["dtype"]]
    nb = 2 * n if layout(spec) else n
    a = torch.from_numpy(rng.standard_normal((m, k)) * 0.5).to(dt)
    b = torch.from_numpy(rng.standard_normal((g, nb, k) if spec["b"]["major"] == "k" else (g, k, nb)) / np.sqrt(k)).to(dt)
    bias_op = next((op for op in spec["epilogue"] if op["op"] == "bias"), None)
    bias = [] if bias_op is None else [torch.from_numpy(rng.standard_normal((g, n))).to(
        {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[bias_op["dtype"]])]
    index = torch.from_numpy(np.cumsum(sizes).astype(np.int32) if spec["groups"]["index"] == "offs" else sizes)
    leaves = [x.cuda().requires_grad_() for x in (a, b, *bias)]
    return leaves, index.cuda(), rng.standard_normal((m, n)).astype(np.float32), sizes


@pytest.mark.parametrize(("name", "case"), TORCH_CASES)
def test_torch_entry_gradients_against_float64(modules, name, case) -> None:
    """<name>_torch on CUDA tensors (B passed as torch._grouped_mm's (G, K, N) view of a K-major weight): the gradients
    of A, B and the bias against float64 autograd of the per-group loop (the JAX test's bound), each in its leaf's
    shape, dtype and strides; dA past the groups and an empty group's dB and dbias exactly 0; the forward's rows."""
    import torch

    mod, spec = modules[name]
    leaves, index, w, sizes = torch_problem(spec, case)
    kmajor = spec["b"]["major"] == "k"
    y = getattr(mod, f"{name}_torch")(leaves[0], leaves[1].transpose(1, 2) if kmajor else leaves[1], index, *leaves[2:])
    assert y.is_cuda and y.grad_fn is not None
    y.backward(torch.from_numpy(w).cuda().to(y.dtype))
    host = [x.detach().float().cpu().numpy() for x in leaves]
    want = _reference(spec, host[0], host[1], sizes, host[2] if len(host) > 2 else None, w, None)
    inside = int(min(sizes.sum(), host[0].shape[0]))
    empty = [gi for gi, s in enumerate(sizes) if s == 0]
    for i, x in enumerate(leaves):
        got = x.grad
        assert got.shape == x.shape and got.dtype == x.dtype and got.stride() == x.stride(), (name, i)
        got = got.double().cpu().numpy()
        assert np.isfinite(got).all(), (name, case, i)
        np.testing.assert_allclose(got, want[i], rtol=3e-2, atol=2e-2 * max(1.0, float(np.abs(want[i]).max())),
                                   err_msg=f"torch {name} {case} arg {i}")
        assert not (got[inside:] if i == 0 else got[empty]).any(), (name, case, i)
    ref = _forward_reference(spec, host[0], host[1], sizes, host[2] if len(host) > 2 else None)[:inside]
    np.testing.assert_allclose(y.detach().double().cpu().numpy()[:inside], ref, rtol=2e-2,
                               atol=2e-2 * max(1.0, float(np.abs(ref).max())))


def test_torch_entry_compiled_step_has_no_graph_break(modules) -> None:
    """torch.compile(fullgraph=True, aot_eager) of a step over the grouped torch entry on CUDA: no graph break,
    gradients equal eager's (the same kernels: the op and its backward op)."""
    import torch
    from torch._dynamo.utils import counters

    mod, spec = modules[CATALOGUE]
    leaves, index, _, _ = torch_problem(spec, "empty_first_middle_last", seed=5)
    fn = getattr(mod, f"{CATALOGUE}_torch")

    def step(a, b, bias):
        return fn(a, b.transpose(1, 2), index, bias).float().square().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = [x.detach().clone().requires_grad_() for x in leaves]
    torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = [x.detach().clone().requires_grad_() for x in leaves]
    step(*eager).backward()
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got.grad, want.grad)
