"""The Pallas torch entry's training step (runtime/jax_torch.py) against an earlier form of that runtime, in one
process: `--before DIR` holds the earlier specgen/runtime/jax.py and jax_torch.py (as jax.py and jax_torch.py); its
Entry is built for the same module and JAX call (its ops under another spec hash). Rounds alternate the two forms
(and jax.vjp of the JAX entry in one jitted program); each round's figure is the median of STEPS steps' wall time
(host included, synced), and the report gives the median over rounds.

On a CUDA device: the Mosaic GPU catalogue layer (linear_gelu_train_mgpu, preact), 4096^3 bf16 unless given. On the
CPU: the TPU layer (linear_gelu_train_tpu) in Pallas's interpreter, 16 x 128 x 128 bf16 unless given (the
interpreted kernels about 100 us of a step, the rest the host's work). --phases: each form's host time in the
forward call and in .backward(), then the device's tail; --profile: those and cProfile of 50 steps of each form.

    python3 bench/torch_entry_ab.py --before DIR [--rounds R] [--steps S] [--phases | --profile] [M N K]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import torch


def load_before(root: Path) -> types.ModuleType:
    """The earlier jax_torch, importing the earlier runtime/jax.py in place of the current one."""
    spec = importlib.util.spec_from_file_location("_before_rt", root / "jax.py")
    rt = importlib.util.module_from_spec(spec)
    sys.modules["_before_rt"] = rt
    spec.loader.exec_module(rt)
    source = (root / "jax_torch.py").read_text().replace("from specgen.runtime import jax as _rt",
                                                          "import _before_rt as _rt")
    jt = types.ModuleType("_before_jax_torch")
    sys.modules["_before_jax_torch"] = jt
    exec(compile(source, str(root / "jax_torch.py"), "exec"), jt.__dict__)  # noqa: S102 (a bench's own input)
    return jt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="then each form's phases and cProfile of 50 steps")
    ap.add_argument("--phases", action="store_true", help="then each form's phases only")
    ap.add_argument("mnk", type=int, nargs="*")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        from generated.pallas.gpu_sm90 import linear_gelu_train_mgpu as mod
        kw, dev, sync, (m, n, k) = {}, "cuda", torch.cuda.synchronize, args.mnk or (4096, 4096, 4096)
    else:
        from generated.pallas import linear_gelu_train_tpu as mod
        kw, dev, sync, (m, n, k) = {"interpret": True}, "cpu", lambda: None, args.mnk or (16, 128, 128)
    current = mod._torch_entry()
    before = load_before(args.before).Entry(
        current.kernel, "before0", current.args, current.call, jnp.dtype(str(current.out_dtype).removeprefix("torch.")),
        gated=current.gated, fp8=current.fp8)
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(m, k, generator=g, device=dev).bfloat16()
    w = (torch.randn(n, k, generator=g, device=dev) / k ** 0.5).bfloat16()
    bias = torch.randn(n, generator=g, device=dev).bfloat16()
    dout = torch.randn(m, n, generator=g, device=dev).bfloat16()
    leaves = [x.clone().requires_grad_() for x in (a, w, bias)]

    def step(entry) -> None:
        for x in leaves:
            x.grad = None
        entry(leaves[0], leaves[1].t(), leaves[2], **kw).backward(dout)

    ja, jw, jb, jg = (jnp.asarray(x.float().cpu().numpy(), jnp.bfloat16) for x in (a, w, bias, dout))
    call = current.call
    mode = kw.get("interpret")
    jstep = jax.jit(lambda x, y, z, d: jax.vjp(lambda *xs: call(mode, *xs), x, y, z)[1](d))
    forms = {"torch entry, before": lambda: (step(before), sync()),
             "torch entry, now": lambda: (step(current), sync()),
             "jax.vjp of the JAX entry (one program)": lambda: jax.block_until_ready(jstep(ja, jw, jb, jg))}
    # the same gradients from either form
    step(before)
    want = [x.grad.clone() for x in leaves]
    step(current)
    same = all(torch.equal(x.grad, w_) for x, w_ in zip(leaves, want, strict=True))
    rounds: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(args.rounds):
        for name, fn in forms.items():
            for _ in range(3):
                fn()
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            rounds[name].append(statistics.median(times) * 1e6)
    where = torch.cuda.get_device_name() if cuda else "CPU (TPU interpret)"
    print(f"M x N x K = {m}x{n}x{k} bf16 on {where} (jax {jax.__version__}, torch {torch.__version__}); wall us a "
          f"step, median over {args.rounds} alternating rounds of the median of {args.steps} steps [min, max]; "
          f"the two forms' gradients equal: {same}")
    for name, r in rounds.items():
        print(f"  {name:42s} {statistics.median(r):9.1f}  [{min(r):.1f}, {max(r):.1f}]")
    base = statistics.median(rounds["jax.vjp of the JAX entry (one program)"])
    for name in ("torch entry, before", "torch entry, now"):
        print(f"  {name} / jax.vjp step: {statistics.median(rounds[name]) / base:.3f}")
    if args.profile or args.phases:
        # the host's time in the forward call and in .backward(), then the wait for the device: a host time near
        # the kernels' and a short wait mean a call waited for the device inside
        for name, entry in (("before", before), ("now", current)):
            parts: list[list[float]] = [[], [], []]
            for _ in range(args.steps):
                for x in leaves:
                    x.grad = None
                sync()
                t0 = time.perf_counter()
                y = entry(leaves[0], leaves[1].t(), leaves[2], **kw)
                t1 = time.perf_counter()
                y.backward(dout)
                t2 = time.perf_counter()
                sync()
                t3 = time.perf_counter()
                for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                    parts[i].append(d * 1e6)
            print(f"  phases, torch entry {name} (median us): forward call {statistics.median(parts[0]):.1f}, "
                  f".backward() {statistics.median(parts[1]):.1f}, then the device {statistics.median(parts[2]):.1f}")
    if args.profile:  # where each form's host time goes (a call that blocks on the device shows as its own time)
        import cProfile
        import pstats

        for name, entry in (("before", before), ("now", current)):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(50):
                step(entry)
            sync()
            prof.disable()
            print(f"\n--- cProfile of 50 steps, torch entry {name}, by own time")
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
