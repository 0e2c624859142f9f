"""The grouped Pallas TPU module's training entry (its jax.custom_vjp: test_grouped_training_tpu.py) inside
jax.shard_map (issue 38), in Pallas's TPU interpreter on four CPU devices (a subprocess: grouped_tpu_shard.py, the
device count is fixed when jax starts; under shard_map the entry picks Pallas's plain interpreter, the strict one
stalls there). Each shard holds its own ragged batch: its m rows of A and dOut and its own group index (sizes or offs,
empty groups, a shard with no rows in any group, one whose groups fill it); B and the bias are replicated; an
untouched tail's caller `out` is sharded with the rows. jax.grad under jax.jit of the loss over the shards' outputs,
in both vma modes (check_vma=True: B's and the bias's gradients come back summed over the mesh by the entry's casts;
False: each shard's, which the step psums), against float64 torch autograd of the whole problem (every shard's
per-group loop, B and the bias shared): dA and out's per shard, dB and dbias summed over the shards. The traced step
has one psum per replicated argument plus the loss's (check_vma=True): no kernel output typed as not varying. The
native entry's step (interpret=False) lowers to Mosaic for TPU on the CPU."""

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
from specgen.kinds.grouped.testing.tpu_specs import TPU_TRAINING_FORMS

ROOT = Path(__file__).resolve().parents[3]
# Four shards of 21 rows over 8-row tiles; each shard's own group sizes (G = 6).
SHARD_SIZES = ((0, 3, 2, 2, 9, 0), (5, 0, 0, 11, 0, 3), (0, 0, 0, 0, 0, 0), (1, 4, 4, 4, 4, 4))
M, N, K, G = 21, 130, 200, 6
N_GATED_MN = 128
# plain bf16 (bias alone: G = dOut), f32 bias + GELU-tanh preact, gated SwiGLU + bias preact (B K-major, tail zero),
# gated GeGLU-tanh recompute (B N-major, offs, an untouched tail with the caller's out)
FORMS = ("gtt_bias_bf16", "gtt_bias_gelu_tanh_preact", "gtt_swiglu_bias_preact", "gtt_geglu_tanh_recompute_mn")
DTYPES = {"f32": "float32", "bf16": "bfloat16"}


def form(spec: dict) -> tuple[bool, bool, bool, int]:
    """(gated, bias, untouched tail, N)."""
    gated = spec["epilogue"][0]["op"] == "gated"
    return (gated, any(op["op"] == "bias" for op in spec["epilogue"]), spec["groups"]["tail"] == "untouched",
            N_GATED_MN if gated and spec["b"]["major"] == "mn" else N)


def index_of(spec: dict, sizes: tuple[int, ...]) -> np.ndarray:
    return np.cumsum(sizes) if spec["groups"]["index"] == "offs" else np.asarray(sizes)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as the entry sees it in `dtype` (bf16: rounded), in f32."""
    return x.astype(np.float32) if dtype == "f32" else torch.from_numpy(x.astype(np.float32)).bfloat16().float().numpy()


def inputs(spec: dict, seed: int) -> dict[str, np.ndarray]:
    """A (S*m, K), B logical (G, K, N or 2N), the bias (G, N), out's base and dOut (S*m, N), the index (S, G)."""
    gated, _, _, n = form(spec)
    rng = np.random.default_rng(seed)
    s = len(SHARD_SIZES)
    dt = spec["a"]["dtype"]
    return {"a": rounded(rng.standard_normal((s * M, K)) / np.sqrt(K), dt),
            "b": rounded(rng.standard_normal((G, K, 2 * n if gated else n)), dt),
            "bias": rounded(rng.standard_normal((G, n)), dt), "base": rounded(rng.standard_normal((s * M, n)), dt),
            "dout": rng.standard_normal((s * M, n)).astype(np.float32),
            "index": np.stack([index_of(spec, sz) for sz in SHARD_SIZES]).astype(np.int32)}


