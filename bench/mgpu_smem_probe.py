"""Calibrate the Mosaic GPU SMEM model on real lowerings (run on a CUDA machine with jax[cuda]).

Lowers and compiles JAX's own warp-specialized Hopper matmul (jax.experimental.pallas.ops.gpu.
hopper_matmul_mgpu: two consumer warpgroups splitting N, a 2-slot 64x64 epilogue buffer per
warpgroup, TMA store) at several tiles and depths, and prints, per config, whether it fit and the
SMEM figure Mosaic GPU reports, beside specgen's model for that kernel structure (the Pallas design's
`memory` for pallas:gpu_sm90 at the CTA tile m x 2n x k). One JSON line per config; the recorded H200
run is bench/results/2026-11-22-h200-mgpu-smem.jsonl.
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


def main() -> None:
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
