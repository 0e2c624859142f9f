"""What the backward's fused epilogue costs over the plain GEMM it rides on (issue 38: "the backward's fused epilogue
costing <= 3% over the plain GEMM it rides on"), with the project's paired CUPTI timer (kernel_cycle: every call
once a round, rotating order, L2 flushed before each; per-round ratios) and an A/A pair of the plain GEMM.

    python3 gpu/bench_backward_epilogue.py [--shape 4096x14336x4096 ...] [--rounds 20] [--json out.json]

The fused epilogue is the recompute kernel's (save = "recompute": G = dOut * act'(A @ B + bias), dOut read as a
matrix operand at each output tile, G stored in the operands' dtype). Its plain GEMM is the same module's
epilogue-free backward kernel (the dgrad kernel: C = X @ Y) launched with the recompute role's tile, warps and
stages on the same A, B and a C of G's shape, stored the way recompute stores (masked pointer stores, no TMA store).
Both go through the module's own launch path (specgen.runtime.triton.training.gemm: the TMA form, persistent).
- gelu: linear_gelu_train_recompute_bf16 (bias + GELU-tanh), an M x N x K GEMM.
- gated: mlp_up_swiglu_train_recompute_bf16 (SwiGLU, halves): the recompute GEMM reads gate and up tiles of B
  (K, 2N) and stores G (M, 2N); its plain GEMM is M x 2N x K with the role's tile twice as wide (BLOCK_Q x 2: each
  program covers the same output columns).
With save = "preact" there is no fused backward epilogue: G and dbias come from the separate columns pass
(`grad_cols`), whose time bench/train_step.py reports per kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from specgen.bench.timing import kernel_cycle
from specgen.runtime.triton import training as tr


def layer(name: str):
    if name == "gelu":
        from generated.triton import linear_gelu_train_recompute_bf16 as module
    else:
        from generated.triton import mlp_up_swiglu_train_recompute_bf16 as module
    return module


def measure(name: str, M: int, N: int, K: int, rounds: int) -> dict:
    module = layer(name)
    kernel = module.METADATA["kernel"]
    gated = "halves" if name == "gated" else ""
    width = 2 if gated else 1
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(width * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()  # nn.Linear's (out, in)
    b = w.t()  # (K, width N), K-major: what the op is called with
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    g = torch.empty(M, width * N, device="cuda", dtype=torch.bfloat16)
    c, c_aa = torch.empty_like(g), torch.empty_like(g)
    device = a.get_device()
    tiles, configs = module.BACKWARD_TILES["recompute"], module.BACKWARD_CONFIGS["recompute"]
    plain_tiles = {**tiles, "BLOCK_Q": tiles["BLOCK_Q"] * width}
    fused_args = (grad, bias) if not gated else (grad,)

    def fused():
        tr.gemm(kernel, module._BACKWARD_KERNELS["recompute"], configs, tiles, device, a, b, g, fused_args, grad.stride(),
                False, True, gated=gated)

    def plain(out):
        def run():  # the dgrad kernel's store path, with its TMA store off (tr.TMA_STORES): recompute's pointer stores
            tr.TMA_STORES = False
            try:
                tr.gemm(kernel, module._BACKWARD_KERNELS["dgrad"], configs, plain_tiles, device, a, b, out, (), (), True,
                        True)
            finally:
                tr.TMA_STORES = True
        return run

    calls = {"plain": plain(c), "plain_aa": plain(c_aa), "fused": fused}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()).bfloat16()
    plain_err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()  # the comparator computes A @ B
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    paired = {k: statistics.median(s / p for s, p in zip(res[k]["samples"], res["plain"]["samples"], strict=True))
              for k in ("fused", "plain_aa")}
    flops = 2 * M * width * N * K
    report = {"layer": name, "kernel": kernel, "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "tile": tiles, "config": configs,
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_time_over_plain": paired, "fused_overhead_pct": 100 * (paired["fused"] - 1),
              "plain_rel_err_vs_f32": plain_err}
    print(json.dumps(report, indent=1))
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", nargs="+", choices=("gelu", "gated"), default=["gelu", "gated"])
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096", "8192x8192x8192"], help="M x N x K")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    reports = [measure(name, *map(int, shape.split("x")), args.rounds) for name in args.layer for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()
