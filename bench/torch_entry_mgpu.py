"""One training step of the Mosaic GPU catalogue layer (generated/pallas/gpu_sm90/linear_gelu_train_mgpu.py, preact)
through its torch entry (the differentiable op: jax.vjp of the JAX entry, forward_pre once, then its pullback on
.backward()) against jax.vjp of the JAX entry applied in one jitted program, and either entry's forward alone, on one GPU.
Wall time of the whole step (host included), median of ROUNDS after warm-up, M = N = K = 4096 bf16 unless given.

    python3 bench/torch_entry_mgpu.py [M N K]
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import torch

from generated.pallas.gpu_sm90 import linear_gelu_train_mgpu as mod

ROUNDS, WARM = 20, 3


def timed(fn, sync) -> float:
    for _ in range(WARM):
        fn()
    sync()
    times = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    m, n, k = (int(x) for x in sys.argv[1:4]) if len(sys.argv) > 3 else (4096, 4096, 4096)
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    w = (torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16()
    bias = torch.randn(n, generator=g, device="cuda").bfloat16()
    dout = torch.randn(m, n, generator=g, device="cuda").bfloat16()
    leaves = [x.clone().requires_grad_() for x in (a, w, bias)]

    def torch_step():
        for x in leaves:
            x.grad = None
        mod.linear_gelu_train_mgpu_torch(leaves[0], leaves[1].t(), leaves[2]).backward(dout)

    def torch_forward():
        with torch.no_grad():
            mod.linear_gelu_train_mgpu_torch(a, w.t(), bias)

    ja, jw, jb, jg = (jnp.asarray(x.float().cpu().numpy(), jnp.bfloat16) for x in (a, w, bias, dout))
    step = jax.jit(lambda x, y, z, d: jax.vjp(mod._call, x, y, z)[1](d))
    fwd = jax.jit(mod._call)
    out = {}
    out["torch entry: forward + backward"] = timed(torch_step, torch.cuda.synchronize)
    out["torch entry: forward (no grad)"] = timed(torch_forward, torch.cuda.synchronize)
    out["JAX entry: jax.vjp (forward rule + backward)"] = timed(lambda: jax.block_until_ready(step(ja, jw, jb, jg)), lambda: None)
    out["JAX entry: forward"] = timed(lambda: jax.block_until_ready(fwd(ja, jw, jb)), lambda: None)
    print(f"M x N x K = {m}x{n}x{k} bf16 on {torch.cuda.get_device_name()} (jax {jax.__version__}, torch {torch.__version__}), "
          f"wall us, median of {ROUNDS}")
    for name, us in out.items():
        print(f"  {name:48s} {us:9.1f}")
    print(f"  torch step / JAX vjp step: "
          f"{out['torch entry: forward + backward'] / out['JAX entry: jax.vjp (forward rule + backward)']:.3f}")


if __name__ == "__main__":
    main()
