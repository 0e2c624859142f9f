"""Training (a spec's `training` section, issue 38) on the Pallas TPU design, in Pallas's TPU interpret mode on the
CPU (the strict interpreter: uninitialized VMEM and reads past an array's end are NaN, so an unmasked tail shows):
the module's JAX entry is a jax.custom_vjp whose backward runs Pallas kernels rendered from the spec's companions.
jax.grad under jax.jit against float64 torch autograd of the reference for every covered chain in both save modes,
bf16, odd shapes (M, N, K off the blocks, M = 1, 1x1x1), every operand major, jax.grad inside jax.shard_map over 4
CPU devices (a subprocess), a NaN in the output's gradient giving float64's NaN pattern, gradients of some
arguments only, the catalogue kernel, and TRN001 on both sides (TPU renders an f32 backward, Mosaic GPU does not)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import render_module
from specgen.check import check_specs
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")
CHAINS = {
    "plain": [],
    "bias": [{"op": "bias", "along": "n", "dtype": "f32"}],
    **{fn: [{"op": "activation", "fn": fn}] for fn in ACTIVATIONS},
    **{f"bias_{fn}": [{"op": "bias", "along": "n", "dtype": "f32"}, {"op": "activation", "fn": fn}] for fn in ACTIVATIONS},
}
SAVES = ("preact", "recompute")
ODD = (37, 200, 150)  # M, N, K: none a multiple of the 16 x 128 x 128 forward blocks or the 128^3 backward ones
BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}  # (a transposed operand's block has tile.m on its lanes)


def training_spec(chain: str, save: str, dtype: str = "f32", a_major: str = "k", b_major: str = "k") -> dict:
    epilogue = [{**op, "dtype": dtype} if op["op"] == "bias" else op for op in CHAINS[chain]]
    spec = {
        "name": f"train_{chain}_{save}_{dtype}_{a_major}{b_major}", "kind": "gemm",
        "a": {"dtype": dtype, "major": a_major}, "b": {"dtype": dtype, "major": b_major}, "out": {"dtype": dtype},
        "epilogue": epilogue, "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        "tile": {"m": 16 if a_major == "k" else 128, "n": 128, "k": 128}, "targets": ["pallas:tpu_v5e"],
    }
    return GemmSpec.model_validate(spec).model_dump(mode="json")


_MODULES: dict[str, object] = {}


def module(spec: dict, tmp_path_factory: pytest.TempPathFactory):
    """The spec's rendered TPU module (one per spec for the session: its jitted calls stay cached)."""
    if spec["name"] not in _MODULES:
        _MODULES[spec["name"]] = render_module(spec, tmp_path_factory.mktemp("train"))
    return _MODULES[spec["name"]]


def inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> tuple[list[jax.Array], jax.Array]:
    """a, b in their stored layouts, the bias (N,) where the chain has one, and the output's gradient (M, N)."""
    M, N, K = shape
    rng = np.random.default_rng(seed)
    dt = jnp.float32 if spec["a"]["dtype"] == "f32" else jnp.bfloat16
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) / np.sqrt(K)
    b = rng.standard_normal((N, K) if spec["b"]["major"] == "k" else (K, N))
    args = [jnp.asarray(a, dt), jnp.asarray(b, dt)]
    if any(op["op"] == "bias" for op in spec["epilogue"]):
        args.append(jnp.asarray(rng.standard_normal(N), dt))
    return args, jnp.asarray(rng.standard_normal((M, N)), dt)


def reference(spec: dict, args: list[jax.Array], grad: jax.Array) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The float64 reference's output and its gradients (torch autograd in float64), in the stored layouts."""
    leaves = [torch.from_numpy(np.asarray(x, np.float64)).requires_grad_() for x in args]
    a = leaves[0] if spec["a"]["major"] == "k" else leaves[0].t()
    b = leaves[1].t() if spec["b"]["major"] == "k" else leaves[1]
    rest = {"bias": leaves[2]} if len(leaves) > 2 else {}
    epilogue = [{**op, "name": "bias"} if op["op"] == "bias" else op for op in spec["epilogue"]]
    out = REFERENCES["gemm"](epilogue, a, b, rest)
    out.backward(torch.from_numpy(np.asarray(grad, np.float64)))
    return out.detach(), [x.grad for x in leaves]


