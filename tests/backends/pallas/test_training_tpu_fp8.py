"""An fp8 forward's backward on the dense Pallas TPU design (session 32; specgen/kinds/gemm/designs/pallas/training.py,
templates/gemm/pallas/backward_tpu.jinja), in Pallas's strict TPU interpreter on the CPU (uninitialized VMEM and reads
past an array's end are NaN, so an unwritten block or an unmasked tail shows; no TPU here: nothing ran natively).

A and B fp8 (e4m3, e5m2, one of each), the rowwise scales first, then [bias], [activation] or both, a 16-bit output:
the dense Triton design's meaning (docs/training/triton.md, "An fp8 forward"): dA and dB are the gradients of the dequantized
operands A scale_a[:, None] and B scale_b[None, :] in the output's dtype, dbias U's column sum, the scales none.
jax.grad under jax.jit against float64 torch autograd of the dequantized forward, both save modes, every operand major,
M, N, K off the blocks, M = 1 and 1x1x1; jax.grad lowered for TPU; check's side (TRN001 lifted on the TPU targets only,
PAL015 on wgrad's 8-bit A block, PAL014's figure) and the plan refusing what TRN001 refuses."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import render_module
from specgen.check import check_specs
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.gemm.designs.pallas.training import plan_tpu_training
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolve import resolve
from specgen.spec.load import load_text

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

JNP = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2, "bf16": jnp.bfloat16, "f16": jnp.float16}
CHAINS = {
    "bias_gelu_tanh": [{"op": "bias", "dtype": "f32"}, {"op": "activation", "fn": "gelu_tanh"}],
    "bias_silu": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "silu"}],
    "gelu_tanh": [{"op": "activation", "fn": "gelu_tanh"}],
    "bias": [{"op": "bias", "dtype": "f32"}],
    "none": [],
}
BACKWARD = {"tile": {"m": 128, "n": 128, "k": 128}}


def fp8_spec(name: str, chain: str, save: str, a: str = "fp8_e4m3", b: str = "fp8_e4m3", majors: str = "k_k",
             out: str = "bf16", target: str = "pallas:tpu_v7x") -> dict:
    a_major, b_major = majors.split("_")
    spec = {
        "name": f"tf8_{name}", "kind": "gemm", "a": {"dtype": a, "major": a_major}, "b": {"dtype": b, "major": b_major},
        "out": {"dtype": out}, "epilogue": [{"op": "scale", "by": "rowcol"}, *CHAINS[chain]],
        "training": {"save": save, "dgrad": BACKWARD, "wgrad": BACKWARD},
        # an 8-bit A block has 32-row sublane tiles: K-major (M, K) blocks of 32 rows, mn-major (K, M) of 128 lanes
        "tile": {"m": 32 if a_major == "k" else 128, "n": 128, "k": 128}, "targets": [target],
    }
    return GemmSpec.model_validate(spec).model_dump(mode="json")


# (name, chain, save, a, b, majors, out, target, shape): e4m3 in both modes, e5m2 on v5e (its only fp8), both mixes,
# every major pair, the bias alone and the scales alone (U = dOut: no pre GEMM), M = 1 and 1x1x1 (an f16 output is
# refused: the backward's dots would be f16, which the TPU MXU has not, DT003 on dgrad and wgrad)
FORMS = [
    ("e4m3_bias_gelu_preact", "bias_gelu_tanh", "preact", "fp8_e4m3", "fp8_e4m3", "k_k", "bf16", "pallas:tpu_v7x", (37, 200, 150)),
    ("e4m3_bias_silu_recompute", "bias_silu", "recompute", "fp8_e4m3", "fp8_e4m3", "mn_mn", "bf16", "pallas:tpu_v7x",
     (150, 130, 300)),
    ("e5m2_gelu_recompute", "gelu_tanh", "recompute", "fp8_e5m2", "fp8_e5m2", "k_mn", "bf16", "pallas:tpu_v5e", (1, 200, 150)),
    ("mix_bias_preact", "bias", "preact", "fp8_e4m3", "fp8_e5m2", "mn_k", "bf16", "pallas:tpu_v7x", (300, 45, 29)),
    ("mix_none_recompute", "none", "recompute", "fp8_e5m2", "fp8_e4m3", "k_k", "bf16", "pallas:tpu_v7x", (1, 1, 1)),
]
SPECS = {f[0]: fp8_spec(*f[:8]) for f in FORMS}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("fp8_train")
    return {name: render_module(spec, out) for name, spec in SPECS.items()}


def inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> tuple[list[jax.Array], jax.Array]:
    """a, b (fp8, stored layouts), scale_a (M,), scale_b (N,), the bias (N,) where the chain has one, and dOut."""
    M, N, K = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K) if spec["a"]["major"] == "k" else (K, M)) * 2
    b = rng.standard_normal((N, K) if spec["b"]["major"] == "k" else (K, N)) * 2
    args = [jnp.asarray(a, JNP[spec["a"]["dtype"]]), jnp.asarray(b, JNP[spec["b"]["dtype"]]),
            jnp.asarray(rng.uniform(0.5, 1.5, M) / np.sqrt(K), jnp.float32), jnp.asarray(rng.uniform(0.5, 1.5, N), jnp.float32)]
    bias = next((op for op in spec["epilogue"] if op["op"] == "bias"), None)
    if bias is not None:
        args.append(jnp.asarray(rng.standard_normal(N), JNP.get(bias["dtype"], jnp.float32)))
    return args, jnp.asarray(rng.standard_normal((M, N)), JNP[spec["out"]["dtype"]])


def f64(x: jax.Array | np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(np.asarray(x).astype(np.float32), np.float64))


def reference(spec: dict, args: list[jax.Array], grad: jax.Array) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """float64 autograd of act(A_d @ B_d + bias), A_d = A scale_a[:, None] and B_d = B scale_b[None, :] the dequantized
    operands (the leaves: their gradients are what the backward gives for a and b), in the stored layouts."""
    a, b = f64(args[0]), f64(args[1])
    a = a if spec["a"]["major"] == "k" else a.mT  # (.mT: a batched spec's (batch, ...) operands too)
    b = b.mT if spec["b"]["major"] == "k" else b
    ad = (a * f64(args[2])[:, None]).requires_grad_()
    bd = (b * f64(args[3])[None, :]).requires_grad_()
    x = ad @ bd
    bias = f64(args[4]).requires_grad_() if len(args) > 4 else None
    for op in spec["epilogue"][1:]:
        if op["op"] == "bias":
            x = x + bias
        elif op["fn"] == "gelu_tanh":
            x = torch.nn.functional.gelu(x, approximate="tanh")
        else:
            x = torch.nn.functional.silu(x)
    x.backward(f64(grad))
    da = ad.grad if spec["a"]["major"] == "k" else ad.grad.mT
    db = bd.grad.mT if spec["b"]["major"] == "k" else bd.grad
    return x.detach(), [da, db, *([bias.grad] if bias is not None else [])]


def close(got: jax.Array, want: torch.Tensor, rel: float, what: str) -> None:
    """|got - want| within rel of want's largest magnitude (the gradients are sums over a dimension); no NaN (the
    strict interpreter's NaN in a block never written, or a tail read unmasked, would show here)."""
    g = f64(got)
    assert g.shape == want.shape, f"{what}: shape {tuple(g.shape)}, want {tuple(want.shape)}"
    assert not g.isnan().any(), f"{what}: NaN"
    scale = max(want.abs().max().item(), 1.0)
    err = (g - want).abs().max().item()
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_gradients_are_the_dequantized_operands(form: tuple, modules: dict) -> None:
    """jax.grad of <out, dOut> under one jax.jit with the output: dA and dB (the output's dtype, the fp8 operands'
    stored shapes) and dbias against float64 autograd of the dequantized forward within the 16-bit backward's bound
    (G_b and G_a rounded to it: a relative 2^-8 for bf16); the scales' gradients exact zeros of their shapes."""
    name, shape = form[0], form[-1]
    spec, mod = SPECS[name], modules[name]
    args, grad = inputs(spec, shape)
    fn = getattr(mod, spec["name"])
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    out, grads = jax.jit(lambda *xs: (fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)))(*args)
    want_out, want = reference(spec, args, grad)
    rel = 1.5e-2
    close(out, want_out, rel, "out")
    for what, g, w, x in zip(("a", "b"), grads[:2], want[:2], args[:2], strict=True):
        assert g.dtype == JNP[spec["out"]["dtype"]] and g.shape == x.shape, (what, g.dtype, g.shape)
        close(g, w, rel, f"d{what}")
    for what, g, x in zip(("scale_a", "scale_b"), grads[2:4], args[2:4], strict=True):
        assert g.shape == x.shape and not jnp.any(g), f"d{what}: the scales get no gradient (zeros)"
    if len(args) > 4:
        assert grads[4].dtype == args[4].dtype
        close(grads[4], want[2], rel, "dbias")
    assert mod.METADATA["training"]["fp8_backward_dtype"] == JNP[spec["out"]["dtype"]].__name__


