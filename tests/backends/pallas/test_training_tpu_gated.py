"""A gated epilogue's backward (SwiGLU, GeGLU; issue 38) on the Pallas TPU design, in Pallas's strict TPU interpreter
on the CPU (no TPU here: uninitialized VMEM and block reads past an array's end are NaN, so an unmasked tail shows).
B (2N, K) K-major halves is viewed (2, N, K) (B (K, 2N) N-major is read as blocks j and j + N / block); forward_pre
stores pre (2, M, N) beside out, recompute stores G (2, M, N) from the gate and up accumulators with dOut read as a
block, grad_cols forms G from pre (and dOut's column sum, the bias gradient); dgrad reduces over both halves, wgrad
writes dB's (2, N, K) view (N-major: dB (K, 2N) itself). Here: jax.grad under
jax.jit against float64 torch autograd of the reference (M, N, K off the blocks, 1x1x1; f32 and bf16; both save modes;
A and B either major, B (K, 2N) N-major read as blocks j and j + N / block; SiLU, GELU-tanh and erf GELU; with and
without the bias after the gate), NaN and inf propagating
as the formula table says, jax.grad inside jax.shard_map over 4 CPU devices, the plan's VMEM figures (PAL014's), and
every backward kernel lowering to Mosaic for TPU. JAX returns fresh arrays (no buffer to poison): every gradient
element is compared with float64's on random data, so an element never written would show."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import render_module
from backends.pallas.test_training_tpu import SHARDED, close, reference
from specgen.kinds.gemm.designs.pallas.training import grad_cols_vmem, pre_role_vmem
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

# name: (fn, save, dtype, A's major, B's major, a bias after the gate, the shape (M, N, K) its gradients are checked
# at): both save modes, both majors of A and of B, f32 and bf16, with and without the bias; M, N, K off the 16 (128
# for an mn-major A) x 128 x 128 forward blocks and the 128^3 backward ones (N's tail inside each half of 2N), 1x1x1
# (one tailed step everywhere; each half one column); B (K, 2N) N-major at N = 256 (its N a multiple of the blocks
# along N). One shape a form: each is a compile of the interpreted program.
FORMS = {
    "tgg_swiglu_pre": ("silu", "preact", "f32", "k", "k", True, (37, 200, 150)),
    "tgg_geglu_rec_mn": ("gelu_tanh", "recompute", "f32", "mn", "k", False, (300, 130, 29)),
    "tgg_gelu_rec_bf16": ("gelu", "recompute", "bf16", "k", "k", True, (1, 1, 1)),
    "tgg_silu_pre_mn_bmn_bf16": ("silu", "preact", "bf16", "mn", "mn", False, (130, 256, 257)),
}
BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}  # dB^T's blocks have tile.m on their lanes (PAL011)


def form_spec(name: str) -> dict:
    fn, save, dtype, a, b, bias, _ = FORMS[name]
    epilogue = [{"op": "gated", "fn": fn, "layout": "halves"}] + ([{"op": "bias", "along": "n", "dtype": dtype}] if bias else [])
    return GemmSpec.model_validate({
        "name": name, "kind": "gemm", "a": {"dtype": dtype, "major": a}, "b": {"dtype": dtype, "major": b},
        "out": {"dtype": dtype}, "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        "tile": {"m": 16 if a == "k" else 128, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e", "pallas:tpu_v6e"],
    }).model_dump(mode="json")


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("tpu_gated_train")
    return {name: render_module(form_spec(name), tmp) for name in FORMS}


def inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> tuple[list[jax.Array], jax.Array]:
    """a and b in their stored layouts (b (2N, K): gate rows, then up rows; (K, 2N): columns), the bias (N,) where
    the chain has one, dOut."""
    M, N, K = shape
    rng = np.random.default_rng(seed)
    dt = jnp.float32 if spec["a"]["dtype"] == "f32" else jnp.bfloat16
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) / np.sqrt(K)
    b = rng.standard_normal((2 * N, K) if spec["b"]["major"] == "k" else (K, 2 * N))
    args = [jnp.asarray(a, dt), jnp.asarray(b, dt)]
    if len(spec["epilogue"]) > 1:
        args.append(jnp.asarray(rng.standard_normal(N), dt))
    return args, jnp.asarray(rng.standard_normal((M, N)), dt)


_GRADS: dict[str, object] = {}


def grads(mod, name: str):
    """One jitted (out, jax.grad of <out, dOut>) per module, so that calls at one shape share a compile."""
    if name not in _GRADS:
        fn = getattr(mod, name)

        def both(args, grad):
            loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
            return fn(*args), jax.grad(loss, argnums=tuple(range(len(args))))(*args)

        _GRADS[name] = jax.jit(both)
    return _GRADS[name]


def check(mod, name: str, shape: tuple[int, int, int], seed: int = 0) -> None:
    spec = form_spec(name)
    rel = 1e-5 if spec["a"]["dtype"] == "f32" else 3e-2
    args, grad = inputs(spec, shape, seed)
    out, got = grads(mod, name)(args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, rel, f"{name} out")
    for what, g, w, x in zip(("da", "db", "dbias"), got, want, args, strict=False):
        assert g.dtype == x.dtype and g.shape == x.shape, (name, what)
        close(g, w, rel, f"{name} {what} at {shape}")


def nan_pattern(mod, name: str, args: list[jax.Array], grad: jax.Array) -> list[torch.Tensor]:
    """The gradients, after asserting that their NaN and inf elements are float64 autograd's, elementwise."""
    _, got = grads(mod, name)(args, grad)
    _, want = reference(form_spec(name), args, grad)
    out = []
    for what, g, w in zip(("da", "db", "dbias"), got, want, strict=False):
        g = torch.from_numpy(np.asarray(g, np.float64))
        assert torch.equal(g.isnan(), w.isnan()), f"{name} {what}: NaN where float64 has none (or not)"
        assert torch.equal(g.isinf(), w.isinf()), f"{name} {what}: inf where float64 has none (or not)"
        close(g.nan_to_num(0, 0, 0).numpy(), w.nan_to_num(0, 0, 0), 1e-5, f"{name} {what}")
        out.append(g)
    return out


