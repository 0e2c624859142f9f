"""What forming G = dOut * D inside the backward GEMMs' operand loads costs on Triton (issue 38's Linear + GELU bound:
docs/training/measurements.md "A different save: act'(pre)"), D = act'(pre) saved by the forward instead of pre. Near nothing would
take the columns pass (dOut and pre read, G written: 6 B an element) out of the step.

    python3 gpu/bench_fused_prologue.py [--shape 4096x14336x4096 ...] [--rounds 12] [--json out.json] [--check-only]

dgrad: dX (M, K) = G (M, N) @ W (N, K); wgrad: dW (N, K) = G^T (N, M) @ X (M, K); G = dOut * D.
Each as C (P, Q) = Xop (P, R) @ Y (R, Q); Y row-major (R, Q); Xop from (P, R) tiles or transposed (R, P) tiles.
Plain: Xop = G loaded (one tile); fused: Xop = dOut tile * D tile (two loads, a bf16 multiply in registers). Both are
one kernel here (TMA loads by host descriptors, grouped launch order, TMA store) at each of CONFIGS, beside cuBLAS's
torch.mm on the same G, with the project's paired CUPTI timer (kernel_cycle) and an A/A pair of cuBLAS; results
checked against f32 (NaN-poisoned outputs first). Without a GPU it runs one small config under TRITON_INTERPRET=1
in f16 (the interpreter's bf16 is wrong) and prints the errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm(x_desc, d_desc, y_desc, c_desc, P, Q, R, FUSED: tl.constexpr, XT: tl.constexpr, BP: tl.constexpr,
         BQ: tl.constexpr, BR: tl.constexpr, GROUP: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    num_p = tl.cdiv(P, BP)
    num_q = tl.cdiv(Q, BQ)
    in_group = GROUP * num_q
    first = (pid // in_group) * GROUP
    size = min(num_p - first, GROUP)
    pid_p = first + (pid % in_group) % size
    pid_q = (pid % in_group) // size
    p0 = pid_p * BP
    q0 = pid_q * BQ
    acc = tl.zeros((BP, BQ), dtype=tl.float32)
    for r0 in tl.range(0, R, BR, num_stages=STAGES):
        if XT:
            x = x_desc.load([r0, p0])
            if FUSED:
                x = x * d_desc.load([r0, p0])
            x = tl.trans(x)
        else:
            x = x_desc.load([p0, r0])
            if FUSED:
                x = x * d_desc.load([p0, r0])
        y = y_desc.load([r0, q0])
        acc = tl.dot(x, y, acc)
    c_desc.store([p0, q0], acc.to(c_desc.dtype))


def launch(x, d, y, c, xt: bool, fused: bool, bp: int, bq: int, br: int, stages: int, warps: int, group: int = 8):
    P, Q = c.shape
    R = y.shape[0]
    xb = [br, bp] if xt else [bp, br]
    xd = TensorDescriptor.from_tensor(x, xb)
    dd = TensorDescriptor.from_tensor(d, xb)
    yd = TensorDescriptor.from_tensor(y, [br, bq])
    cd = TensorDescriptor.from_tensor(c, [bp, bq])
    grid = (triton.cdiv(P, bp) * triton.cdiv(Q, bq),)
    return lambda: gemm[grid](xd, dd, yd, cd, P, Q, R, fused, xt, bp, bq, br, group, stages, num_warps=warps)


CONFIGS = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 256, 64, 2, 8), (128, 128, 64, 4, 4), (128, 128, 64, 5, 8),
           (256, 128, 64, 3, 8)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", default="")
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()
    reports = [measure(*map(int, shape.split("x")), args.rounds, args.check_only) for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


def measure(M: int, N: int, K: int, rounds: int, check_only: bool) -> dict:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = torch.bfloat16 if dev == "cuda" else torch.float16
    g = torch.Generator(device=dev).manual_seed(0)
    dout = torch.randn(M, N, generator=g, device=dev).to(dt)
    dmat = torch.rand(M, N, generator=g, device=dev).to(dt)  # act'(pre) stands in: values in [0, 1)
    x = torch.randn(M, K, generator=g, device=dev).to(dt)
    w = (torch.randn(N, K, generator=g, device=dev) / K**0.5).to(dt)
    gmat = dout * dmat
    want_dx = gmat.float() @ w.float()
    want_dw = gmat.float().t() @ x.float()
    calls, errs = {}, {}
    dx = torch.empty(M, K, device=dev, dtype=dt)
    dw = torch.empty(N, K, device=dev, dtype=dt)
    for bp, bq, br, st, wp in CONFIGS if dev == "cuda" else [(32, 32, 16, 2, 4)]:
        tag = f"{bp}x{bq}x{br}s{st}w{wp}"
        for fused in (False, True):
            name = f"{'fused' if fused else 'plain'}_{tag}"
            try:
                f1 = launch(dout if fused else gmat, dmat, w, dx, False, fused, bp, bq, br, st, wp)
                f2 = launch(dout if fused else gmat, dmat, x, dw, True, fused, bp, bq, br, st, wp)
                dx.fill_(float("nan")), dw.fill_(float("nan"))
                f1(), f2()
                if dev == "cuda":
                    torch.cuda.synchronize()
            except Exception as e:  # out of SMEM at this config: listed, not timed
                errs[name] = f"{type(e).__name__}: {str(e)[:120]}"
                continue
            errs[name] = [((got.float() - want).abs().max() / want.abs().max()).item()
                          for got, want in ((dx, want_dx), (dw, want_dw))]
            calls[f"dgrad_{name}"], calls[f"wgrad_{name}"] = f1, f2
    print(json.dumps(errs, indent=1), flush=True)
    if check_only or dev != "cuda":
        return {"shape": [M, N, K], "errors": errs}
    from specgen.bench.timing import kernel_cycle

    calls["dgrad_cublas"] = lambda: torch.mm(gmat, w)
    calls["dgrad_cublas_aa"] = lambda: torch.mm(gmat, w)
    calls["wgrad_cublas"] = lambda: torch.mm(gmat.t(), x)
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}

    def ratio(a: str, b: str) -> float:
        return statistics.median(p / q for p, q in zip(res[a]["samples"], res[b]["samples"], strict=True))

    table = {k: {"us": med[k], "over_cublas": ratio(k, f"{k.split('_')[0]}_cublas")} for k in sorted(med)}
    table["aa"] = ratio("dgrad_cublas_aa", "dgrad_cublas")
    pairs = {k: ratio(k.replace("_plain_", "_fused_"), k) for k in med
             if "_plain_" in k and k.replace("_plain_", "_fused_") in med}
    rep = {"shape": [M, N, K], "device": torch.cuda.get_device_name(), "triton": triton.__version__,
           "torch": torch.__version__, "rounds": rounds, "table": table, "fused_over_plain": pairs, "errors": errs}
    print(json.dumps(rep, indent=1), flush=True)
    return rep


if __name__ == "__main__":
    sys.exit(main())