def test_vjp_of_one_operand_and_the_kernels(modules: dict) -> None:
    """jax.vjp's pullback under jax.jit (the custom_vjp's rules alone) equals jax.grad's; the module's table holds
    the backward GEMMs in the output's dtype (recompute's pre in f32) and reads G_b in dgrad, G_a in wgrad."""
    name = "e4m3_bias_silu_recompute"
    spec, mod = SPECS[name], modules[name]
    args, grad = inputs(spec, (40, 130, 200), seed=3)
    _, want = reference(spec, args, grad)
    _, pull = jax.vjp(getattr(mod, spec["name"]), *args)
    da, db, dsa, dsb, dbias = jax.jit(pull)(grad)
    close(da, want[0], 1.5e-2, "da")
    close(db, want[1], 1.5e-2, "db")
    close(dbias, want[2], 1.5e-2, "dbias")
    assert not jnp.any(dsa) and not jnp.any(dsb)
    table = mod.TRAIN_GEMMS
    assert table["recompute"][3] == jnp.float32 and table["dgrad"][3] == table["wgrad"][3] == jnp.bfloat16
    assert mod.OPERAND is jnp.bfloat16


def test_a_nan_in_the_output_gradient_propagates_as_float64s(modules: dict) -> None:
    """A NaN in dOut reaches dA's row, dB's column and dbias's element (through G_b, G_a and U's column sum), as in
    float64 autograd of the dequantized forward; nothing else."""
    name = "e4m3_bias_gelu_preact"
    spec, mod = SPECS[name], modules[name]
    args, grad = inputs(spec, (37, 200, 150), seed=5)
    grad = grad.at[5, 7].set(jnp.nan)
    _, pull = jax.vjp(getattr(mod, spec["name"]), *args)
    got = jax.jit(pull)(grad)
    _, want = reference(spec, args, grad)
    for what, g, w in zip(("a", "b", "bias"), (got[0], got[1], got[4]), want, strict=True):
        g = f64(g)
        assert torch.equal(g.isnan(), w.isnan()) and g.isnan().any(), f"d{what}: NaN where float64 has none (or not)"
        close(g.nan_to_num(0).numpy(), w.nan_to_num(0), 1.5e-2, f"d{what}")


