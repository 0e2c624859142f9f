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

--design cute (the CuTe sm90 design; --design triton, the default, is the above): the recompute kernel of a module
rendered here with save = "recompute" (bench/train_step.py's render_cute_module: gelu, specs/training.toml's
linear_gelu_train_cute_bf16 spec; gated, train_step.py's GATED_CUTE, a 128x128x64 gated tile over B's gate and up
columns), against the same module's epilogue-free kernel (its dgrad role: C = X @ Y stored through SMEM by TMA)
traced at the recompute role's config (tile, stages, epilogue stages, warpgroups, cluster; gated: tile_n twice the
recompute's, each CTA covering the same output columns, the same SMEM) under the key CUTE_PLAIN, with A and B in
the recompute's majors: a Config row of the module's TRAIN_CONFIGS, launched by its own `_gemm`. Beside them, cuBLAS
(torch.mm) over the same (M, width N, K). Every output is NaN-poisoned, then checked against a float32 reference
(plain: A @ B; fused: G from dOut and the f32 pre, by autograd). The recompute's G is stored by TMA (gelu) or
element by element (gated: G's halves pairs), so the gated ratio includes that store's cost against a TMA store.
`--compile-only` (no GPU) compiles both kernels of each layer into the CuTe disk cache (SPECGEN_CUTE_CACHE).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


# The CuTe design's modules (rendered with save = "recompute"), and the key of its plain GEMM's config row.
CUTE_NAMES = {"gelu": "linear_gelu_train_recompute_cute_bench", "gated": "mlp_up_swiglu_train_recompute_cute_bench"}
CUTE_PLAIN = "dgrad@recompute_plain"


@functools.cache  # once a process: a module's import registers its torch ops
def cute_module(name: str):
    """The layer's CuTe sm90 module with save = "recompute" (gated: the one bench/train_step.py --layer gated_cute
    renders, so the disk cache serves both), its plain row (CUTE_PLAIN) added to TRAIN_CONFIGS."""
    import tomllib

    import bench.train_step as ts
    from bench.cute_train_tiles import smem

    if name == "gated":
        spec = ts.GATED_CUTE
    else:
        with open(Path(__file__).resolve().parents[1] / "specs" / "training.toml", "rb") as f:
            spec = next(k for k in tomllib.load(f)["kernels"] if k["name"] == "linear_gelu_train_cute_bf16")
    m = ts.render_cute_module(spec, CUTE_NAMES[name], "recompute")
    cfg = m.TRAIN_CONFIGS["recompute"]
    # the epilogue-free kernel at the recompute's config; gated: B's 2N columns as one plain GEMM, tile_n doubled
    plain = cfg._replace(role="dgrad", tile_n=cfg.tile_n * (2 if name == "gated" else 1))
    m.TRAIN_CONFIGS[CUTE_PLAIN] = plain._replace(smem_bytes=smem(plain))
    return m


def measure_cute(name: str, M: int, N: int, K: int, rounds: int) -> dict:
    import torch.nn.functional as F

    m = cute_module(name)
    gated = name == "gated"
    width = 2 if gated else 1
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(width * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()  # nn.Linear's (out, in)
    b = w.t()  # (K, width N), K-major: what the op is called with
    bias = None if gated else torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    g, c, c_aa, c_cublas = (torch.full((M, width * N), float("nan"), device="cuda", dtype=torch.bfloat16)
                            for _ in range(4))
    x, y = m._operands("recompute", a, b)  # as _backward passes them
    xp, yp = m._operands(CUTE_PLAIN, a, b)
    dout = m._tr.tma_ready(grad, 1)
    fused_args = () if gated else (m._vector(bias),)

    def fused():
        m._gemm("recompute", x, y, g, dout, *fused_args)

    def plain(out):
        return lambda: m._gemm(CUTE_PLAIN, xp, yp, out)

    calls = {"plain": plain(c), "plain_aa": plain(c_aa), "fused": fused,
             "cublas": lambda: torch.mm(a, b, out=c_cublas)}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    # float32 references: the product, and G from dOut and the f32 pre by autograd (halves: [dgate | dup])
    ref = a.float() @ b.float()
    pre = (ref if gated else ref + bias.float()).requires_grad_()
    if gated:
        gate, up = pre.chunk(2, dim=-1)
        act = F.silu(gate) * up
    else:
        act = F.gelu(pre, approximate="tanh")
    (g_ref,) = torch.autograd.grad(act, pre, grad.float())

    def rel(got, want):
        return ((got.float() - want).abs().max() / want.abs().max()).item()  # NaN (unwritten) propagates

    errors = {"plain": rel(c, ref), "plain_aa": rel(c_aa, ref), "cublas": rel(c_cublas, ref), "fused": rel(g, g_ref)}
    del ref, pre, act, g_ref
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    per_round = {k: [s / p for s, p in zip(res[k]["samples"], res["plain"]["samples"], strict=True)]
                 for k in ("fused", "plain_aa", "cublas")}
    paired = {k: statistics.median(v) for k, v in per_round.items()}
    flops = 2 * M * width * N * K
    report = {"design": "cute_sm90", "layer": name, "module": CUTE_NAMES[name], "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"),
              "config": {"recompute": m.TRAIN_CONFIGS["recompute"]._asdict(), "plain": m.TRAIN_CONFIGS[CUTE_PLAIN]._asdict()},
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "paired_time_over_plain": paired, "per_round_time_over_plain": per_round,
              "fused_overhead_pct": 100 * (paired["fused"] - 1), "rel_err_vs_f32": errors}
    print(json.dumps({k: v for k, v in report.items() if k != "per_round_time_over_plain"}, indent=1), flush=True)
    return report


def compile_cute(layers: list[str]) -> None:
    """Both kernels of each layer's CuTe module into the disk cache (no GPU needed), each with the compiler's SMEM
    beside the plan's, registers, spills and its TMA / wgmma SASS counts (specgen compile's per-config hook)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config
    from specgen.targets import TARGETS

    bad = 0
    for name in layers:
        m = cute_module(name)
        for key in ("recompute", CUTE_PLAIN):
            r = compile_config(m._train_launcher, CUTE_NAMES[name], key, TARGETS["cute:sm90"],
                               m.TRAIN_CONFIGS[key].smem_bytes, True, True)
            wrong = bool(r.error) or r.compiler_smem != r.plan_smem
            bad += wrong
            print(f"{'FAILED' if wrong else 'compiled'} {r.kernel}: {r.seconds:.1f} s, SMEM plan {r.plan_smem} compiler "
                  f"{r.compiler_smem}, registers {r.registers}, SASS {r.sass}{', cached' if r.cache else ''}"
                  f"{', ' + r.error if r.error else ''}", flush=True)
    if bad:
        raise SystemExit(f"{bad} kernels failed")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--design", choices=("triton", "cute"), default="triton")
    ap.add_argument("--layer", nargs="+", choices=("gelu", "gated"), default=["gelu", "gated"])
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096", "8192x8192x8192"], help="M x N x K")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--compile-only", action="store_true", help="cute: fill the CuTe disk cache, time nothing")
    args = ap.parse_args()
    if args.compile_only:
        if args.design != "cute":
            ap.error("--compile-only is for --design cute")
        compile_cute(args.layer)
        return
    fn = measure_cute if args.design == "cute" else measure
    reports = [fn(name, *map(int, shape.split("x")), args.rounds) for name in args.layer for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()
