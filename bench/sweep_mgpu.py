"""Candidate configs of the Mosaic GPU (pallas:gpu_sm90) kernels side by side on one Hopper GPU, and where
the torch entry's per-call time goes.

Candidates are modules rendered on a CPU machine by bench/mgpu_candidates.py (`<kernel>__<label>.py` in
one directory). For each shape: every candidate's output is checked against the first candidate's (the
catalogue config) - bit-identical expected, the math and K order being the same - at the shape and at
tail shapes; then ROUNDS rounds, the order of candidates and peer reversed every other round, each
timed by CUPTI (L2 flushed, bench_pallas.cupti_ms) and do_bench (a call that waits for its result); then
each candidate and peer paired call by call with the catalogue config (timing.kernel_pairs), the figure
that ranks them.
JAX's own Hopper matmul example (jax.experimental.pallas.ops.gpu.hopper_matmul_mgpu, B given (K, N))
runs beside them as a reference, with and without a 2-CTA cluster. Medians per candidate.

The host part times, per call at 64^3: the torch entry as shipped, the previous entry (jax.dlpack both
ways, the public function), and each step of jax.dlpack.from_dlpack / torch.from_dlpack.

Usage: python bench/sweep_mgpu.py --cands DIR --out DIR  -> DIR/sweep-mgpu.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import bench_pallas as bp  # noqa: E402  (the CUPTI timer, FLUSH, Call wrappers; sets XLA_PYTHON_CLIENT_PREALLOCATE)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
from timing import kernel_pairs, tflops  # noqa: E402
from triton.testing import do_bench  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048)]
TAILS = [(517, 264, 1040), (1, 256, 512), (1000, 1000, 640)]
TAIL_LABELS = ("base", "cm2", "cn2", "t128x128", "t256x128")
OUT = Path("bench/out")  # the cluster code paths beside the catalogue config


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fn_of(mod):
    return getattr(mod, mod.NAME)


def dbench(call) -> float:
    return do_bench(call.blocking, warmup=10, rep=40, return_mode="median")


def operands(kernel: str, M: int, N: int, K: int, gen):
    """Torch tensors (a, w, bias) of one shape, the same memory as jax arrays, and `kernel`'s arguments."""
    ta = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
    tw = torch.randn(N, K, device="cuda", generator=gen).bfloat16() / math.sqrt(K)
    tbias = torch.randn(N, device="cuda", generator=gen).bfloat16()
    a, w, bias = (jax.dlpack.from_dlpack(t) for t in (ta, tw, tbias))
    return (ta, tw, tbias), (a, w, bias), ((a, w, bias) if "bias" in kernel else (a, w))


def sweep(kernel: str, cands: dict, shapes, peers_for, rows: list, rounds: int, gen) -> None:
    for M, N, K in shapes:
        (ta, tw, tbias), (a, w, bias), args = operands(kernel, M, N, K, gen)
        calls = {label: bp.jax_call(fn_of(mod), *args) for label, mod in cands.items()}
        first = next(iter(cands))
        ref = fn_of(cands[first])(*args)
        check = {label: float(jnp.max(jnp.abs(fn_of(mod)(*args).astype(jnp.float32) - ref.astype(jnp.float32))))
                 for label, mod in cands.items()}
        calls |= peers_for(ta, tw, tbias, a, w, bias)
        ku: dict[str, list[float]] = {k: [] for k in calls}
        du: dict[str, list[float]] = {k: [] for k in calls}
        order = list(calls)
        for r in range(rounds):
            for label in order if r % 2 == 0 else order[::-1]:
                ku[label].append(bp.cupti_ms(calls[label].blocking, calls=5)[0])
                du[label].append(dbench(calls[label]))
        for label in order:
            # Paired with the catalogue config (bench/timing.py): first's time / label's, > 1 where label is
            # faster; the unpaired medians above move with the clock between windows by more than that.
            paired = None if label == first else kernel_pairs(calls[label].blocking, calls[first].blocking)
            row = {"kernel": kernel, "label": label, "M": M, "N": N, "K": K, "cupti_ms": bp.med(ku[label]),
                   "do_bench_ms": bp.med(du[label]), "cupti_all": ku[label], "do_bench_all": du[label],
                   "tflops_cupti": tflops(M, N, K, bp.med(ku[label])), "max_abs_diff_vs_first": check.get(label),
                   "paired_vs_first": paired}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if not k.endswith("_all")}), flush=True)


