"""Where a training step through the Pallas torch entry (runtime/jax_torch.py) spends its host time: each piece of the
step alone, timed twice: the host's time in the call (no sync after it) and the call with the device synced after it.
A piece whose host time is about its synced time waits for the device inside (a sync in disguise); one whose synced
time is far above its host time runs asynchronously. Medians of STEPS calls after warm-up.

On a CUDA device: the Mosaic GPU catalogue layer (linear_gelu_train_mgpu), 4096^3 bf16 unless given; on the CPU: the
TPU layer in Pallas's interpreter, 16 x 128 x 128 unless given.

    python3 bench/torch_entry_probe.py [--steps S] [M N K]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import torch

from specgen.runtime import jax as _rt
from specgen.runtime import jax_torch as _jt


def timed(fn: Callable[[], object], sync: Callable[[], None], steps: int) -> tuple[float, float]:
    """(host us, synced us): medians over `steps` calls, the device idle before each."""
    for _ in range(3):
        jax.block_until_ready(fn())
        sync()
    host, whole = [], []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        r = fn()
        t1 = time.perf_counter()
        jax.block_until_ready(r)
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        whole.append((t2 - t0) * 1e6)
    return statistics.median(host), statistics.median(whole)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("mnk", type=int, nargs="*")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        from generated.pallas.gpu_sm90 import linear_gelu_train_mgpu as mod
        interpret, dev, sync, (m, n, k) = None, "cuda", torch.cuda.synchronize, args.mnk or (4096, 4096, 4096)
    else:
        from generated.pallas import linear_gelu_train_tpu as mod
        interpret, dev, sync, (m, n, k) = True, "cpu", lambda: None, args.mnk or (16, 128, 128)
    entry = mod._torch_entry()
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(m, k, generator=g, device=dev).bfloat16()
    w = (torch.randn(n, k, generator=g, device=dev) / k ** 0.5).bfloat16()
    bias = torch.randn(n, generator=g, device=dev).bfloat16()
    dout = torch.randn(m, n, generator=g, device=dev).bfloat16()
    xs, wrt, mode = (a, w.t(), bias), 0b111, _jt.mode_index(interpret)
    arrays = entry.arrays(xs)
    forward, apply = _jt._programs(entry.call, entry._wrt(wrt), mode, _jt._signature(arrays))
    out, residuals = forward(arrays)
    grad = _rt.torch_to_jax(entry.kernel, (("grad", dout, None),))[0]
    _, handle = entry._train_forward(*xs, wrt, mode)
    call = entry.call
    jstep = jax.jit(lambda x, y, z, d: jax.vjp(lambda *q: call(interpret, *q), x, y, z)[1](d))
    jargs = [jnp.asarray(x.float().cpu().numpy(), jnp.bfloat16) for x in (a, w, bias, dout)]  # w as stored (N, K)
    leaves = [x.clone().requires_grad_() for x in (a, w, bias)]

    def step() -> None:
        for x in leaves:
            x.grad = None
        entry(leaves[0], leaves[1].t(), leaves[2], interpret=interpret).backward(dout)

    alive: collections.deque = collections.deque(maxlen=4)

    def kept(result: object) -> object:
        alive.append(result)
        return result

    def leaf_arrays() -> object:
        with torch.no_grad():
            return entry.arrays((leaves[0], leaves[1].t(), leaves[2]))

    def leaf_call() -> torch.Tensor:
        return entry(leaves[0], leaves[1].t(), leaves[2], interpret=interpret)

    def dropped(result: object) -> None:
        del result

    jax_held: collections.deque = collections.deque(maxlen=8)

    def held(x: jax.Array) -> object:
        """x exported to torch, x itself kept 8 calls (its buffer outlives torch's view)."""
        jax_held.append(x)
        return _rt.to_torch(x)

    pieces: dict[str, Callable[[], object]] = {
        "import A, B, bias (torch_to_jax)": lambda: entry.arrays(xs),
        "forward program, the same arrays": lambda: forward(arrays),
        "forward program, fresh imports": lambda: forward(entry.arrays(xs)),
        "export out (to_torch)": lambda: _rt.to_torch(out),
        "import dOut (torch_to_jax)": lambda: _rt.torch_to_jax(entry.kernel, (("grad", dout, None),)),
        "apply program, the same dOut array": lambda: apply(residuals, grad),
        "apply program, a fresh dOut import": lambda: apply(residuals, _rt.torch_to_jax(entry.kernel, (("grad", dout, None),))[0]),
        "forward program (same arrays), then export out": lambda: _rt.to_torch(forward(arrays)[0]),
        "apply program (same dOut), then export 3 gradients": lambda: [_rt.to_torch(x) for x in apply(residuals, grad)],
        "_train_forward (imports, program, export, handle)": lambda: entry._train_forward(*xs, wrt, mode),
        "_backward (import, apply, 3 exports)": lambda: entry._backward(dout, handle, *xs, True, True, True, wrt, mode),
        "the whole step (autograd)": step,
        "jax.vjp of the JAX entry (one program)": lambda: jstep(*jargs),
        # outputs kept alive a few calls (as autograd keeps out, pre and the gradients): new output addresses each call
        "forward program, same arrays, outputs kept 4 calls": lambda: kept(forward(arrays)),
        "apply program, same dOut, outputs kept 4 calls": lambda: kept(apply(residuals, grad)),
        "jax.vjp (one program), outputs kept 4 calls": lambda: kept(jstep(*jargs)),
        # the results dropped inside the timed call (as a step frees the last step's tensors): a drop that waits for
        # the device makes host time about the synced time
        "imports of A, B, bias, dropped": lambda: dropped(entry.arrays(xs)),
        "forward program (same arrays), outputs dropped": lambda: dropped(forward(arrays)),
        "forward program (same arrays), export out, both dropped": lambda: dropped(_rt.to_torch(forward(arrays)[0])),
        "forward, export out, dropped; the jax array held 8 calls": lambda: dropped(held(forward(arrays)[0])),
        "forward, export out kept 4 calls; the jax array dropped": lambda: kept(_rt.to_torch(forward(arrays)[0])),
        "apply program (same dOut), 3 exports, all dropped": lambda: dropped([_rt.to_torch(x) for x in apply(residuals, grad)]),
        "_train_forward, out and handle (residuals) dropped": lambda: dropped(entry._train_forward(*xs, wrt, mode)),
        # the step's forward call on leaves that require grad: the autograd.Function around _train_forward
        "imports of the leaves (requiring grad)": lambda: leaf_arrays(),
        "the entry's call with grad (autograd), out kept 4 calls": lambda: kept(leaf_call()),
        "the entry's call with grad (autograd), out dropped": lambda: dropped(leaf_call()),
    }
    where = torch.cuda.get_device_name() if cuda else "CPU (TPU interpret)"
    print(f"M x N x K = {m}x{n}x{k} bf16 on {where} (jax {jax.__version__}, torch {torch.__version__}); median of "
          f"{args.steps} calls, us: host (no sync) / synced")
    for name, fn in pieces.items():
        host, whole = timed(fn, sync, args.steps)
        print(f"  {name:52s} {host:9.1f} / {whole:9.1f}")


if __name__ == "__main__":
    main()
