"""The grouped Pallas TPU module's training entry (its jax.custom_vjp: test_grouped_training_tpu.py) inside
jax.shard_map (issue 38), in Pallas's TPU interpreter on four CPU devices (a subprocess: grouped_tpu_shard.py, the
device count is fixed when jax starts; under shard_map the entry picks Pallas's plain interpreter, the strict one
stalls there). Each shard holds its own ragged batch: its m rows of A and dOut and its own group index (sizes or offs,
empty groups, a shard with no rows in any group, one whose groups fill it); B and the bias are replicated; an
untouched tail's caller `out` is sharded with the rows; dOut is NaN in the rows past a shard's last group where the
tail is zero (they take no part). jax.grad under jax.jit of the loss over the shards' outputs, in both vma modes
(check_vma=True: B's and the bias's gradients come back summed over the mesh by the entry's casts; False: each
shard's, which the step psums), against float64 torch autograd of the whole problem (every shard's per-group loop, B
and the bias shared): dA and out's per shard, dB and dbias summed over the shards. The traced step has one psum per
replicated argument plus the loss's (check_vma=True): no kernel output typed as not varying. The native entry's step
(interpret=False) lowers to Mosaic for TPU on the CPU.

fp8 forwards (a bf16 backward w.r.t. the dequantized operands A scale_a and B[g] scale_b[g]): scale_a (M,) sharded
with the rows, scale_b (G, N) replicated; against float64 autograd of the whole problem over the dequantized
operands; dA and dB in bf16, the scales' gradients exact zeros (the rule's None). Three forms: the backward tests'
e4m3 x e5m2 bias + GELU-tanh preact (v7x, B K-major) and e5m2 SiLU recompute (v5e / v6e, B N-major, offs, an
untouched tail), and one rendered here, e5m2 x e4m3 with the bias alone (U = dOut, no `_pre` kernel; v7x, B
N-major). No gated fp8 form: a gated epilogue with fp8 operands and `training` is refused when the spec loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from backends.pallas.test_grouped_tpu import render
from specgen.kinds.grouped.testing.reference import grouped
from specgen.kinds.grouped.testing.tpu_specs import TPU_TRAINING_FORMS, fp8_training_form

ROOT = Path(__file__).resolve().parents[3]
# one worker runs the module (CI's --dist loadgroup): the subprocess fixture is built once, not once a worker
pytestmark = pytest.mark.xdist_group("grouped_tpu_shard")
# Four shards of 21 rows over 8-row tiles; each shard's own group sizes (G = 6).
SHARD_SIZES = ((0, 3, 2, 2, 9, 0), (5, 0, 0, 11, 0, 3), (0, 0, 0, 0, 0, 0), (1, 4, 4, 4, 4, 4))
M, N, K, G = 21, 130, 200, 6
N_GATED_MN = 128
# plain bf16 (bias alone: G = dOut), f32 bias + GELU-tanh preact, gated SwiGLU + bias preact (B K-major, tail zero),
# gated GeGLU-tanh recompute (B N-major, offs, an untouched tail with the caller's out)
# fp8: e4m3 x e5m2 bias + GELU-tanh preact (B K-major), e5m2 SiLU recompute (B N-major, offs, an untouched tail), and
# e5m2 x e4m3 with the bias alone (B N-major), rendered here
SPECS = {**TPU_TRAINING_FORMS, "gts_fp8_e5m2_e4m3_bias_mn": fp8_training_form(
    "gts_fp8_e5m2_e4m3_bias_mn", a="fp8_e5m2", b="fp8_e4m3", b_major="mn", save="preact", targets=["pallas:tpu_v7x"],
    epilogue=({"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"}))}
FORMS = ("gtt_bias_bf16", "gtt_bias_gelu_tanh_preact", "gtt_swiglu_bias_preact", "gtt_geglu_tanh_recompute_mn",
         "gtt_fp8_mix_bias_gelu_tanh_preact", "gtt_fp8_e5m2_silu_recompute_mn", "gts_fp8_e5m2_e4m3_bias_mn")
DTYPES = {"f32": "float32", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
TORCH = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8(spec: dict) -> bool:
    return spec["a"]["dtype"].startswith("fp8")


def form(spec: dict) -> tuple[bool, bool, bool, int]:
    """(gated, bias, untouched tail, N)."""
    gated = spec["epilogue"][0]["op"] == "gated"
    return (gated, any(op["op"] == "bias" for op in spec["epilogue"]), spec["groups"]["tail"] == "untouched",
            N_GATED_MN if gated and spec["b"]["major"] == "mn" else N)


def index_of(spec: dict, sizes: tuple[int, ...]) -> np.ndarray:
    return np.cumsum(sizes) if spec["groups"]["index"] == "offs" else np.asarray(sizes)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the entry sees it in `dtype` (bf16, fp8: rounded), in f32."""
    x = x.astype(np.float32)
    return x if dtype == "f32" else torch.from_numpy(x).to(TORCH[dtype]).float().numpy()


