"""The grouped Mosaic GPU module's training entry (its jax.custom_vjp: test_grouped_training_mgpu.py) inside
jax.shard_map (issue 38), on four CPU devices in a subprocess (grouped_mgpu_shard.py: the device count is fixed when
jax starts). Each shard holds its own ragged batch: its m rows of A and dOut and its own group index (sizes or offs,
empty groups, a shard with no rows in any group, one whose groups fill it); B and the bias are replicated; an
untouched tail's caller `out` is sharded with the rows (an fp8 forward's scale_a too, its scale_b replicated); dOut is NaN in the rows past a shard's last group where the
tail is zero (they take no part). jax.grad under jax.jit of the loss over the shards' outputs, in both vma modes
(check_vma=True: B's and the bias's gradients come back summed over the mesh by the entry's casts' transposes;
False: each shard's, which the step psums).

What the CPU exercises, and what it does not: Mosaic GPU has no interpreter, so the real kernels never run here.
- The real entry's step is traced in both modes and lowered for CUDA with check_vma=True: the custom_vjp's types under shard_map (before
  session 28, check_vma=True refused it: the forward rule's output varied over the mesh, the primal's, typed by
  plgpu.kernel, did not), every backward kernel in the lowered program, and no psum but the loss's and one per
  replicated argument (a kernel output typed as not varying would add one, its cotangent summed over the mesh).
- The gradients' numbers come from the step with the kernels replaced by jnp models of their contracts (the glue:
  G, its masks, dbias, each GEMM's operands and orientation, the casts), against float64 torch autograd of the whole
  problem (every shard's per-group loop, B and the bias shared): dA and out's per shard, dB and dbias summed.
The real kernels inside shard_map (a one-device mesh): tests/gpu/test_grouped_training_mgpu_shard_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.pallas.grouped_mgpu_shard import layout
from backends.pallas.test_grouped_mgpu import render
from backends.pallas.test_grouped_training_mgpu import _reference
from specgen.kinds.grouped.testing.mgpu_specs import (
    MGPU_FP8_TRAINING_FORMS,
    MGPU_GATED_TRAINING_FORMS,
    MGPU_TRAINING_FORMS,
)
from specgen.kinds.grouped.testing.reference import dequantized

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.xdist_group("grouped_mgpu_shard")  # one worker builds the subprocess fixture
# Four shards of 21 rows; each shard's own group sizes (G = 6): empty groups first, in the middle and last, a shard
# with no rows in any group, one whose groups fill it.
SHARD_SIZES = ((0, 3, 2, 2, 9, 0), (5, 0, 0, 11, 0, 3), (0, 0, 0, 0, 0, 0), (1, 4, 4, 4, 4, 4))
M, N, K = 21, 24, 40
# a plain bias + GELU-tanh preact (B K-major, offs), a halves SwiGLU + bias preact (B K-major), an interleaved
# GeGLU-tanh recompute (f16, offs, an untouched tail with the caller's `out`), an fp8 e5m2 SiLU recompute (an untouched
# tail; scale_a with the rows, scale_b replicated; the gradients of the dequantized operands)
SPECS = {name: {**MGPU_TRAINING_FORMS, **MGPU_GATED_TRAINING_FORMS, **MGPU_FP8_TRAINING_FORMS}[name] for name in (
    "gmt_bias_gelu_tanh_preact_k", "gmt_swiglu_bias_preact_k", "gmt_geglu_il_recompute_k_f16",
    "gmt_fp8_e5m2_silu_recompute")}
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def fp8(spec: dict) -> bool:
    return spec["a"]["dtype"].startswith("fp8")


def form(spec: dict) -> tuple[bool, bool]:
    """(bias, untouched tail)."""
    return any(op["op"] == "bias" for op in spec["epilogue"]), spec["groups"]["tail"] == "untouched"


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the entry sees it in `dtype`, in f32."""
    import jax.numpy as jnp

    return np.asarray(jnp.asarray(x, DTYPES[dtype]).astype(jnp.float32))


def inputs(spec: dict, seed: int) -> dict[str, np.ndarray]:
    """A (S*m, K), B as stored (G, N or 2N, K) K-major or (G, K, N or 2N), the bias (G, N), out's base and dOut (S*m, N)
    (NaN past each shard's last group with a zero tail), the index (S, G): sizes or offs."""
    _, untouched = form(spec)
    rng = np.random.default_rng(seed)
    s, g, dt = len(SHARD_SIZES), len(SHARD_SIZES[0]), spec["a"]["dtype"]
    nb = 2 * N if layout(spec) else N
    dout = rng.standard_normal((s * M, N)).astype(np.float32)
    if not untouched:  # the rows past a shard's last group: no gradient may read them
        for i, sizes in enumerate(SHARD_SIZES):
            dout[i * M + sum(sizes):(i + 1) * M] = np.nan
    bias = next((op["dtype"] for op in spec["epilogue"] if op["op"] == "bias"), "f32")
    index = np.stack([np.cumsum(sz) if spec["groups"]["index"] == "offs" else np.asarray(sz) for sz in SHARD_SIZES])
    scales = {"scale_a": (rng.uniform(0.5, 1.5, s * M) / K).astype(np.float32),
              "scale_b": rng.uniform(0.5, 1.5, (g, N)).astype(np.float32)} if fp8(spec) else {}
    return {**scales, "a": rounded(rng.standard_normal((s * M, K)) * (2.0 if fp8(spec) else 0.5), dt),
            "b": rounded(rng.standard_normal((g, nb, K) if spec["b"]["major"] == "k" else (g, K, nb)) * 0.3, dt),
            "bias": rounded(rng.standard_normal((g, N)), bias), "base": rounded(rng.standard_normal((s * M, N)), dt),
            "dout": dout, "index": index.astype(np.int32)}


