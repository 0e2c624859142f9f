"""jax.grad of the training modules' JAX entries (their jax.custom_vjp) inside jax.shard_map (issue 38): the Mosaic GPU
entry (pallas:gpu_sm90) and the CuTe sm90 entry, dense and gated, on four CPU devices in one subprocess (the device
count is fixed when jax starts): A's rows and dOut's sharded, B and the bias replicated (tests/backends/shard_grads.py's
step; the Pallas TPU entry's: tests/backends/pallas/test_training_tpu.py). The kernels run on a Hopper GPU only, so:

- the real entry's gradient program traces under shard_map with check_vma=True (and False for the catalogue kernels),
  every backward kernel in it (Mosaic GPU: lowered for CUDA), with no psum but the loss's and the replicated
  arguments' gradients': the arguments cast to vary over the mesh, each kernel's outputs typed as its inputs vary,
  the custom_vjp's cotangents typed as their primals (before, check_vma=True refused a replicated B's gradient, and
  jax 0.10's plgpu.kernel typed its outputs as not varying: jax would have summed their cotangents over the mesh);
- with each kernel replaced by a jnp model of its contract (as test_training_mgpu_gated.py's glue test does), the
  gradients match float64 torch autograd of the reference over the whole problem: A's per shard, B's and the bias's
  summed over the mesh (check_vma=True: by the casts' transpose, as jax's own autodiff; False: by the step's psum).
The real kernels under jit and shard_map: tests/gpu/test_training_shard_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SHAPE, GATED_SHAPE = (148, 72, 42), (148, 36, 42)  # 4 shards of 37 rows; N and K off every tile and 16 bytes (K)


def dense(name: str, act: str, save: str, a: str, b: str, target: str, tile: dict) -> dict:
    epilogue = [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "activation", "fn": act}]
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b},
            "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save}, "tile": tile,
            "schedule": {"persistent": True, "group_m": 8}, "targets": [target]}


def gated(name: str, fn: str, layout: str, save: str, a: str, b: str, target: str) -> dict:
    spec = dense(name, fn, save, a, b, target, {"m": 128, "n": 128, "k": 64})
    spec["epilogue"] = [{"op": "gated", "fn": fn, "layout": layout}, {"op": "bias", "along": "n", "dtype": "bf16"}]
    if target == "cute:sm90":
        spec["cute"] = {"mma_warpgroups": 2}
    return spec


def cases() -> dict:
    """name: (kind, spec, shape, check_vma modes): each backend's catalogue kernel (preact) in both modes; recompute
    with A mn-major, a halves SwiGLU (preact) and an interleaved GeGLU-tanh (CuTe: recompute) with check_vma."""
    specs = {ls.name: ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs" / "training.toml"])}
    wide = {"m": 128, "n": 256, "k": 64}
    return {
        "linear_gelu_train_mgpu": ("mgpu", specs["linear_gelu_train_mgpu"], SHAPE, [True, False]),
        "mjs_silu_rec": ("mgpu", dense("mjs_silu_rec", "silu", "recompute", "mn", "k", "pallas:gpu_sm90", wide), SHAPE, [True]),
        "mjs_swiglu_pre": ("mgpu", gated("mjs_swiglu_pre", "silu", "halves", "preact", "k", "mn", "pallas:gpu_sm90"), GATED_SHAPE, [True]),
        "linear_gelu_train_cute_bf16": ("cute", specs["linear_gelu_train_cute_bf16"], SHAPE, [True, False]),
        "cjs_silu_rec": ("cute", dense("cjs_silu_rec", "silu", "recompute", "mn", "mn", "cute:sm90", wide), SHAPE, [True]),
        "cjs_swiglu_pre": ("cute", gated("cjs_swiglu_pre", "silu", "halves", "preact", "k", "k", "cute:sm90"), GATED_SHAPE, [True]),
        "cjs_geglu_il_rec": ("cute", gated("cjs_geglu_il_rec", "gelu_tanh", "interleaved", "recompute", "mn", "k", "cute:sm90"), GATED_SHAPE, [True]),
    }


def kernels_of(kind: str, spec: dict) -> list[str]:
    """The backward's kernels the gradient program must call (Mosaic GPU: role kernels' names; CuTe: XLA calls')."""
    save, (_, layout, bias) = spec["training"]["save"], _form(spec)
    if kind == "mgpu":
        return sorted([*(["forward_pre", "grad_cols"] if save == "preact" else ["recompute"]), "dgrad", "wgrad"])
    cols = (["grad_cols_gated" if layout else "grad_cols"] if save == "preact" else ["grad_cols_sum"] if bias else [])
    return sorted([*(["forward_pre"] if save == "preact" else ["recompute"]), *cols, "dgrad", "wgrad",
                   *(["grad_cols_bands"] if bias else [])])


def _form(spec: dict):
    from backends.shard_grads import form

    return form(spec)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict, dict]:
    from kernels import load_target_module

    from backends.pallas.test_mgpu_module import render

    tmp = tmp_path_factory.mktemp("shard_map")
    job = []
    for name, (kind, spec, shape, modes) in cases().items():
        if name.startswith("linear_gelu"):
            path = ROOT / "generated" / ("pallas/gpu_sm90" if kind == "mgpu" else "cute") / f"{name}.py"
        elif kind == "mgpu":
            path = Path(render(spec, tmp)[0].__file__)
        else:
            path = Path(load_target_module(spec, "cute:sm90", tmp, "_specgen_test_shard_")[0].__file__)
        job.append({"kind": kind, "path": str(path), "spec": spec, "shape": shape, "modes": modes})
    (tmp / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    proc = subprocess.run([sys.executable, str(TESTS / "backends" / "shard_grads.py"), str(tmp / "job.json"),
                           str(tmp / "out.npz")], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return cases(), dict(np.load(tmp / "out.npz")), json.loads((tmp / "out.npz.json").read_text())


def test_the_real_kernels_trace_under_shard_map(sharded) -> None:
    """Every backward kernel in the program; one psum per replicated argument (with check_vma: the casts' transposes;
    without: the step's), and the loss's with check_vma: no cotangent summed over the mesh."""
    specs, _, found = sharded
    for name, (kind, spec, _, modes) in specs.items():
        replicated = 2 if _form(spec)[2] else 1  # B and the bias
        assert found[name] == [[kernels_of(kind, spec), replicated + check_vma] for check_vma in modes], name


def test_gradients_inside_shard_map_against_float64_autograd(sharded) -> None:
    from gpu.test_training_mgpu_gpu import err, reference

    from backends.shard_grads import inputs

    specs, got, _ = sharded
    for name, (_, spec, shape, modes) in specs.items():
        args, dout = inputs(spec, shape)
        _, want = reference(spec, args, dout)
        for check_vma in modes:
            for j, (what, w) in enumerate(zip(("da", "db", "dbias"), want, strict=False)):
                g = got[f"{name}/{check_vma}/{j}"]
                assert g.shape == w.shape, (name, what, g.shape, w.shape)
                e, scale = err(g, w)
                assert e <= 2e-2 * scale, f"{name} {what} (check_vma={check_vma}): error {e:.3g} of {scale:.3g}"
