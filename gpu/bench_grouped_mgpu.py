"""The grouped Pallas Mosaic GPU kernel (pallas:gpu_sm90) against jax.lax.ragged_dot under jax.jit on the
issue's rows, with the project's paired CUPTI timer (`specgen.bench.timing.kernel_cycle`: every call once per
round in a rotating order, L2 flushed before each; a JAX call waits for torch's stream first and is waited for).

The kernel is the catalogue's `moe_bf16` module (B (G, N, K) K-major, as torch._grouped_mm callers pass it, the
default config and the configs named by --configs forced through `_call(..., config=)`); ragged_dot takes its own
(G, K, N) layout. An A/A pair (the module against itself) shows the timer's spread; torch._grouped_mm on the same
sizes is printed beside it (the issue's peer), timed from torch. Group sizes come from the kind's
declared distributions (specgen/kinds/grouped/problem.py, seeded).

    python gpu/bench_grouped_mgpu.py --out out/gpu [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import kernel_cycle  # noqa: E402
from specgen.kinds.grouped.problem import Shape, group_sizes  # noqa: E402

ROWS = {"deepseek_up": Shape(32, 128, 4096, 7168), "deepseek_up_skewed": Shape(32, 128, 4096, 7168, 1),
        "deepseek_down": Shape(32, 128, 7168, 2048), "mixtral_up": Shape(8, 1024, 14336, 4096),
        "decode": Shape(32, 2, 4096, 7168)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--configs", default="128x128x64x4,64x256x64x4", help="tile_m x tile_n x tile_k x stages")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_bf16 as mod

    base = mod.CONFIG
    configs = {"default": base}
    for item in filter(None, args.configs.split(",")):
        tm, tn, tk, st = (int(x) for x in item.split("x"))
        configs[item] = base._replace(tile_m=tm, tile_n=tn, tile_k=tk, stages=st, wg_n=tn // 2,
                                      epi_m=min(64, tm), epi_n=min(64, tn // 2), smem_bytes=0)
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__,
                                 "torch": torch.__version__, "rows": {}}
    ragged = jax.jit(lambda a, b, sizes: jax.lax.ragged_dot(a, b, sizes))

    def jax_call(f, *xs):  # XLA's stream is not torch's: order the call after the flush, and wait for it
        return lambda: (torch.cuda.synchronize(), f(*xs).block_until_ready())

    for label, shape in ROWS.items():
        sizes = group_sizes(shape)
        key = jax.random.key(0)
        a = jax.random.normal(key, (shape.rows, shape.k), jnp.bfloat16)
        w = jax.random.normal(jax.random.fold_in(key, 1), (shape.g, shape.n, shape.k), jnp.bfloat16) * 0.02
        w_kn = jnp.swapaxes(w, 1, 2).copy()  # ragged_dot's own (G, K, N) layout, materialized
        offs = jnp.cumsum(jnp.asarray(sizes, jnp.int32)).astype(jnp.int32)
        gs = jnp.asarray(sizes, jnp.int32)
        calls = {"ragged_dot": jax_call(ragged, a, w_kn, gs)}
        for name, cfg in configs.items():
            calls[f"ours_{name}"] = jax_call(lambda a, w, o, cfg=cfg: mod._call(a, w, o, None, config=cfg), a, w, offs)
        calls["ours_default_again"] = calls["ours_default"]  # A/A
        ta = torch.from_dlpack(a)
        tw = torch.from_dlpack(w)
        toffs = torch.from_dlpack(offs)
        calls["torch_grouped_mm"] = lambda ta=ta, tw=tw, toffs=toffs: torch._grouped_mm(ta, tw.transpose(-2, -1), offs=toffs)
        cycle = kernel_cycle(calls, args.rounds)
        ours = cycle["ours_default"]["samples"]
        row = {"sizes": sizes, "ours_default_us": paired(ours, ours).ours_us}
        for name in calls:
            if name != "ours_default":
                row[f"{name}_over_ours_default"] = paired(ours, cycle[name]["samples"]).model_dump()
        row["kernels"] = {name: cycle[name]["kernels"] for name in calls}
        result["rows"][label] = row
        print(label, json.dumps({k: (v["ratio"], v["peer_us"]) if isinstance(v, dict) and "ratio" in v else v
                                 for k, v in row.items() if k not in ("kernels", "sizes")}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-grouped-mgpu.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
