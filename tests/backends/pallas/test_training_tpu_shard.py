"""jax.grad under jax.jit inside jax.shard_map of the Pallas TPU training entry with the other chains and with `batch =
true` (issue 38; docs/training/shard_map.md, "JAX training under jax.shard_map"), in Pallas's TPU interpret mode over four CPU
devices (a subprocess: tests/backends/pallas/tpu_shard.py), f32 operands, against float64 torch autograd of the whole
problem within 1e-5 of the largest magnitude:

- a chain (bias along m, sigmoid, a column scale, a residual with beta 0.5, a clamp), unbatched, recompute: A's rows, the
  row bias, the residual and dOut sharded, B and the column scale replicated, in both vma modes;
- batched [bias, silu], preact, sharded over the batch: each device its entries of A, B and dOut (B's gradient per
  shard, as B is), the bias replicated (its gradient summed over every device's entries);
- the batched chain, preact, sharded over the rows of every entry: B (batch, N, K) replicated (each entry's gradient
  summed over the mesh), the row bias and the residual's rows sharded.

The dense chains' shard_map test ([bias, gelu], both modes) is tests/backends/pallas/test_training_tpu.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.pallas.test_training_tpu import close, module
from backends.pallas.test_training_tpu_batch import batch_spec, inputs, reference

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

# name: (spec, shape ((batch,) M, N, K), each argument's and dOut's PartitionSpec by argument name, vma modes)
ROWS, REP = ["x", None], []
CASES = {
    "chain_rows": (batch_spec("chain", "recompute", batch=False), (4 * 9, 45, 29),
                   {"a": ROWS, "b": REP, "rbias": ["x"], "col_scale": REP, "res": ROWS, "dout": ROWS}, [True, False]),
    "batch_entries": (batch_spec("bias_silu", "preact"), (4, 9, 45, 29),
                      {"a": ["x", None, None], "b": ["x", None, None], "bias": REP, "dout": ["x", None, None]}, [True]),
    "batch_chain_rows": (batch_spec("chain", "preact"), (2, 4 * 5, 45, 29),
                         {"a": [None, "x", None], "b": REP, "rbias": ["x"], "col_scale": REP, "res": [None, "x", None],
                          "dout": [None, "x", None]}, [True]),
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict]:
    """One subprocess for every case: its gradients (npz) and, per case, (argument names, float64's gradients)."""
    work = tmp_path_factory.mktemp("tpu_shard")
    job, want = [], {}
    for i, (name, (spec, shape, parts, modes)) in enumerate(CASES.items()):
        args, names, grad = inputs(spec, shape, seed=i)
        names = ["a", "b", *names]
        np.savez(work / f"{name}.npz", **{f"x{j}": np.asarray(x, np.float32) for j, x in enumerate([*args, grad])})
        job.append({"path": module(spec, tmp_path_factory).__file__, "name": spec["name"], "inputs": str(work / f"{name}.npz"),
                    "dtypes": [str(x.dtype) for x in [*args, grad]], "specs": [parts[n] for n in [*names, "dout"]],
                    "modes": modes})
        want[name] = (names, reference(spec, args, names[2:], grad)[1])
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    script = Path(__file__).with_name("tpu_shard.py")
    proc = subprocess.run([sys.executable, str(script), str(work / "job.json"), str(work / "out.npz")], env=env,
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(work / "out.npz") as data:
        return {k: data[k] for k in data.files}, want


@pytest.mark.parametrize("name", CASES)
def test_shard_map_gradients_equal_float64_autograd(name: str, sharded) -> None:
    got, want = sharded
    i = list(CASES).index(name)
    names, grads = want[name]
    assert int(got[f"{i}/devices"]) == 4
    for check_vma in CASES[name][3]:
        for j, (arg, w) in enumerate(zip(names, grads, strict=True)):
            g = got[f"{i}/{check_vma}/{j}"]
            assert g.shape == tuple(w.shape) and np.isfinite(g).all(), (name, check_vma, arg, g.shape)
            close(g, w, 1e-5, f"{name} check_vma={check_vma} d{arg}")

