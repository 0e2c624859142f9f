"""Side-by-side benchmark of the rendered Pallas Mosaic GPU (pallas:gpu_sm90) kernels on one Hopper GPU.

Same process, same data (torch tensors shared with jax through DLPack, no copies), specgen and each peer
measured alternately (ROUNDS rounds, median of each). Ratios are peer time / specgen time (> 1: specgen
faster):
- bf16 GEMM (generated.pallas.gpu_sm90.gemm_bf16; B K-major, a weight (N, K)) at 8192^3, 4096^3, 2048^3
  vs XLA (`jax.jit(lambda a, w: a @ w.T)`) and vs cuBLAS through torch (`a @ w.t()`), geomeans;
- bf16 GEMM + bias + GELU-tanh 8192^3 (gemm_bias_gelu_bf16) vs `jax.jit(gelu(a @ w.T + bias))` (XLA);
- fp8 e4m3 rowwise-scaled GEMM, not yet run on the H200 (gemm_fp8_rowwise: (A @ B) * scale_a[m] * scale_b[n] -> bf16) at 8192^3 and
  4096^3 vs `torch._scaled_mm` with rowwise scales (the fp8 bytes shared with jax as uint8 through
  DLPack and bitcast, so both read the same memory);
- the per-call host cost of the jax function and of its torch entry (DLPack both ways), 64^3.

Three timers per pair:
- do_bench: `triton.testing.do_bench` medians (L2 flushed between calls by do_bench) of a call that
  waits for its result (`.block_until_ready()` for jax, `torch.cuda.synchronize()` for torch: the same
  semantics for both; jax runs on its own stream, which torch's events cannot time otherwise), so it
  includes each framework's dispatch and wake-up latency;
- wall: back-to-back calls and one wait at the end (each framework keeps its own stream busy), per call;
- CUPTI: the device time of the kernels a call launches, from torch.profiler, with L2 flushed before each
  call (the flush kernels' own time, profiled alone, subtracted). Whether jax's kernels appear in the
  profile is recorded (`cupti_sees_jax`).

Usage (repo root on PYTHONPATH): python bench/bench_pallas.py --out DIR  -> DIR/bench-pallas.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
from jax.lax import bitcast_convert_type as lax_bitcast  # noqa: E402
from timing import bench_pairs, host_us, kernel_pairs, ms, tflops  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048)]
FUSED = (8192, 8192, 8192)
FP8_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
FLUSH = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def module(name: str):
    return importlib.import_module(f"generated.pallas.gpu_sm90.{name}")


def cupti_ms(fn, calls: int = 10) -> tuple[float, bool]:
    """Device time per call of what `fn` launches (CUPTI via torch.profiler), L2 flushed before each call;
    also whether any kernel beyond the flush was seen (jax's kernels run outside torch)."""

    def profiled(with_fn: bool) -> tuple[float, int]:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                FLUSH.zero_()
                if with_fn:
                    fn()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_time_total > 0]
        return sum(e.device_time_total for e in events), len(events)

    fn()
    torch.cuda.synchronize()
    flush_us, flush_kinds = profiled(False)
    total_us, kinds = profiled(True)
    return (total_us - flush_us) / calls / 1e3, kinds > flush_kinds


def wall_ms(launch, wait, calls: int) -> float:
    """Wall time per call of `calls` back-to-back launches and one wait at the end (each framework's own
    stream kept busy), median of 5 batches."""
    for _ in range(3):
        launch()
    wait()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        wait()
        samples.append((time.perf_counter() - start) / calls * 1e3)
    return sorted(samples)[2]