@pytest.mark.parametrize("name", list(FORMS))
def test_gradients_equal_float64_autograd(modules, name: str) -> None:
    """dA, dB (2N, K) and dbias against float64 torch autograd of act(A @ gate) * (A @ up) (+ bias) at the form's shape.
    Then (f32, at the same shape: the same compile) NaN and inf as the formula table says: a NaN dOut[i, j] makes dgate
    and dup NaN at (i, j), so dA's row i, dB's gate and up rows j and dbias[j]; an inf dOut[i, j] makes them +-inf, their
    sums inf or NaN (inf - inf) as float64's; a NaN up[:, j] (B's up row j) makes dgate NaN, not dup: dB's up rows stay
    finite."""
    mod, spec, (_, n, _) = modules[name], form_spec(name), FORMS[name][-1]
    check(mod, name, FORMS[name][-1])
    if spec["a"]["dtype"] != "f32":
        return
    args, grad = inputs(spec, FORMS[name][-1], seed=8)
    da, db, *dbias = nan_pattern(mod, name, args, grad.at[5, 7].set(jnp.nan))
    kk = 1 if spec["a"]["major"] == "k" else 0  # dA's K axis
    assert da.isnan().any(dim=kk).sum() == 1 and db[7].isnan().all() and db[n + 7].isnan().all()
    assert db.isnan().any(dim=1).sum() == 2 and all(d[7].isnan() and d.isnan().sum() == 1 for d in dbias)
    nan_pattern(mod, name, args, grad.at[5, 7].set(jnp.inf))
    _, db, *_ = nan_pattern(mod, name, [args[0], args[1].at[n + 7].set(jnp.nan), *args[2:]], grad)
    assert db[7].isnan().all() and not db[n:].isnan().any()


