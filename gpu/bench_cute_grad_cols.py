"""The CuTe sm90 training module's columns pass (G = dOut * act'(pre) and the bias gradient's band sums) at several
band counts, inside the whole preact step: eager autograd beside the CuTe step with GRAD_COLS_BANDS (the least bands)
and GRAD_COLS_CTAS (the CTAs the bands should give: 0 = GRAD_COLS_BANDS alone, the rule before session 35) set to each
pair (the torch launcher reads them at call time: the same compiled kernels, only the rows a band change), timed with
the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle: L2 flushed, rotating order; eager's A/A beside).

    python3 gpu/bench_cute_grad_cols.py [--bands 64:0,64:1024,256:0] [--shape 8192x8192x8192 ...] [--rounds 10] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from specgen.bench.timing import kernel_cycle


def measure(M: int, N: int, K: int, bands: list[tuple[int, int]], rounds: int) -> dict:
    import generated.cute.linear_gelu_train_cute_bf16 as mod

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()

    def eager():
        return torch.autograd.grad(F.gelu(F.linear(x, w, bias), approximate="tanh"), (x, w, bias), grad)

    def cute(b: int, ctas: int):
        def step():
            mod.GRAD_COLS_BANDS, mod.GRAD_COLS_CTAS = b, ctas
            return torch.autograd.grad(mod.linear_gelu_train_cute_bf16(x, w.t(), bias), (x, w, bias), grad)
        return step

    calls = {"eager": eager, "eager_aa": eager, **{f"cute_bands{b}_ctas{c}": cute(b, c) for b, c in bands}}
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, bias))
    want = torch.autograd.grad(F.gelu(F.linear(xr, wr, br), approximate="tanh"), (xr, wr, br), grad.float())
    errors = {name: [((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(fn(), want, strict=True)]
              for name, fn in calls.items() if name != "eager_aa"}
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    ratio = {k: statistics.median(e / s for e, s in zip(res["eager"]["samples"], v["samples"], strict=True))
             for k, v in res.items()}
    cols = {k: sum(t for n, t in v["kernels"].items() if "grad_cols" in n) for k, v in res.items() if k.startswith("cute")}
    report = {"shape": [M, N, K], "rounds": rounds, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "median_us": med, "eager_over": ratio, "columns_pass_us": cols, "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "grad_rel_err_vs_f32 (dx, dw, dbias)": errors}
    print(f"{M}x{N}x{K}: eager {med['eager']:.1f} us, A/A {ratio['eager_aa']:.4f}")
    for b, c in bands:
        k = f"cute_bands{b}_ctas{c}"
        print(f"  bands >= {b:4d}, CTAs {c:5d}: step {med[k]:8.1f} us  eager/x {ratio[k]:.4f}  columns pass {cols[k]:6.1f} us  "
              f"err {' '.join(f'{e:.2e}' for e in errors[k])}")
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bands", default="64:0,64:1024,128:0,256:0", help="GRAD_COLS_BANDS:GRAD_COLS_CTAS pairs")
    ap.add_argument("--shape", nargs="+", default=["8192x8192x8192", "4096x14336x4096", "16384x4096x4096"])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    bands = [(int(b), int(c)) for b, c in (pair.split(":") for pair in args.bands.split(","))]
    reports = [measure(*map(int, s.split("x")), bands, args.rounds) for s in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()