@pytest.mark.parametrize("name", ["e4m3_bias_gelu_preact", "e4m3_bias_silu_recompute"])
def test_the_backward_lowers_to_mosaic_for_tpu(name: str, modules: dict) -> None:
    """jax.grad through the entry lowers for TPU on this CPU machine (Pallas's Mosaic lowering of every backward
    kernel: the 8-bit pre GEMM, grad_cols's G_b and G_a, dgrad / wgrad converting the 8-bit blocks). libtpu's own
    compile needs a TPU: not run."""
    spec, mod = SPECS[name], modules[name]
    args, grad = inputs(spec, (256, 384, 512))
    fn = lambda *xs: mod._call(*xs, interpret=False)  # noqa: E731
    loss = lambda *xs: jnp.sum(fn(*xs).astype(jnp.float32) * grad.astype(jnp.float32))  # noqa: E731
    text = jax.jit(jax.grad(loss, argnums=(0, 1, 4))).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    roles = ["forward_pre" if spec["training"]["save"] == "preact" else "recompute", "dgrad", "wgrad", "grad_cols"]
    assert all(f"{spec['name']}_{role}" in text for role in roles), [r for r in roles if f"{spec['name']}_{r}" not in text]
    # every kernel a Mosaic call: the four roles and, with recompute, the primal's forward kernel
    assert text.count("stablehlo.custom_call @tpu_custom_call") == (4 if spec["training"]["save"] == "preact" else 5)


# --- the spec side ---------------------------------------------------------------------------------------------
def _check(spec: dict) -> list:
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return check_specs([loaded]).diagnostics