def test_the_plan_counts_each_kernels_vmem(modules) -> None:
    """Each backward pallas_call requests its own scoped VMEM: forward_pre / recompute the gated GEMM's figure (the
    companion check resolved: A, gate and up blocks, out, two accumulators, the bias's block or dOut's) plus pre's
    planes or G's up plane, grad_cols its blocks at the forward's tile; METADATA says the layout and the figures."""
    from specgen.resolve import resolve

    for name, mod in modules.items():
        fn, save, dtype, a, b, bias, _ = FORMS[name]
        (loaded,) = load_text(json.dumps({"kernels": [form_spec(name)]}), "<test>", ".json")
        r = resolve(loaded.spec, loaded.spec.targets[0])
        meta = mod.METADATA["training"]
        assert meta["gated"] == "halves" and meta["activation"] == fn
        assert getattr(mod, "N_BLOCKS", None) == ((128,) if b == "mn" else None)  # forward and backward blocks along N
        role = "forward_pre" if save == "preact" else "recompute"
        (c,) = [c for c in r.companions if c.companion == role]
        assert c.spec.epilogue and c.spec.epilogue[0].op == "gated"  # checked as the gated GEMM (up block, 2 accumulators)
        t, o, g = c.spec.tile, 4 if dtype == "f32" else 2, 4 if dtype == "f32" else 2
        # the companion's chain is the kernel's: the bias (forward_pre) and dOut (recompute, a residual) are its own
        assert [op.op for op in c.spec.epilogue[1:]] == (["bias"] if bias else []) if role == "forward_pre" else ["residual"]
        blocks = 2 * o if role == "forward_pre" else g  # pre's two planes; G's up plane
        want = c.budget.total + 2 * t.m * t.n * blocks
        assert meta["gemms"][role]["vmem_bytes"] == want == c.budget.total + pre_role_vmem(r.spec, role, t)
        assert mod.TRAIN_GEMMS[role][4] == math.ceil(want * 1.25)
        cols = grad_cols_vmem(r.spec)
        assert meta.get("grad_cols_vmem_bytes", 0) == cols
        tm = 16 if a == "k" else 128  # the forward's tile.m (128 x 128 x 128 backward GEMMs)
        if save == "preact":  # dOut, pre's and G's two planes, double-buffered, at the forward's tile
            assert cols == 2 * tm * 128 * (o + 2 * (o + g)) + (3 * 32 * 128 if bias else 0)
        else:  # the bias gradient alone: dOut's column sum
            assert cols == (2 * tm * 128 * o + 3 * 32 * 128 if bias else 0)


def test_backward_lowers_to_mosaic_for_tpu(modules) -> None:
    """jax.grad through the entry lowers for TPU on this CPU machine (Pallas's Mosaic lowering of forward_pre /
    recompute's two B blocks and (2, bm, bn) stores, dgrad's reduction over both halves, wgrad's (2, N, K) blocks;
    the half indices by lax.div / lax.rem, which Mosaic lowers without asking for a TPU). libtpu's compile needs one."""
    for name in ("tgg_gelu_rec_bf16", "tgg_silu_pre_mn_bmn_bf16"):
        mod, spec = modules[name], form_spec(name)
        args, grad = inputs(spec, (300, 384, 640))
        fn = lambda *xs, mod=mod: mod._call(*xs, interpret=False)  # noqa: E731
        loss = lambda *xs, fn=fn, grad=grad: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
        argnums = tuple(range(len(args)))
        text = jax.jit(jax.grad(loss, argnums=argnums)).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
        roles = ["forward_pre" if spec["training"]["save"] == "preact" else "recompute", "dgrad", "wgrad"]
        roles += ["grad_cols"] if spec["training"]["save"] == "preact" or len(args) > 2 else []
        assert all(f"{name}_{role}" in text for role in roles), [r for r in roles if f"{name}_{r}" not in text]


def test_grad_inside_shard_map(modules, tmp_path) -> None:
    """jax.grad inside jax.shard_map over 4 CPU devices (a subprocess): A's rows and dOut sharded, B (2N, K) and the
    bias replicated (their gradients summed over the mesh), equal to the single-device gradients."""
    mod = modules["tgg_swiglu_pre"]
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(script), mod.__file__, "tgg_swiglu_pre", "150", "2"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4 and max(result["err"]) < 1e-5, result