def reference(spec: dict, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 torch autograd of the whole problem: each shard's per-group loop over its rows (B and the bias shared),
    the loss summed over the shards; B's gradient in its stored layout."""
    _, bias_op, untouched, _ = form(spec)
    leaf = {k: torch.from_numpy(x[k].astype(np.float64)).requires_grad_() for k in ("a", "b", "bias", "base")}
    args = {op["name"]: leaf["bias"] for op in spec["epilogue"] if op["op"] == "bias"}
    loss = 0
    for s in range(len(SHARD_SIZES)):
        rows = slice(s * M, (s + 1) * M)
        out, written = grouped(spec, leaf["a"][rows], leaf["b"], torch.from_numpy(x["index"][s]), args)
        if untouched:
            out = torch.where(written[:, None], out, leaf["base"][rows])
        loss = loss + (out * torch.from_numpy(x["dout"][rows].astype(np.float64))).sum()
    loss.backward()
    want = {k: v.grad.numpy() for k, v in leaf.items() if v.grad is not None}
    if spec["b"]["major"] == "k":
        want["b"] = want["b"].transpose(0, 2, 1)
    return want


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("grouped_shard")
    job, data = [], {}
    for i, name in enumerate(FORMS):
        spec = TPU_TRAINING_FORMS[name]
        _, bias, untouched, _ = form(spec)
        x = data[name] = inputs(spec, seed=i)
        stored = dict(x, b=x["b"] if spec["b"]["major"] == "mn" else x["b"].transpose(0, 2, 1))
        np.savez(tmp / f"{name}.npz", **stored)
        dt = {"a": DTYPES[spec["a"]["dtype"]], "b": DTYPES[spec["b"]["dtype"]], "out": DTYPES[spec["out"]["dtype"]],
              "bias": DTYPES[next((op["dtype"] for op in spec["epilogue"] if op["op"] == "bias"), "f32")]}
        job.append({"path": render(spec, tmp).__file__, "name": name, "inputs": str(tmp / f"{name}.npz"), "dtypes": dt,
                    "bias": bias, "untouched": untouched})
    (tmp / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("grouped_tpu_shard.py")), str(tmp / "job.json"),
                           str(tmp / "out.npz")], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return data, dict(np.load(tmp / "out.npz")), json.loads((tmp / "out.npz.json").read_text())


def test_the_step_has_no_psum_but_the_loss_and_the_replicated_weights(sharded) -> None:
    """check_vma=True: the loss's psum and one per replicated argument (the entry's casts' transposes: B, the bias);
    False: the step's own, one per replicated argument."""
    _, _, found = sharded
    for name in FORMS:
        replicated = 1 + form(TPU_TRAINING_FORMS[name])[1]
        assert found["psums"][name] == [replicated + 1, replicated], name


def test_the_native_step_lowers_to_mosaic_for_tpu(sharded) -> None:
    """The native entry's step (interpret=False: no branches, the kernels as outside shard_map) under shard_map with
    check_vma=True, lowered for TPU on the CPU: every backward kernel of the form a Mosaic call, named."""
    _, _, found = sharded
    for name in FORMS:
        spec = TPU_TRAINING_FORMS[name]
        pre = ["_pre"] if any(op["op"] in ("activation", "gated") for op in spec["epilogue"]) else []  # G = dOut else
        want = sorted([*pre, "_dgrad", "_wgrad", *(["_dbias"] if form(spec)[1] else [])])
        assert found["lowered"][name] == want, name


@pytest.mark.parametrize("check_vma", [True, False])
def test_gradients_inside_shard_map_against_float64_autograd(sharded, check_vma: bool) -> None:
    data, got, _ = sharded
    for name in FORMS:
        spec = TPU_TRAINING_FORMS[name]
        _, bias, untouched, _ = form(spec)
        want = reference(spec, data[name])
        names = ["a", "b", *(["bias"] if bias else []), *(["base"] if untouched else [])]
        tol = 3e-2 if spec["a"]["dtype"] == "bf16" else 2e-4
        for j, what in enumerate(names):
            g, w = got[f"{name}/{check_vma}/{j}"].astype(np.float64), want[what]
            assert g.shape == w.shape, (name, what, g.shape, w.shape)
            assert not np.isnan(g).any(), f"{name} d{what}: NaN"
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=f"{name} d{what} check_vma={check_vma}")