def inputs(spec: dict, seed: int) -> dict[str, np.ndarray]:
    """A (S*m, K), B logical (G, K, N or 2N), the bias (G, N), out's base and dOut (S*m, N) (NaN past each shard's
    last group with a zero tail), the index (S, G); fp8: scale_a (S*m,), scale_b (G, N)."""
    gated, _, untouched, n = form(spec)
    rng = np.random.default_rng(seed)
    s = len(SHARD_SIZES)
    dt, out = spec["a"]["dtype"], spec["out"]["dtype"]
    bias = next((op["dtype"] for op in spec["epilogue"] if op["op"] == "bias"), "f32")
    dout = rng.standard_normal((s * M, n)).astype(np.float32)
    if not untouched:  # the rows past a shard's last group: no gradient may read them
        for i, sizes in enumerate(SHARD_SIZES):
            dout[i * M + sum(sizes):(i + 1) * M] = np.nan
    x = {"a": rounded(rng.standard_normal((s * M, K)) / (1 if fp8(spec) else np.sqrt(K)), dt),
         "b": rounded(rng.standard_normal((G, K, 2 * n if gated else n)), spec["b"]["dtype"]),
         "bias": rounded(rng.standard_normal((G, n)), bias), "base": rounded(rng.standard_normal((s * M, n)), out),
         "dout": dout, "index": np.stack([index_of(spec, sz) for sz in SHARD_SIZES]).astype(np.int32)}
    if fp8(spec):
        x["scale_a"] = (rng.uniform(0.5, 1.5, s * M) / np.sqrt(K)).astype(np.float32)
        x["scale_b"] = rng.uniform(0.5, 1.5, (G, n)).astype(np.float32)
    return x


def grad_names(spec: dict) -> list[str]:
    """The step's gradients, in its argument order."""
    _, bias, untouched, _ = form(spec)
    return ["a", "b", *(["scale_a", "scale_b"] if fp8(spec) else []), *(["bias"] if bias else []),
            *(["base"] if untouched else [])]