def test_the_forms_check_clean_and_trn001_holds_elsewhere() -> None:
    """Every form checks without an error (TRN001 lifted on the TPU targets: `renders_fp8_training_on` the target,
    the Mosaic GPU one since: tests/backends/pallas/test_training_mgpu_fp8.py); on the TPU an fp8 chain beyond
    [bias, activation] is still TRN001, naming it, and an f16 output is DT003 on dgrad and wgrad (their f16 dots: no
    f16 MXU mode)."""
    for name, spec in SPECS.items():
        errors = [str(d) for d in _check(spec) if d.severity == "error"]
        assert not errors, (name, errors)
    spec = SPECS["e4m3_bias_gelu_preact"]
    f16 = sorted((d.rule, d.variant) for d in _check({**spec, "out": {"dtype": "f16"}}) if d.severity == "error")
    assert f16 == [("DT003", "backward dgrad"), ("DT003", "backward dgrad"), ("DT003", "backward wgrad"),
                   ("DT003", "backward wgrad")], f16
    clamp = {**spec, "epilogue": [*spec["epilogue"], {"op": "clamp", "max": 4.0}]}
    (trn,) = [d for d in _check(clamp) if d.rule == "TRN001"]
    assert "training with fp8_e4m3 operands and epilogue ['scale', 'bias along n', 'activation', 'clamp']" in trn.message
    (loaded,) = load_text(json.dumps({"kernels": [clamp]}), "<test>", ".json")
    target = loaded.spec.targets[0]
    with pytest.raises(ValueError, match=r"epilogue \['scale', 'bias along n', 'activation', 'clamp'\].*\(TRN001\)"):
        plan_tpu_training(loaded.spec, [target], {str(target): resolve(loaded.spec, target)}, JNP_DTYPES, 1.25)


def test_pal015_asks_wgrad_for_32_row_blocks_of_the_8_bit_a() -> None:
    """wgrad reads A as stored, 8-bit: its rows (training.wgrad tile.k for a K-major A, tile.m for an mn-major one)
    are a multiple of 32, where PAL001 on the bf16 companion asks 16 (v7x); each side of the boundary."""
    k_major = SPECS["e4m3_bias_gelu_preact"]
    for spec, axis in ((k_major, "k"), (SPECS["e4m3_bias_silu_recompute"], "m")):
        for rows, refused in ((32, False), (16, True)):
            tile = {**BACKWARD["tile"], axis: rows}
            diags = _check({**spec, "training": {**spec["training"], "wgrad": {"tile": tile}}})
            pal = [d for d in diags if d.rule == "PAL015"]
            assert bool(pal) == refused, (axis, rows, [str(d) for d in pal])
            if refused:
                assert pal[0].message.startswith(f"training.wgrad: the backward reads A (fp8_e4m3, {spec['a']['major']}-major) "
                                                 f"as stored in blocks of 16 rows (tile.{axis} = 16), not a multiple of the "
                                                 "32-row sublane tile of an 8-bit block on tpu_v7x"), pal[0].message


def test_pal014_counts_the_scales_blocks() -> None:
    """The pre GEMM's pallas_call reads the scales' blocks (scale_a's (tile.m, 1) padded to 128 lanes of f32,
    scale_b's (1, tile.n)) beside the bias's; the fp8 recompute kernel reads no dOut (it stores pre, the companion's
    f32 output). Its companion's chain is the kernel's (the scales, the bias), so VMEM001 on it counts them (PAL014
    counted them beside a bare GEMM until session 34: the same figure); each side of v7x's 64 MiB."""
    spec = SPECS["e4m3_bias_silu_recompute"]

    def refused(m: int) -> list:
        big = {**spec, "training": {**spec["training"], "pre": {"tile": {"m": m, "n": 1024, "k": 128}}}}
        return [d for d in _check(big) if d.rule in ("PAL014", "VMEM001")]

    assert not refused(4096)  # (a dOut block counted as well would have refused it: 16842752 B beyond the GEMM)
    (vmem,) = refused(5120)
    assert (vmem.rule, vmem.variant) == ("VMEM001", "backward recompute") and vmem.message.startswith(
        "needs 69861376 B of VMEM > 67108864 B on tpu_v7x (A/B 2 x 786432 = 1572864 + epilogue 41943040 + "
        "accumulator+vectors 26345472)"), vmem.message