def run(fn, args: list[jax.Array], grad: jax.Array, argnums: tuple[int, ...] | None = None):
    """The entry's output and jax.grad of <out, grad> (the output's gradient is then `grad`), under one jax.jit."""
    argnums = tuple(range(len(args))) if argnums is None else argnums
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    return jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=argnums)(*xs)))(*args)  # one compile


def close(got: jax.Array, want: torch.Tensor, rel: float, what: str) -> None:
    """|got - want| within rel of want's largest magnitude (the gradients are sums over a dimension)."""
    g = torch.from_numpy(np.asarray(got, np.float64))
    assert g.shape == want.shape, f"{what}: shape {tuple(g.shape)}, want {tuple(want.shape)}"
    scale = max(want.abs().max().item(), 1.0)
    err = (g - want).abs().max().item() if want.numel() else 0.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


def check(spec: dict, tmp_path_factory, shape=ODD, rel: float = 1e-5, seed: int = 0) -> None:
    mod = module(spec, tmp_path_factory)
    args, grad = inputs(spec, shape, seed)
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, rel, "out")
    for name, g, w, x in zip(("a", "b", "bias"), grads, want, args, strict=False):
        close(g, w, rel, f"d{name}")
        assert g.dtype == x.dtype and g.shape == x.shape, name


# Each activation's derivative in both ways G is formed (preact: the column pass; recompute: the recompute GEMM's
# epilogue), with and without a bias in turn; plain and bias once each (every chain in both modes was 24 runs of
# the interpreter for the same derivatives).
PAIRS = [("plain", "preact"), ("bias", "recompute"),
         *((c, save) for i, fn in enumerate(ACTIVATIONS)
           for c, save in ((fn, SAVES[i % 2]), (f"bias_{fn}", SAVES[1 - i % 2])))]


@pytest.mark.parametrize(("chain", "save"), PAIRS)
def test_gradients_equal_float64_autograd(chain: str, save: str, tmp_path_factory) -> None:
    check(training_spec(chain, save), tmp_path_factory)


@pytest.mark.parametrize(("chain", "save"), [("bias_gelu_tanh", "preact"), ("relu", "recompute"),
                                             ("bias_silu", "recompute")])
def test_bf16_gradients(chain: str, save: str, tmp_path_factory) -> None:
    """bf16 operands: G rounds to bf16 for the dots (as eager's bf16 backward does), every sum in f32."""
    check(training_spec(chain, save, "bf16"), tmp_path_factory, rel=3e-2, seed=2)


SHAPES = [(1, 200, 150), (37, 130, 1), (300, 45, 29), (1, 1, 1), (128, 256, 256)]


