"""Forward + backward of the shipped training kernels (specs/training.toml) against eager autograd, timed with
the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle: every call once a round, rotating order,
L2 flushed before each; all kernels of one call summed), with an A/A pair of eager for the noise.

    python3 bench/train_step.py [--shape 4096x14336x4096 ...] [--rounds 20] [--compile] [--json out.json]

--compile adds torch.compile (default mode) of the eager step's forward as a second peer.

A step is out = gelu_tanh(x @ w.T + bias), then torch.autograd.grad(out, (x, w, bias), dOut): three GEMMs of
2 M N K flops each. Also prints the bf16 gradients' distance from a float32 reference (eager's and ours).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from specgen.bench.timing import kernel_cycle


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096"], help="M x N x K (x: (M, K), w: (N, K))")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="time torch.compile's step beside eager")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    reports = [measure(*map(int, shape.split("x")), args.rounds, args.compile) for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


def measure(M: int, N: int, K: int, rounds: int, compiled: bool) -> dict:
    from generated.triton.linear_gelu_train_bf16 import linear_gelu_train_bf16 as preact
    from generated.triton.linear_gelu_train_recompute_bf16 import (
        linear_gelu_train_recompute_bf16 as recompute,
    )

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w, bias), (x, w, bias), grad)

    def eager(x, w, bias):
        return F.gelu(F.linear(x, w, bias), approximate="tanh")

    calls = {"eager": step(eager), "eager_aa": step(eager), **({"compiled": step(torch.compile(eager))} if compiled else {}),
             "specgen_preact": step(lambda x, w, b: preact(x, w.t(), b)),
             "specgen_recompute": step(lambda x, w, b: recompute(x, w.t(), b))}
    # numerics first: each side's gradients against a float32 reference
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, bias))
    want = torch.autograd.grad(F.gelu(F.linear(xr, wr, br), approximate="tanh"), (xr, wr, br), grad.float())
    errors = {}
    for name in ("eager", "specgen_preact", "specgen_recompute"):
        got = calls[name]()
        errors[name] = [((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, want, strict=True)]
    res = kernel_cycle(calls, rounds=rounds)
    flops = 3 * 2 * M * N * K
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    ratios = {peer: {k: statistics.median(e / s for e, s in zip(res[peer]["samples"], v["samples"], strict=True))
                     for k, v in res.items()} for peer in ("eager", "compiled") if peer in res}
    report = {"shape": [M, N, K], "rounds": rounds, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": __import__("triton").__version__,
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_ratio_peer_over": ratios, "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "grad_rel_err_vs_f32 (dx, dw, dbias)": errors,
              "saved_bytes": {"preact": M * N * 2, "recompute": 0, "eager": M * N * 2}}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
