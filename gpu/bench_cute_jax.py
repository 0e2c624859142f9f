"""The CuTe JAX entry on the GPU (issue 23): per-call host cost under jax.jit vs the same kernel through the
torch launcher and vs XLA's own dot (64^3, interleaved batches, paired ratios); kernel time of the JAX
entry vs the torch entry and vs XLA's dot (paired CUPTI); cold start (process start to first result) with
an empty cache and from the disk cache, for the JAX entry and the torch launcher.

    python gpu/bench_cute_jax.py --out out/gpu      (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import host_us_interleaved, jax_call, kernel_cycle  # noqa: E402


def kernel_pairs(ours, peer, rounds: int = 30) -> dict:
    """Paired CUPTI time of two calls (one rotation, L2 flushed before each): peer / ours per round."""
    cycle = kernel_cycle({"ours": ours, "peer": peer}, rounds)
    return paired(cycle["ours"]["samples"], cycle["peer"]["samples"]).model_dump()


def paired_ratio(samples: dict[str, list[float]], num: str, den: str) -> float:
    """Median over interleaved batches of num's host time / den's."""
    return paired(samples[den], samples[num]).ratio

ROOT = Path(__file__).resolve().parents[1]
COLD = """
import sys, time
t0 = float(sys.argv[1])
if sys.argv[2] == "jax":
    import jax.numpy as jnp
    from generated.cute.gemm_bf16 import gemm_bf16_jax
    y = gemm_bf16_jax(jnp.ones((256, 256), jnp.bfloat16), jnp.ones((256, 256), jnp.bfloat16)).block_until_ready()
else:
    import torch
    from generated.cute.gemm_bf16 import gemm_bf16
    y = gemm_bf16(torch.ones(256, 256, dtype=torch.bfloat16, device="cuda"),
                  torch.ones(256, 256, dtype=torch.bfloat16, device="cuda").t())
    torch.cuda.synchronize()
print(time.time() - t0)
"""


def cold_start(entry: str, cache: str) -> float | str:
    """Seconds from process start to the first result; the child's last error line if it failed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep the caller's
    env = {**os.environ, "SPECGEN_CUTE_CACHE": cache, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", COLD, repr(time.time()), entry], env=env, capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        return f"failed: {(out.stderr.strip().splitlines() or ['?'])[-1][:300]}"
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/gpu")
    args = ap.parse_args()
    from generated.cute.gemm_bf16 import gemm_bf16, gemm_bf16_jax

    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__}
    # host cost per call, 64^3: async dispatch of each (the GPU drained between batches)
    a, w = jnp.ones((64, 64), jnp.bfloat16), jnp.ones((64, 64), jnp.bfloat16)
    ours, xla = jax.jit(gemm_bf16_jax), jax.jit(lambda a, w: a @ w.T)
    ta, tw = torch.ones(64, 64, dtype=torch.bfloat16, device="cuda"), torch.ones(64, 64, dtype=torch.bfloat16, device="cuda")
    tout = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
    ours(a, w).block_until_ready()
    samples = host_us_interleaved({"jax_entry": lambda: ours(a, w), "torch_entry": lambda: gemm_bf16(ta, tw.t(), out=tout),
                                   "xla_dot": lambda: xla(a, w)})
    med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    result["host_us_64"] = med | {"jax_over_torch": paired_ratio(samples, "jax_entry", "torch_entry"),
                                  "jax_over_xla": paired_ratio(samples, "jax_entry", "xla_dot")}
    # kernel time, paired CUPTI: the JAX entry against the torch entry (the same kernel) and XLA's dot
    n = 8192
    a, w = jnp.ones((n, n), jnp.bfloat16), jnp.ones((n, n), jnp.bfloat16)
    ta, tw = torch.ones(n, n, dtype=torch.bfloat16, device="cuda"), torch.ones(n, n, dtype=torch.bfloat16, device="cuda")
    tout = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")

    result["kernel_8192"] = {
        "vs_torch_entry": kernel_pairs(jax_call(ours, a, w), lambda: gemm_bf16(ta, tw.t(), out=tout)),
        "vs_xla_dot": kernel_pairs(jax_call(ours, a, w), jax_call(xla, a, w)),
    }
    for side in result["kernel_8192"].values():
        side.pop("ours_kernels", None)
    # cold start: a new process to the first result, with an empty cache and then the cache it filled
    with tempfile.TemporaryDirectory() as cache:
        result["cold_start_s"] = {entry: {"empty_cache": cold_start(entry, cache), "disk_cache": cold_start(entry, cache)}
                                  for entry in ("jax", "torch")}
    print(json.dumps(result, indent=1, default=str))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-cute-jax.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