@pytest.mark.parametrize(("shape", "save"), [(s, SAVES[i % 2]) for i, s in enumerate(SHAPES)] + [((1, 1, 1), "preact")],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_odd_shapes(shape: tuple[int, int, int], save: str, tmp_path_factory) -> None:
    """M = 1, K = 1, every dimension off the blocks, 1x1x1, and one on them (no tail at all); each shape in one
    save mode, 1x1x1 in both."""
    check(training_spec("bias_gelu", save), tmp_path_factory, shape, seed=4)


@pytest.mark.parametrize(("majors", "save"), [("k_mn", "preact"), ("mn_k", "recompute"), ("mn_mn", "preact"),
                                              ("mn_mn", "recompute")])
def test_operand_majors(majors: str, save: str, tmp_path_factory) -> None:
    """Each gradient comes back in its operand's stored layout: an mn-major B (K, N) and a K-major one (N, K), an
    mn-major A (K, M); where that is the transpose of the logical gradient the kernel computes the transpose."""
    a, b = majors.split("_")
    check(training_spec("bias_sigmoid", save, a_major=a, b_major=b), tmp_path_factory, seed=6)


@pytest.mark.parametrize("save", SAVES)
def test_nan_in_the_output_gradient_propagates_as_float64s(save: str, tmp_path_factory) -> None:
    """A NaN in dOut reaches dA's row, dB's column and dbias's element, as in float64 autograd; nothing else."""
    spec = training_spec("bias_gelu_tanh", save)
    mod = module(spec, tmp_path_factory)
    args, grad = inputs(spec, ODD, seed=8)
    grad = grad.at[5, 7].set(jnp.nan)
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    for name, g, w in zip(("a", "b", "bias"), grads, want, strict=True):
        got = torch.from_numpy(np.asarray(g, np.float64))
        assert torch.equal(got.isnan(), w.isnan()), f"d{name}: NaN where float64 has none (or not)"
        assert got.isnan().any()
        close(got.nan_to_num(0).numpy(), w.nan_to_num(0), 1e-5, f"d{name}")


@pytest.mark.parametrize("save", SAVES)
def test_relu_selects_on_a_nan_output_gradient(save: str, tmp_path_factory) -> None:
    """relu's backward is torch's threshold_backward, a select: a NaN dOut where the pre-activation is <= 0 gives 0
    (dOut times the step, 0 x NaN, would be NaN), one where it is > 0 passes; G formed by the column pass
    (preact) or the recompute GEMM's epilogue (recompute)."""
    spec = training_spec("bias_relu", save)
    mod = module(spec, tmp_path_factory)
    args, grad = inputs(spec, ODD, seed=10)
    a, b, bias = (np.asarray(x, np.float64) for x in args)
    pre = a @ b.T + bias
    neg = np.argwhere(pre < 0)[0]
    pos = next(p for p in np.argwhere(pre > 0) if p[0] != neg[0] and p[1] != neg[1])
    grad = grad.at[neg[0], neg[1]].set(jnp.nan).at[pos[0], pos[1]].set(jnp.nan)
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    assert not want[0][neg[0]].isnan().any() and want[0][pos[0]].isnan().all()
    for name, g, w in zip(("a", "b", "bias"), grads, want, strict=True):
        got = torch.from_numpy(np.asarray(g, np.float64))
        assert torch.equal(got.isnan(), w.isnan()), f"d{name}: NaN where float64 has none (or not)"
        close(got.nan_to_num(0).numpy(), w.nan_to_num(0), 1e-5, f"d{name}")


def test_gradient_of_one_argument_and_vjp(tmp_path_factory) -> None:
    """jax.grad of one argument, and jax.vjp's pullback (the custom_vjp's rules) under jax.jit."""
    spec = training_spec("bias_silu", "recompute")
    fn = getattr(module(spec, tmp_path_factory), spec["name"])
    args, grad = inputs(spec, ODD, seed=10)
    _, want = reference(spec, args, grad)
    (db,) = run(fn, args, grad, argnums=(1,))[1]
    close(db, want[1], 1e-5, "db")
    out, pull = jax.vjp(fn, *args)
    for name, g, w in zip(("a", "b", "bias"), jax.jit(pull)(grad), want, strict=True):
        close(g, w, 1e-5, f"d{name}")


def test_catalogue_kernel(tmp_path_factory) -> None:
    """specs/training.toml's linear_gelu_train_tpu (generated/pallas/): bf16 gradients of a, b and bias."""
    mod = importlib.import_module("generated.pallas.linear_gelu_train_tpu")
    spec = mod.SPEC
    assert mod.METADATA["training"]["save"] == "preact"
    args, grad = inputs(spec, (40, 300, 520), seed=12)
    out, grads = run(mod.linear_gelu_train_tpu, args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 2e-2, "out")
    for name, g, w in zip(("a", "b", "bias"), grads, want, strict=True):
        close(g, w, 3e-2, f"d{name}")


SHARDED = textwrap.dedent("""
    import importlib.util, json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    spec = importlib.util.spec_from_file_location("m", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    f = getattr(m, sys.argv[2])
    assert len(jax.devices()) == 4
    rng = np.random.default_rng(0)
    M, N, K = 4 * 37, 200, int(sys.argv[3])
    a = jnp.asarray(rng.standard_normal((M, K)) / np.sqrt(K), jnp.float32)
    b = jnp.asarray(rng.standard_normal((int(sys.argv[4]) * N, K)), jnp.float32)  # B's rows per output column
    bias = jnp.asarray(rng.standard_normal(N), jnp.float32)
    dout = jnp.asarray(rng.standard_normal((M, N)), jnp.float32)
    mesh = jax.make_mesh((4,), ("x",))
    rows, rep = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P())
    def local(a, b, bias, dout):  # each device's rows; the loss summed over the mesh
        return jax.lax.psum(jnp.sum(f(a, b, bias) * dout), "x")
    grad = jax.jit(jax.shard_map(jax.grad(local, argnums=(0, 1, 2)), mesh=mesh,
                                 in_specs=(P("x", None), P(), P(), P("x", None)), out_specs=(P("x", None), P(), P())))
    got = grad(jax.device_put(a, rows), jax.device_put(b, rep), jax.device_put(bias, rep), jax.device_put(dout, rows))
    one = jax.jit(jax.grad(lambda a, b, bias: jnp.sum(f(a, b, bias) * dout), argnums=(0, 1, 2)))(a, b, bias)
    print(json.dumps({"devices": len(got[0].sharding.device_set),
                      "err": [float(jnp.max(jnp.abs(x - y))) / max(1.0, float(jnp.max(jnp.abs(y)))) for x, y in zip(got, one)]}))
""")


@pytest.mark.parametrize("save,k", [("preact", 150), ("recompute", 256)])
def test_grad_inside_shard_map(save: str, k: int, tmp_path_factory) -> None:
    """jax.grad inside jax.shard_map over 4 CPU devices (a subprocess, so the flag does not touch this process's
    jax): A's rows and dOut sharded, B and the bias replicated (their gradients summed over the mesh), equal to
    the single-device gradients; K off the block and on it (the forward kernel's untailed K steps)."""
    spec = training_spec("bias_gelu", save)
    mod = module(spec, tmp_path_factory)
    script = tmp_path_factory.mktemp("sharded") / "sharded.py"
    script.write_text(SHARDED)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(script), mod.__file__, spec["name"], str(k), "1"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4 and max(result["err"]) < 1e-5, result


# --- the spec side: TRN001 -------------------------------------------------------------------------------
def _trn001(targets: list[str]) -> list:
    spec = training_spec("bias_gelu", "preact")
    spec.update(targets=targets, tile={"m": 128, "n": 128, "k": 128})
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return check_specs([loaded]).diagnostics


def test_trn001_passes_the_tpu_targets_and_refuses_f32_on_mosaic_gpu() -> None:
    """f32 operands have a TPU backward; the Mosaic GPU one (tests/backends/pallas/test_training_mgpu.py) takes
    16-bit operands only, and says so."""
    diags = _trn001(["pallas:tpu_v5e", "pallas:tpu_v6e", "pallas:gpu_sm90"])
    trn = [d for d in diags if d.rule == "TRN001"]
    assert [d.target for d in trn] == ["pallas:gpu_sm90"]
    assert trn[0].message.startswith("training: the Mosaic GPU backward takes f16 or bf16 operands with an output of "
                                     "their dtype")
    assert not [d for d in diags if d.severity == "error" and d.target.startswith("pallas:tpu")]


def test_tpu_backward_blocks_are_checked_like_the_forward() -> None:
    """A backward GEMM's blocks go through the TPU rules as the forward's: a wgrad tile whose A^T block has
    fewer than 128 lanes is PAL001 on "backward wgrad", and (B K-major: dB is written transposed, tile.m on its
    lanes) PAL011 on the forward, pointing at training.wgrad."""
    spec = training_spec("bias_gelu", "preact")
    spec["training"]["wgrad"] = {"tile": {"m": 16, "n": 128, "k": 128}}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    errors = [d for d in check_specs([loaded]).diagnostics if d.severity == "error"]
    by_rule = {d.rule: d for d in errors}
    assert sorted((d.rule, d.variant) for d in errors) == [("PAL001", "backward wgrad"), ("PAL011", "")], \
        [str(d) for d in errors]
    assert "A block 128x16" in by_rule["PAL001"].message and "writes 128x16 blocks" in by_rule["PAL011"].message


@pytest.mark.parametrize(("save", "dtype", "majors"), [("preact", "bf16", "k_k"), ("recompute", "bf16", "k_k"),
                                                       ("preact", "f32", "mn_mn"), ("recompute", "bf16", "mn_k")])
def test_backward_lowers_to_mosaic_for_tpu(save: str, dtype: str, majors: str, tmp_path_factory) -> None:
    """jax.grad through the entry lowers for TPU on this CPU machine: Pallas's Mosaic lowering of every backward
    kernel (transposed operands read through dot dimension numbers included). libtpu's compile needs a TPU."""
    a_major, b_major = majors.split("_")
    spec = training_spec("bias_gelu_tanh", save, dtype, a_major, b_major)
    spec.update(name=spec["name"] + "_lower", tile={"m": 128, "n": 128, "k": 128})
    mod = module(spec, tmp_path_factory)
    args, grad = inputs(spec, (300, 384, 640))
    fn = lambda *xs: mod._call(*xs, interpret=False)  # noqa: E731
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    roles = ["forward_pre" if save == "preact" else "recompute", "dgrad", "wgrad", "grad_cols"]
    assert all(f"{spec['name']}_{role}" in text for role in roles), [r for r in roles if f"{spec['name']}_{r}" not in text]
