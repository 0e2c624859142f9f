"""Calibrate the Mosaic GPU SMEM model on real lowerings (run on a CUDA machine with jax[cuda]).

Lowers and compiles JAX's own warp-specialized Hopper matmul (jax.experimental.pallas.ops.gpu.
hopper_matmul_mgpu: two consumer warpgroups splitting N, a 2-slot 64x64 epilogue buffer per
warpgroup, TMA store) at several tiles and depths, and prints, per config, whether it fit and the
SMEM figure Mosaic GPU reports, beside specgen's model for that kernel structure (the Pallas design's
`memory` for pallas:gpu_sm90 at the CTA tile m x 2n x k). One JSON line per config; the recorded H200
run is bench/results/2026-11-22-h200-mgpu-smem.jsonl.

`--catalogue`: instead, lower each rendered catalogue module (generated/pallas/gpu_sm90/) with Mosaic
GPU's SMEM limit set to 1 byte, whose error carries the exact figure the kernel allocates, beside the
plan's. This runs on a CPU machine too, with absl-py and the jax-cuda12 plugin/pjrt wheels installed
(`lowering_platforms=("cuda",)`); the record is bench/results/2026-11-22-cpu-mgpu-smem-catalogue.jsonl.
"""

from __future__ import annotations

import json
import re
import sys

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

from specgen.resolve import memory
from specgen.spec.models import GemmSpec
from specgen.targets import TARGETS

CONFIGS = [  # (per-warpgroup tile m, n, k, max_concurrent_steps)
    (128, 128, 64, 4), (128, 128, 64, 5), (128, 256, 64, 4), (128, 256, 64, 3), (128, 256, 64, 2),
    (64, 128, 64, 4), (128, 128, 128, 2), (128, 128, 128, 3),
]


def model_bytes(wg_m: int, wg_n: int, tile_k: int, steps: int) -> int:
    """specgen's figure for the CTA tile the example runs: two consumer warpgroups side by side in N."""
    spec = GemmSpec.model_validate({
        "name": "probe", "kind": "gemm", "a": {"dtype": "bf16"}, "b": {"dtype": "bf16"}, "out": {"dtype": "bf16"},
        "tile": {"m": wg_m, "n": 2 * wg_n, "k": tile_k}, "targets": ["pallas:gpu_sm90"],
    })
    return memory(spec, TARGETS["pallas:gpu_sm90"], steps).total


def catalogue() -> None:
    import importlib
    from pathlib import Path

    from jax.experimental.mosaic.gpu import core as mgpu_core

    from specgen.designs.gemm_pallas.design import JNP_DTYPES
    from specgen.spec.dtypes import DType

    platforms = None if jax.default_backend() == "gpu" else ("cuda",)
    for path in sorted(Path("generated/pallas/gpu_sm90").glob("*.py")):
        if path.name == "__init__.py":
            continue
        mod = importlib.import_module(f"generated.pallas.gpu_sm90.{path.stem}")
        spec = GemmSpec.model_validate(mod.SPEC)
        lead = (2,) if spec.batch else ()
        m = n = k = 512

        def struct(shape: tuple[int, ...], dt: object) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dt]))  # type: ignore[index]

        args: list = [struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
                      struct((*lead, n, k) if spec.b.major == "k" else (*lead, k, n), spec.b.dtype)]
        for arg in spec.runtime_args():
            shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": (1,)}[arg.shape]
            args.append(struct(shape, DType.f32 if arg.shape == "scalar" else arg.dtype))
        traced = jax.jit(mod._call).trace(*args)
        row = {"kernel": path.stem, "plan": mod.SMEM_BYTES}
        with mgpu_core.artificial_shared_memory_limit(1):
            try:
                traced.lower(lowering_platforms=platforms) if platforms else traced.lower()
                row["lowered"] = None
            except Exception as e:  # the figure is in Mosaic GPU's message
                hit = re.search(r"smem_bytes=(\d+)", str(e))
                row["lowered"] = int(hit.group(1)) if hit else None
                if not hit:
                    row["err"] = str(e)[-300:]
        print(json.dumps(row), flush=True)
    print(json.dumps({"jax": jax.__version__, "backend": jax.default_backend()}), file=sys.stderr)


def main() -> None:
    if "--catalogue" in sys.argv:
        catalogue()
        return
    a = b = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    for tm, tn, tk, steps in CONFIGS:
        cfg = hm.TuningConfig(tile_m=tm, tile_n=tn, tile_k=tk, max_concurrent_steps=steps, epi_tile_m=64,
                              epi_tile_n=64)
        row = {"wg_tile": [tm, tn, tk], "steps": steps, "model": model_bytes(tm, tn, tk, steps)}
        try:
            jax.jit(lambda a, b, cfg=cfg: hm.matmul(a, b, None, cfg)).lower(a, b).compile()
            row["fits"] = True
        except Exception as e:  # the lowering's SMEM error carries the figure (any other error shows too)
            text = str(e)
            row["fits"] = False
            nums = [int(x) for x in re.findall(r"(\d{5,7})", text)]
            row["nums"] = nums[:4]
            row["err"] = text[:240]
        print(json.dumps(row), flush=True)
    print(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0])}), file=sys.stderr)


if __name__ == "__main__":
    main()