def tails(kernel: str, cands: dict, rows: list, gen) -> None:
    """Each candidate against the first (the catalogue config) at tail shapes: bit-identical expected."""
    for M, N, K in TAILS:
        _, (a, w, _), args = operands(kernel, M, N, K, gen)
        outs = {label: fn_of(mod)(*args) for label, mod in cands.items() if label in TAIL_LABELS}
        first = next(iter(outs))
        xla = (a.astype(jnp.float32) @ w.T.astype(jnp.float32))
        for label, o in outs.items():
            rows.append({"kernel": kernel, "label": label, "tail": [M, N, K], "shape": list(o.shape),
                         "finite": bool(jnp.all(jnp.isfinite(o.astype(jnp.float32)))),
                         "max_abs_diff_vs_first": float(jnp.max(jnp.abs(o.astype(jnp.float32) - outs[first].astype(jnp.float32)))),
                         "max_abs_diff_vs_f32_matmul": None if "bias" in kernel else float(jnp.max(jnp.abs(o.astype(jnp.float32) - xla)))})
            print(json.dumps(rows[-1]), flush=True)


def host(rows: list, gemm) -> None:
    """Per call at 64^3: where the torch entry's time goes (timing.host_us, as bench_pallas: short batches,
    the GPU drained between them)."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    from specgen.runtime import jax as rt

    ta, tw = torch.randn(64, 64, device="cuda").bfloat16(), torch.randn(64, 64, device="cuda").bfloat16()
    a, w = jax.dlpack.from_dlpack(ta), jax.dlpack.from_dlpack(tw)
    backend = xla_bridge.get_backend("cuda")
    dev = backend.device_from_local_hardware_id(0)
    stream = dev.get_stream_for_external_ready_events()
    out = gemm._call(a, w)
    cur = torch.cuda.current_stream().cuda_stream

    def old_entry():
        r = gemm.gemm_bf16(rt.from_torch("t", "a", ta, False), rt.from_torch("t", "b", tw.t(), True))
        return torch.from_dlpack(r)

    steps = {
        "torch_entry_us": lambda: gemm.gemm_bf16_torch(ta, tw.t()),
        "previous_torch_entry_us": old_entry,
        "jax_public_fn_us": lambda: gemm.gemm_bf16(a, w),
        "jax_jitted_call_us": lambda: gemm._call(a, w),
        "torch_to_jax_2_tensors_us": lambda: rt.torch_to_jax("t", (("a", ta, False), ("b", tw, False))),
        "jax_dlpack_from_dlpack_us": lambda: jax.dlpack.from_dlpack(ta),
        "step_device_lookup_us": lambda: backend.device_from_local_hardware_id(0),
        "step_stream_query_us": lambda: dev.get_stream_for_external_ready_events(),
        "step_torch_dlpack_with_stream_us": lambda: ta.__dlpack__(stream=stream),
        "step_torch_dlpack_no_sync_us": lambda: ta.__dlpack__(stream=-1),
        "step_to_buffer_us": lambda: _jax.dlpack_managed_tensor_to_buffer(ta.__dlpack__(stream=-1), dev, stream, None, 2),
        "step_jnp_asarray_us": lambda: jnp.asarray(a, dtype=a.dtype),
        "to_torch_us": lambda: rt.to_torch(out),
        "torch_from_dlpack_us": lambda: torch.from_dlpack(out),
        "step_jax_dlpack_with_stream_us": lambda: out.__dlpack__(stream=cur),
        "step_addressable_data_us": lambda: out.addressable_data(0),
        "torch_matmul_us": lambda: torch.matmul(ta, tw.t()),
        "jitted_call_on_fresh_imports_us": lambda: gemm._call(*rt.torch_to_jax("t", (("a", ta, False), ("b", tw, False)))),
        "jitted_call_on_jax_dlpack_imports_us": lambda: gemm._call(jax.dlpack.from_dlpack(ta), jax.dlpack.from_dlpack(tw)),
        "stream_handshake_us": lambda: waiting.wait_stream(torch.cuda.current_stream()),
        "require_gpu_us": lambda: gemm._mg.require_gpu("t"),
    }
    waiting = rt._cuda_bridge(0)[2]
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(500):
        gemm.gemm_bf16_torch(ta, tw.t())
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
    (OUT / "host-profile.txt").write_text(text.getvalue())
    res = {"workload": "host cost per call 64^3"}
    for _ in range(3):
        for k, fn in steps.items():
            res.setdefault(k + "_all", []).append(bp.host_us(fn))
            torch.cuda.synchronize()
    for k in steps:
        res[k] = bp.med(res[k + "_all"])
    rows.append(res)
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("_all")}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cands", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: gemm, fused, tails, host")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    global OUT
    OUT = args.out
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    by_kernel: dict[str, dict] = {}
    for f in sorted(args.cands.glob("gemm*__*.py")):
        kernel, label = f.stem.split("__")
        by_kernel.setdefault(kernel, {})[label] = load(f)
    for k in by_kernel:  # the catalogue config first
        by_kernel[k] = dict(sorted(by_kernel[k].items(), key=lambda kv: kv[0] != "base"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows: list[dict] = []
    started = time.time()

    def gemm_peers(ta, tw, tbias, a, w, bias):
        b_kn = jnp.asarray(w.T)  # JAX's example takes B as (K, N)
        ex = {}
        for name, cl in (("jax_example", None), ("jax_example_cm2", hm.MatmulDimension.M)):
            cfg = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4, epi_tile_m=64, epi_tile_n=64,
                                  grid_minor_dim=hm.MatmulDimension.M, grid_tile_width=8, cluster_dimension=cl)
            f = jax.jit(lambda x, y, cfg=cfg: hm.matmul(x, y, None, cfg))
            ex[name] = bp.jax_call(f, a, b_kn)
        return ex | {"cublas": bp.torch_call(torch.matmul, ta, tw.t())}

    def fused_peers(ta, tw, tbias, a, w, bias):
        xla = jax.jit(lambda a, w, bias: jax.nn.gelu(a @ w.T + bias, approximate=True))
        return {"xla": bp.jax_call(xla, a, w, bias)}

    if "host" not in skip:
        host(rows, bp.module("gemm_bf16"))
    if "tails" not in skip:
        for kernel, cands in by_kernel.items():
            tails(kernel, cands, rows, gen)
    if "fused" not in skip and "gemm_bias_gelu_bf16" in by_kernel:
        sweep("gemm_bias_gelu_bf16", by_kernel["gemm_bias_gelu_bf16"], SHAPES[:1], fused_peers, rows, args.rounds, gen)
    if "gemm" not in skip and "gemm_bf16" in by_kernel:
        sweep("gemm_bf16", by_kernel["gemm_bf16"], SHAPES, gemm_peers, rows, args.rounds, gen)
    record = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "jax": jax.__version__,
              "torch": torch.__version__, "rounds": args.rounds, "seconds": time.time() - started,
              "timers": "CUPTI kernel time (torch.profiler, L2 flushed, 5 calls) and do_bench median (warmup 10, rep 40 ms) "
                        "of a blocking call; candidates and peers alternate, order reversed every other round",
              "rows": rows, "argv": sys.argv[1:]}
    (args.out / "sweep-mgpu.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
