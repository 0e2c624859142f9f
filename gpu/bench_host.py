"""Where a torch entry's host microseconds go (issue 20): per call at 64^3 bf16 with `out` given, a repeat
call (cached launch), each backend's torch entry against `torch.add(out=)` and its parts timed alone.

- Triton: gemm_bf16 (persistent TMA) and gemm_small_bf16 (pointer loads): the whole call, the guard
  (`_check`), the cached launch (`launch_cached`: key lookup + C launch) and the C launch alone.
- CuTe sm90: gemm_bf16: the whole call, `_run` (the call past its `torch.compiler.is_compiling()`
  check), the guard (`_lean`: with TVM-FFI the compiled function checks each tensor itself; and the full
  `_check`, which a build without TVM-FFI runs), the cached lookup of the config's compiled function and cluster count with the
  call (`_launcher.ready`), and the compiled TVM-FFI function alone (torch tensors in).
- `torch.compiler.is_compiling()` alone: every backend's torch entry asks it first.
- Mosaic GPU: gemm_bf16: the `_torch` entry (its direct launch at 64^3) waiting for the result and not,
  the same call through DLPack and the jitted program, the JAX entry on jax arrays (under its own jit,
  waiting for the result), torch -> jax conversion of the inputs (`torch_to_jax`), and XLA's jitted dot
  on the same jax arrays.

Every call's batches are interleaved with the others' (`timing.host_us_interleaved`: batches of 100
calls, the GPU drained between them) and each ratio is the median over side-by-side batch pairs, so the
host's drift (up to 1.5x over seconds on these machines) cancels. Parts are timed in the same
interleaving, so they add up only roughly (each part alone runs with warm caches).

    python gpu/bench_host.py --out out/gpu        (gpu/run.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax share the GPU here

import torch  # noqa: E402

from specgen.bench.record import environment  # noqa: E402
from specgen.bench.stats import paired  # noqa: E402
from specgen.bench.timing import host_us_interleaved  # noqa: E402

N = 64


def _tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16).t()  # K-major B, as the catalogue declares
    out = torch.full((N, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    x = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    return a, b, out, x


def _verified(fn: Callable[[], object], out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    for _ in range(3):  # compile or load, build the cached launch, then take it
        out.fill_(float("nan"))
        fn()
    torch.cuda.synchronize()
    if not torch.allclose(out.float(), ref.float(), atol=0.05, rtol=0.02):
        raise AssertionError(f"{what}: wrong result")


def triton_calls(a, b, out, x) -> dict[str, Callable[[], object]]:
    from generated.triton import gemm_bf16 as tma
    from generated.triton import gemm_small_bf16 as ptr

    ref = a.float() @ b.float()
    calls: dict[str, Callable[[], object]] = {}
    for label, mod, fn in (("triton tma", tma, tma.gemm_bf16), ("triton pointer", ptr, ptr.gemm_small_bf16)):
        mod._launcher._expanded.clear()
        _verified(lambda fn=fn: fn(a, b, out=out), out, ref, label)
        (_stream, args_key), (c_launch, launch_args) = next(iter(mod._launcher._expanded.items()))
        calls[f"{label}: whole call"] = lambda fn=fn: fn(a, b, out=out)
        calls[f"{label}: guard (_check)"] = lambda mod=mod: mod._check(a, b, out)
        calls[f"{label}: launch_cached"] = lambda mod=mod, k=args_key: mod._launcher.launch_cached(k, 0)
        calls[f"{label}: C launch alone"] = lambda c=c_launch, la=launch_args: c(*la)
    return calls


def cute_calls(a, b, out, x) -> dict[str, Callable[[], object]]:
    from generated.cute import gemm_bf16 as mod

    ref = a.float() @ b.float()
    _verified(lambda: mod.gemm_bf16(a, b, out=out), out, ref, "cute")
    # the config _run chose for 64^3 (its integer compares): the one function the launcher has loaded
    ((device, variant),) = mod._launcher.ready
    fn, clusters = mod._launcher.ready[(device, variant)]

    def lookup_and_call() -> None:  # _run's last two lines
        fn, clusters = mod._launcher.ready.get((device, variant)) or mod._launcher.entry(device, variant, mod.config(variant))
        fn(a, b, out, clusters)

    return {
        "cute: whole call": lambda: mod.gemm_bf16(a, b, out=out),
        "cute: _run (the call past its torch.compile check)": lambda: mod._run(a, b, out),
        "cute: guard (_lean, with TVM-FFI: the compiled function checks the rest)": lambda: mod._lean(a, b, out),
        "cute: full guard (_check, without TVM-FFI)": lambda: mod._check(a, b, out),
        "cute: cached lookup + compiled function": lookup_and_call,
        "cute: compiled function alone": lambda: fn(a, b, out, clusters),
    }


def mgpu_calls(a, b, out, x) -> dict[str, Callable[[], object]]:
    import jax
    import jax.numpy as jnp

    from generated.pallas.gpu_sm90 import gemm_bf16 as mod
    from specgen.runtime.jax import torch_to_jax

    ref = a.float() @ b.float()
    got = mod.gemm_bf16_torch(a, b)
    torch.cuda.synchronize()
    if not torch.allclose(got.float(), ref.float(), atol=0.05, rtol=0.02):
        raise AssertionError("mosaic gpu: wrong result")
    ja, jb = torch_to_jax("gemm_bf16", (("a", a, False), ("b", b, True)))  # as the entry takes them (B as stored)
    dot = jax.jit(lambda p, q: jnp.matmul(p, q.T, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
    for _ in range(3):
        mod.gemm_bf16(ja, jb).block_until_ready()
        dot(ja, jb).block_until_ready()
    return {
        "mosaic gpu: torch entry (whole call)": lambda: (mod.gemm_bf16_torch(a, b), torch.cuda.synchronize()),
        # the direct launch (session 10) returns without waiting, as Triton's and CuTe's entries do
        "mosaic gpu: torch entry, no wait": lambda: mod.gemm_bf16_torch(a, b),
        "mosaic gpu: DLPack path (the jitted program, waits)": lambda: (
            mod._rt.to_torch(mod._call(*torch_to_jax("gemm_bf16", (("a", a, False), ("b", b, True))))),
            torch.cuda.synchronize()),
        "mosaic gpu: JAX entry, jax arrays": lambda: mod.gemm_bf16(ja, jb).block_until_ready(),
        "mosaic gpu: torch -> jax inputs": lambda: torch_to_jax("gemm_bf16", (("a", a, False), ("b", b, True))),
        "xla: jitted dot, jax arrays": lambda: dot(ja, jb).block_until_ready(),
    }


RATIOS = {  # (numerator, denominator): what the issue asks, then what explains it
    "triton tma / torch.add (target <= 1.2)": ("triton tma: whole call", "torch.add(out=)"),
    "triton pointer / torch.add (target <= 1.2)": ("triton pointer: whole call", "torch.add(out=)"),
    "cute / torch.add (target <= 1.2)": ("cute: whole call", "torch.add(out=)"),
    "mosaic gpu torch entry / JAX entry": ("mosaic gpu: torch entry (whole call)", "mosaic gpu: JAX entry, jax arrays"),
    "mosaic gpu torch entry, no wait / torch.add": ("mosaic gpu: torch entry, no wait", "torch.add(out=)"),
    "mosaic gpu DLPack path / JAX entry": ("mosaic gpu: DLPack path (the jitted program, waits)",
                                           "mosaic gpu: JAX entry, jax arrays"),
    "mosaic gpu JAX entry / XLA dot": ("mosaic gpu: JAX entry, jax arrays", "xla: jitted dot, jax arrays"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--backends", default="triton,cute,mgpu")
    args = ap.parse_args()
    a, b, out, x = _tensors()
    z = torch.empty_like(x)
    calls: dict[str, Callable[[], object]] = {"torch.add(out=)": lambda: torch.add(x, x, out=z),
                                              "empty Python call": lambda: None,
                                              "torch.compiler.is_compiling()": torch.compiler.is_compiling}
    makers = {"triton": triton_calls, "cute": cute_calls, "mgpu": mgpu_calls}
    errors: dict[str, str] = {}
    for name in args.backends.split(","):
        try:
            calls.update(makers[name](a, b, out, x))
        except Exception as e:  # a backend this machine lacks: say so, time the rest
            errors[name] = f"{type(e).__name__}: {e}"
            print(f"{name}: not timed ({errors[name]})")
    per_round: dict[str, list[float]] = {k: [] for k in calls}
    ratios: dict[str, list[float]] = {k: [] for k, (n, d) in RATIOS.items() if n in calls and d in calls}
    for r in range(args.rounds):
        samples = host_us_interleaved(calls, args.calls)
        for k, v in samples.items():
            per_round[k].append(statistics.median(v))
        for k in ratios:
            n, d = RATIOS[k]
            ratios[k].append(paired(samples[d], samples[n]).ratio)  # paired(ours, peer) is peer / ours: num / den
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in ratios.items()))
    med = {k: statistics.median(v) for k, v in per_round.items()}
    result = {"environment": environment().model_dump(), "n": N, "calls_per_batch": args.calls,
              "median_us": med, "rounds_us": per_round, "errors": errors,
              "ratios": {k: statistics.median(v) for k, v in ratios.items()}, "round_ratios": ratios}
    print("\n| per call, 64^3 bf16, out given | us (median of rounds) |\n|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.2f} |")
    print("\n| ratio (median over paired batches, median of rounds) | |\n|---|---|")
    for k, v in result["ratios"].items():
        print(f"| {k} | {v:.3f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-host.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