def reference(spec: dict, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 torch autograd of the whole problem: each shard's per-group loop over its rows (B and the bias shared),
    the loss summed over the shards; B's gradient in its stored layout. fp8: the loop over the dequantized operands
    A scale_a and B[g] scale_b[g] (their gradients), the scales none (zeros)."""
    _, _, untouched, _ = form(spec)
    f64 = {k: x[k].astype(np.float64) for k in ("a", "b", "bias", "base")}
    want = {}
    if fp8(spec):
        f64["a"], f64["b"] = f64["a"] * x["scale_a"][:, None], f64["b"] * x["scale_b"][:, None, :]
        want = {k: np.zeros(x[k].shape) for k in ("scale_a", "scale_b")}
        spec = {**spec, "a": {**spec["a"], "dtype": "f32"}, "b": {**spec["b"], "dtype": "f32"},
                "epilogue": spec["epilogue"][1:], "training": None}
    leaf = {k: torch.from_numpy(v).requires_grad_() for k, v in f64.items()}
    args = {op["name"]: leaf["bias"] for op in spec["epilogue"] if op["op"] == "bias"}
    loss = 0
    for s in range(len(SHARD_SIZES)):
        rows = slice(s * M, (s + 1) * M)
        out, written = grouped(spec, leaf["a"][rows], leaf["b"], torch.from_numpy(x["index"][s]), args)
        if untouched:
            out = torch.where(written[:, None], out, leaf["base"][rows])
        loss = loss + (out * torch.from_numpy(x["dout"][rows].astype(np.float64)).nan_to_num()).sum()  # tail: out 0
    loss.backward()
    want.update({k: v.grad.numpy() for k, v in leaf.items() if v.grad is not None})
    if spec["b"]["major"] == "k":
        want["b"] = want["b"].transpose(0, 2, 1)
    return want


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("grouped_shard")
    job, data = [], {}
    for i, name in enumerate(FORMS):
        spec = SPECS[name]
        _, bias, untouched, _ = form(spec)
        x = data[name] = inputs(spec, seed=i)
        stored = dict(x, b=x["b"] if spec["b"]["major"] == "mn" else x["b"].transpose(0, 2, 1))
        np.savez(tmp / f"{name}.npz", **stored)
        dt = {"a": DTYPES[spec["a"]["dtype"]], "b": DTYPES[spec["b"]["dtype"]], "out": DTYPES[spec["out"]["dtype"]],
              "bias": DTYPES[next((op["dtype"] for op in spec["epilogue"] if op["op"] == "bias"), "f32")]}
        job.append({"path": render(spec, tmp).__file__, "name": name, "inputs": str(tmp / f"{name}.npz"), "dtypes": dt,
                    "bias": bias, "untouched": untouched, "scales": fp8(spec)})
    (tmp / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("grouped_tpu_shard.py")), str(tmp / "job.json"),
                           str(tmp / "out.npz")], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return data, dict(np.load(tmp / "out.npz")), json.loads((tmp / "out.npz.json").read_text())


def test_the_step_has_no_psum_but_the_loss_and_the_replicated_weights(sharded) -> None:
    """check_vma=True: the loss's psum and one per replicated argument with a gradient (the entry's casts' transposes:
    B, the bias; fp8's scale_b gets the rule's None, a symbolic zero that takes none); False: the step's own, one per
    replicated argument (scale_b's too)."""
    _, _, found = sharded
    for name in FORMS:
        weights = 1 + form(SPECS[name])[1]
        assert found["psums"][name] == [weights + 1, weights + fp8(SPECS[name])], name


def test_the_native_step_lowers_to_mosaic_for_tpu(sharded) -> None:
    """The native entry's step (interpret=False: no branches, the kernels as outside shard_map) under shard_map with
    check_vma=True, lowered for TPU on the CPU: every backward kernel of the form a Mosaic call, named."""
    _, _, found = sharded
    for name in FORMS:
        spec = SPECS[name]
        pre = ["_pre"] if any(op["op"] in ("activation", "gated") for op in spec["epilogue"]) else []  # G = dOut else
        want = sorted([*pre, "_dgrad", "_wgrad", *(["_dbias"] if form(spec)[1] else [])])
        assert found["lowered"][name] == want, name


@pytest.mark.parametrize("check_vma", [True, False])
def test_gradients_inside_shard_map_against_float64_autograd(sharded, check_vma: bool) -> None:
    data, got, _ = sharded
    for name in FORMS:
        spec = SPECS[name]
        want = reference(spec, data[name])
        tol = 3e-2 if spec["a"]["dtype"] == "bf16" or fp8(spec) else 2e-4  # fp8: a bf16 backward
        for j, what in enumerate(grad_names(spec)):
            g, w = got[f"{name}/{check_vma}/{j}"].astype(np.float64), want[what]
            assert g.shape == w.shape, (name, what, g.shape, w.shape)
            assert not np.isnan(g).any(), f"{name} d{what}: NaN"
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=f"{name} d{what} check_vma={check_vma}")


def test_fp8_gradients_are_the_dequantized_operands_in_bf16_and_the_scales_get_zeros(sharded) -> None:
    """An fp8 forward's step returns dA and dB in the output's dtype (bf16: the rule's cotangents, not A's and B's 8-bit
    dtypes), and scale_a's (per shard) and scale_b's (replicated) gradients exact zeros of their shapes, f32, in
    both vma modes."""
    data, got, found = sharded
    for name in FORMS:
        spec = SPECS[name]
        names = grad_names(spec)
        want = {"a": "bfloat16", "b": "bfloat16", "scale_a": "float32", "scale_b": "float32"} if fp8(spec) else \
            {"a": DTYPES[spec["a"]["dtype"]], "b": DTYPES[spec["b"]["dtype"]]}
        assert dict(zip(names, found["dtypes"][name], strict=True)).items() >= want.items(), name
        for check_vma in (True, False):
            for what in ("scale_a", "scale_b")[:2 * fp8(spec)]:
                g = got[f"{name}/{check_vma}/{names.index(what)}"]
                assert g.shape == data[name][what].shape and not g.any(), (name, what, check_vma)
