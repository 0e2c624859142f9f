"""The CuTe sm90 recompute GEMM (save = "recompute": G = dOut * gelu_tanh'(A @ B + bias)) on the ping-pong schedule,
one warpgroup's epilogue under the other's mainloop (`training.pre.schedule = "pingpong"`, issue 38's fused-epilogue
target), against the cooperative module's, each beside its plain GEMM (the module's dgrad kernel at the recompute's
config: the GEMM the epilogue rides on; since session 34 that config's SMEM holds the dOut ring too, unread there) and cuBLAS's torch.mm, with the project's paired CUPTI timer (kernel_cycle, L2
flushed, per-round ratios, an A/A of cuBLAS); G and the plain product checked against float32 (NaN-poisoned first).

    python3 gpu/bench_recompute_schedule.py [--variants coop pre_pp ...] [--shape 4096x14336x4096 ...] [--rounds 20]
                                            [--json out.json] [--compile-only]

Variants (VARIANTS: fields over specs/training.toml's linear_gelu_train_cute_bf16, rendered with save = "recompute"):
coop (the spec's forward config: 128x256x64 cooperative, 2x1 clusters), pre_pp (the recompute GEMM alone at 128x128x64
ping-pong, as a spec sets it), pp128x128 / pp64x256 / pp128x128c1 (the whole module ping-pong at that tile, 2x1 or
1x1 clusters). --compile-only compiles each variant's two kernels for sm_90a (no GPU) and prints SMEM, registers and
SASS counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {  # name: fields over linear_gelu_train_cute_bf16 (the forward's tile and schedule; every role takes them)
    "coop": {"training": {"pre": {}}},  # the spec's forward tile and schedule (its preact pre GEMM runs ping-pong)
    "pre_pp": {"training": {"pre": {"tile": {"m": 128, "n": 128, "k": 64}, "schedule": "pingpong"}}},
    "pp128x128": {"tile": {"m": 128, "n": 128, "k": 64}, "cute": {"schedule": "pingpong"},
                  "training": {"dgrad": {"tile": {"m": 128, "n": 128, "k": 64}}, "wgrad": {"tile": {"m": 128, "n": 128, "k": 64}}}},
    "pp64x256": {"tile": {"m": 64, "n": 256, "k": 64}, "cute": {"schedule": "pingpong"},
                 "training": {"dgrad": {"tile": {"m": 64, "n": 256, "k": 64}}, "wgrad": {"tile": {"m": 64, "n": 256, "k": 64}}}},
    "pp128x128c1": {"tile": {"m": 128, "n": 128, "k": 64}, "cute": {"schedule": "pingpong"}, "cluster": {"m": 1, "n": 1},
                    "training": {"dgrad": {"tile": {"m": 128, "n": 128, "k": 64}}, "wgrad": {"tile": {"m": 128, "n": 128, "k": 64}}}},
}


def modules(names):
    import bench.train_step as ts

    with open(ROOT / "specs" / "training.toml", "rb") as f:
        base = next(k for k in tomllib.load(f)["kernels"] if k["name"] == "linear_gelu_train_cute_bf16")
    out = {}
    for v in names:
        change = VARIANTS[v]
        spec = {**base, **{k: x for k, x in change.items() if k != "training"},
                "training": {**base["training"], **change.get("training", {})}}
        m = ts.render_cute_module(spec, f"gelu_recompute_{v}", "recompute")
        cfg = m.TRAIN_CONFIGS["recompute"]
        m.TRAIN_CONFIGS["plain"] = cfg._replace(role="dgrad")
        print(v, cfg, flush=True)
        out[v] = m
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096", "8192x8192x8192"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    mods = modules(args.variants)
    if args.compile_only:
        from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config
        from specgen.targets import TARGETS

        for v, m in mods.items():
            for key in ("recompute", "plain"):
                r = compile_config(m._train_launcher, f"gelu_recompute_{v}", key, TARGETS["cute:sm90"],
                                   m.TRAIN_CONFIGS[key].smem_bytes, True, True)
                print(v, key, r.seconds, r.plan_smem, r.compiler_smem, r.registers, r.sass, r.error, flush=True)
        return
    reports = [measure(mods, *map(int, shape.split("x")), args.rounds) for shape in args.shape]
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))


def measure(mods: dict, M: int, N: int, K: int, rounds: int) -> dict:
    import torch

    from specgen.bench.timing import kernel_cycle

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
    b = w.t()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    calls, outs = {}, {}
    for v, m in mods.items():
        g = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        outs[v] = (g, c)
        calls[f"{v}_fused"], calls[f"{v}_plain"] = kernels(m, a, b, bias, grad, g, c)
    cub = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    calls["cublas"] = lambda: torch.mm(a, b, out=cub)
    calls["cublas_aa"] = lambda: torch.mm(a, b, out=cub)
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    pre = (ref + bias.float()).requires_grad_()
    (gref,) = torch.autograd.grad(torch.nn.functional.gelu(pre, approximate="tanh"), pre, grad.float())
    err = {v: [((g.float() - gref).abs().max() / gref.abs().max()).item(),
               ((c.float() - ref).abs().max() / ref.abs().max()).item()] for v, (g, c) in outs.items()}
    del ref, pre, gref
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}

    def ratio(p: str, q: str) -> float:
        return statistics.median(s / t for s, t in zip(res[p]["samples"], res[q]["samples"], strict=True))

    rep = {"shape": [M, N, K], "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"), "rounds": rounds,
           "configs": {v: {"recompute": m.TRAIN_CONFIGS["recompute"]._asdict()} for v, m in mods.items()},
           "median_us": med, "errors": err, "aa": ratio("cublas_aa", "cublas"),
           "fused_over_plain": {v: ratio(f"{v}_fused", f"{v}_plain") for v in mods},
           "over_cublas": {k: ratio(k, "cublas") for k in med},
           "fused_over_coop_fused": {v: ratio(f"{v}_fused", "coop_fused") for v in mods if "coop" in mods}}
    print(json.dumps(rep, indent=1), flush=True)
    return rep


def kernels(m, a, b, bias, grad, g, c):
    """The module's recompute GEMM (G into g) and its plain GEMM at the same config (the product into c)."""
    x, y = m._operands("recompute", a, b)
    dout = m._tr.tma_ready(grad, 1)
    return (lambda: m._gemm("recompute", x, y, g, dout, m._vector(bias))), (lambda: m._gemm("plain", x, y, c))


if __name__ == "__main__":
    main()