def med(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def pair(ours: Call, peer: Call) -> dict[str, float]:
    a, b, ka, kb, wa, wb, seen = [], [], [], [], [], [], []
    for _ in range(ROUNDS):
        a.append(ms(ours.blocking))
        b.append(ms(peer.blocking))
        k_ours, s = cupti_ms(ours.blocking)
        ka.append(k_ours)
        seen.append(s)
        kb.append(cupti_ms(peer.blocking)[0])
        calls = max(3, int(50 / max(ka[-1], 1e-3)))  # about 50 ms a batch
        wa.append(wall_ms(ours.launch, ours.wait, calls))
        wb.append(wall_ms(peer.launch, peer.wait, calls))
    # Both timers again, paired call by call / window by window (bench/timing.py): the clock's swings
    # between windows move the medians above, not a pair's ratio.
    paired_cupti, paired_do_bench = kernel_pairs(ours.blocking, peer.blocking), bench_pairs(ours.blocking, peer.blocking)
    return {"ours_ms": med(a), "peer_ms": med(b), "ratio": med(b) / med(a),
            "ours_cupti_ms": med(ka), "peer_cupti_ms": med(kb),
            "ratio_cupti": med(kb) / med(ka) if med(ka) > 0 else float("nan"), "cupti_sees_jax": all(seen),
            "ours_wall_ms": med(wa), "peer_wall_ms": med(wb), "ratio_wall": med(wb) / med(wa),
            "paired_cupti": paired_cupti, "ratio_paired_cupti": paired_cupti["ratio"],
            "paired_do_bench": paired_do_bench, "ratio_paired_do_bench": paired_do_bench["ratio"]}


class Call:
    """One workload three ways: `blocking` (launch and wait: do_bench and CUPTI time it), and `launch` /
    `wait` apart (the back-to-back wall timer)."""

    def __init__(self, launch, wait) -> None:
        self.launch, self.wait = launch, wait

    def blocking(self) -> None:
        self.launch()
        self.wait()


def jax_call(fn, *args) -> Call:
    last: list = [None]

    def launch() -> None:
        last[0] = fn(*args)

    return Call(launch, lambda: last[0].block_until_ready())


def torch_call(fn, *args) -> Call:
    return Call(lambda: fn(*args), torch.cuda.synchronize)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def fp8_row(fp8, gen, M: int, N: int, K: int) -> dict:
    """gemm_fp8_rowwise against torch._scaled_mm (rowwise scales) on the same fp8 bytes."""
    ta = torch.randn(M, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    tw = torch.randn(N, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    tsa = torch.rand(M, 1, device="cuda", generator=gen) + 0.5
    tsb = torch.rand(1, N, device="cuda", generator=gen) + 0.5
    a, w = (lax_bitcast(jax.dlpack.from_dlpack(t.view(torch.uint8)), jnp.float8_e4m3fn) for t in (ta, tw))
    sa, sb = jax.dlpack.from_dlpack(tsa).reshape(M), jax.dlpack.from_dlpack(tsb).reshape(N)

    def peer():
        return torch._scaled_mm(ta, tw.t(), scale_a=tsa, scale_b=tsb, out_dtype=torch.bfloat16)

    diff = float((torch.from_dlpack(fp8.gemm_fp8_rowwise(a, w, sa, sb)).float() - peer().float()).abs().max())
    r = pair(jax_call(fp8.gemm_fp8_rowwise, a, w, sa, sb), torch_call(peer))
    return r | {"workload": "fp8 e4m3 rowwise", "peer": "torch._scaled_mm", "M": M, "N": N, "K": K,
                "max_abs_diff_vs_peer": diff, "ours_tflops_cupti": tflops(M, N, K, r["ours_cupti_ms"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--modules", default="", help="extra module paths (pkg.mod) to time at the GEMM shapes")
    ap.add_argument("--only-fp8", action="store_true", help="the fp8 rows and the host cost only")
    ap.add_argument("--no-fp8", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gemm = module("gemm_bf16")
    fused = module("gemm_bias_gelu_bf16")
    xla_mm = jax.jit(lambda a, w: a @ w.T)
    xla_fused = jax.jit(lambda a, w, bias: jax.nn.gelu(a @ w.T + bias, approximate=True))
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows: list[dict] = []
    for M, N, K in SHAPES if not args.only_fp8 else []:
        ta = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
        tw = torch.randn(N, K, device="cuda", generator=gen).bfloat16() / math.sqrt(K)
        a, w = jax.dlpack.from_dlpack(ta), jax.dlpack.from_dlpack(tw)
        assert a.unsafe_buffer_pointer() == ta.data_ptr()
        ours = jax_call(gemm.gemm_bf16, a, w)
        diff = float(jnp.max(jnp.abs(gemm.gemm_bf16(a, w).astype(jnp.float32) - xla_mm(a, w).astype(jnp.float32))))
        for peer, fn in (("xla", jax_call(xla_mm, a, w)), ("cublas", torch_call(torch.matmul, ta, tw.t()))):
            r = pair(ours, fn)
            r |= {"workload": "bf16 gemm", "peer": peer, "M": M, "N": N, "K": K, "max_abs_diff_vs_xla": diff,
                  "ours_tflops": tflops(M, N, K, r["ours_ms"]), "peer_tflops": tflops(M, N, K, r["peer_ms"])}
            rows.append(r)
            print(json.dumps(r), flush=True)
        for extra in filter(None, args.modules.split(",")):
            mod = importlib.import_module(extra)
            t = med([cupti_ms(jax_call(mod.gemm_bf16, a, w).blocking)[0] for _ in range(ROUNDS)])
            r = {"workload": "bf16 gemm config", "module": extra, "M": M, "N": N, "K": K, "ours_cupti_ms": t,
                 "ours_tflops": tflops(M, N, K, t), "wgmma_in_flight": getattr(mod, "WGMMA_IN_FLIGHT", 0),
                 "config": {k: mod.METADATA.get(k) for k in ("tile_m", "tile_n", "tile_k", "stages", "group_m")}}
            rows.append(r)
            print(json.dumps(r), flush=True)
    if not args.only_fp8:
        M, N, K = FUSED
        ta = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
        tw = torch.randn(N, K, device="cuda", generator=gen).bfloat16() / math.sqrt(K)
        tbias = torch.randn(N, device="cuda", generator=gen).bfloat16()
        a, w, bias = (jax.dlpack.from_dlpack(t) for t in (ta, tw, tbias))
        diff = float(jnp.max(jnp.abs(fused.gemm_bias_gelu_bf16(a, w, bias).astype(jnp.float32)
                                     - xla_fused(a, w, bias).astype(jnp.float32))))
        r = pair(jax_call(fused.gemm_bias_gelu_bf16, a, w, bias), jax_call(xla_fused, a, w, bias))
        r |= {"workload": "bf16 gemm + bias + gelu_tanh", "peer": "xla", "M": M, "N": N, "K": K,
              "max_abs_diff_vs_xla": diff, "ours_tflops": tflops(M, N, K, r["ours_ms"])}
        rows.append(r)
        print(json.dumps(r), flush=True)
    fp8 = module("gemm_fp8_rowwise")
    for M, N, K in FP8_SHAPES if not args.no_fp8 else []:
        try:  # (added after the 2026-11-22 H200 run: first run pending, so a failure is recorded, not fatal)
            rows.append(fp8_row(fp8, gen, M, N, K))
        except Exception as e:
            rows.append({"workload": "fp8 e4m3 rowwise", "M": M, "N": N, "K": K, "error": repr(e)[:500]})
        print(json.dumps(rows[-1]), flush=True)
    # Host cost per call at 64^3: the jax function (jitted dispatch) and the torch entry (DLPack both ways).
    ta, tw = torch.randn(64, 64, device="cuda").bfloat16(), torch.randn(64, 64, device="cuda").bfloat16()
    a, w = jax.dlpack.from_dlpack(ta), jax.dlpack.from_dlpack(tw)
    host = {"workload": "host cost per call 64^3", "jax_us": host_us(lambda: gemm.gemm_bf16(a, w)),
            "jax_jitted_call_us": host_us(lambda: gemm._call(a, w)),
            "dlpack_torch_to_jax_us": host_us(lambda: jax.dlpack.from_dlpack(ta)),
            "torch_entry_us": host_us(lambda: gemm.gemm_bf16_torch(ta, tw.t())),
            "torch_matmul_us": host_us(lambda: torch.matmul(ta, tw.t()))}
    torch.cuda.synchronize()
    rows.append(host)
    print(json.dumps(host), flush=True)

    def ratios(workload: str, peer: str, key: str) -> list[float]:
        return [r[key] for r in rows if r["workload"] == workload and r.get("peer") == peer]

    summary = {}
    for label, workload, peer in (("bf16_vs_cublas", "bf16 gemm", "cublas"), ("bf16_vs_xla", "bf16 gemm", "xla"),
                                  ("fused_vs_xla", "bf16 gemm + bias + gelu_tanh", "xla"),
                                  ("fp8_vs_scaled_mm", "fp8 e4m3 rowwise", "torch._scaled_mm")):
        for timer, key in (("", "ratio"), ("_cupti", "ratio_cupti"), ("_wall", "ratio_wall"),
                           ("_paired_cupti", "ratio_paired_cupti"), ("_paired_do_bench", "ratio_paired_do_bench")):
            if ratios(workload, peer, key):
                summary[f"{label}_geomean{timer}"] = geomean(ratios(workload, peer, key))
    print(json.dumps(summary), flush=True)
    record = {
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "python": platform.python_version(),
        "jax": jax.__version__, "torch": torch.__version__, "timers": "do_bench medians (block_until_ready / "
        "cuda.synchronize per call), back-to-back wall time, CUPTI kernel time via torch.profiler (L2 flushed)", "rounds": ROUNDS,
        "rows": rows, "summary": summary, "argv": sys.argv[1:],
    }
    (args.out / "bench-pallas.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