def reference(spec: dict, x: dict[str, np.ndarray]) -> list[np.ndarray]:
    """float64 autograd of the whole problem, in the step's gradient order (a, b, [bias], [out]): each shard's
    per-group loop (test_grouped_training_mgpu.py's), A's and out's rows per shard, B's and the bias's summed."""
    bias, untouched = form(spec)
    a, b = x["a"], x["b"]
    if fp8(spec):  # the dequantized operands' gradients: the loop over A scale_a and B[g] scale_b[g], the chain past them
        a, b = dequantized(a, b, x["scale_a"], x["scale_b"], spec["b"]["major"])
        spec = {**spec, "epilogue": spec["epilogue"][1:]}
    parts = []
    for s, sizes in enumerate(SHARD_SIZES):
        rows = slice(s * M, (s + 1) * M)
        parts.append(_reference(spec, a[rows], b, np.asarray(sizes), x["bias"] if bias else None,
                                np.nan_to_num(x["dout"][rows]), x["base"][rows] if untouched else None))
    want = [np.concatenate([p[0] for p in parts]), sum(p[1] for p in parts)]
    return want + ([sum(p[2] for p in parts)] if bias else []) + ([np.concatenate([p[3] for p in parts])] if untouched else [])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("grouped_mgpu_shard")
    job, data = [], {}
    for i, (name, spec) in enumerate(SPECS.items()):
        bias, untouched = form(spec)
        x = data[name] = inputs(spec, seed=i)
        np.savez(tmp / f"{name}.npz", **x)
        dt = {"a": DTYPES[spec["a"]["dtype"]], "b": DTYPES[spec["b"]["dtype"]], "out": DTYPES[spec["out"]["dtype"]],
              "bias": DTYPES[next((op["dtype"] for op in spec["epilogue"] if op["op"] == "bias"), "f32")]}
        job.append({"path": render(spec, tmp).__file__, "name": name, "spec": spec, "inputs": str(tmp / f"{name}.npz"),
                    "dtypes": dt, "bias": bias, "untouched": untouched, "fp8": fp8(spec)})
    (tmp / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("grouped_mgpu_shard.py")), str(tmp / "job.json"),
                           str(tmp / "out.npz")], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return data, dict(np.load(tmp / "out.npz")), json.loads((tmp / "out.npz.json").read_text())


def test_the_real_step_lowers_with_every_backward_kernel(sharded) -> None:
    """The real entry's step under shard_map with check_vma=True (the mode that types every array over the mesh; with
    False it traces too: the psum test), lowered for CUDA: every backward kernel of the form a Mosaic GPU launch named
    as its role (forward_pre or recompute with an activation or gated op, dgrad, wgrad)."""
    _, _, found = sharded
    for name, spec in SPECS.items():
        pre = ["_forward_pre" if spec["training"]["save"] == "preact" else "_recompute"]
        assert found["lowered"][name] == sorted([*pre, "_dgrad", "_wgrad"]), name


def test_the_step_has_no_psum_but_the_loss_and_the_replicated_weights(sharded) -> None:
    """check_vma=True: the loss's psum and one per replicated argument (B, the bias: the entry's casts' transposes);
    no kernel output typed as not varying adds one. check_vma=False: the step's own, one per replicated argument."""
    _, _, found = sharded
    for name, spec in SPECS.items():
        weights = 1 + form(spec)[0]
        assert found["psums"][name] == [weights + 1, weights], name


@pytest.mark.parametrize("check_vma", [True, False])
def test_gradients_inside_shard_map_against_float64_autograd(sharded, check_vma: bool) -> None:
    """The glue's gradients (kernels as jnp models) against the whole problem's: dA per shard (exactly 0 past each
    shard's groups, all of the empty shard's), dB and dbias summed over the shards, the caller's `out` dOut past each
    shard's groups."""
    data, got, _ = sharded
    for name, spec in SPECS.items():
        want = reference(spec, data[name])
        for j, w in enumerate(want):
            g = got[f"{name}/{check_vma}/{j}"].astype(np.float64)
            assert g.shape == w.shape and not np.isnan(g).any(), (name, j, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=3e-2, atol=3e-2 * max(1.0, float(np.abs(w).max())),
                                       err_msg=f"{name} gradient {j} check_vma={check_vma}")
        da = got[f"{name}/{check_vma}/0"]
        for s, sizes in enumerate(SHARD_SIZES):
            assert not da[s * M + sum(sizes):(s + 1) * M].any(), (name, s)  # rows past a shard's groups: dA = 0
