"""The CuTe sm90 training kernel's GEMMs (linear_gelu_train_cute_bf16: forward_pre, dgrad, wgrad) under candidate
configs, each beside its cuBLAS peer, timed with the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle:
every call once a round, rotating order, L2 flushed before each), each candidate's result checked against cuBLAS's.

    python3 bench/cute_train_tiles.py [--shape 4096x14336x4096] [--rounds 20] [--compile-only] [--step] [--json out.json]

A candidate is the role's TRAIN_CONFIGS row with fields replaced (CANDIDATES: tile, stages, cluster),
traced by the module's own kernel under the key "<role>@<name>" (so the CuTe disk cache keeps each apart):
`--compile-only` compiles them all into the disk cache on a machine without a GPU (SPECGEN_CUTE_CACHE), for a GPU
call to load. `--step` then times the whole training step (bench/train_step.py's --layer gelu_cute) twice: with the
module's configs, and with each role's fastest candidate put in its place (what the spec's `training` section would
render), eager side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROLES = ("forward_pre", "dgrad", "wgrad")
# name: the fields set over the role's config (tile k 64, 2 consumer warpgroups, 1x1 clusters unless named)
ONE = {"cluster_m": 1, "cluster_n": 1}
CANDIDATES: dict[str, dict[str, int]] = {
    "128x256x64s4": {"tile_m": 128, "tile_n": 256, "ab_stages": 4, **ONE},
    "128x256x64s4c2x1": {"tile_m": 128, "tile_n": 256, "ab_stages": 4, **ONE, "cluster_m": 2},
    "128x256x64s4c1x2": {"tile_m": 128, "tile_n": 256, "ab_stages": 4, **ONE, "cluster_n": 2},
    "256x128x64s4": {"tile_m": 256, "tile_n": 128, "ab_stages": 4, **ONE},
    "256x128x64s4c2x1": {"tile_m": 256, "tile_n": 128, "ab_stages": 4, **ONE, "cluster_m": 2},
    "256x128x64s4c1x2": {"tile_m": 256, "tile_n": 128, "ab_stages": 4, **ONE, "cluster_n": 2},
    "128x256x64s3": {"tile_m": 128, "tile_n": 256, "ab_stages": 3, **ONE},
}
FORWARD_CANDIDATES = ("128x256x64s4", "128x256x64s4c2x1", "128x256x64s4c1x2")  # forward_pre's SMEM: 4 stages of 128x256 only


def smem(cfg) -> int:
    """The SharedStorage struct the kernel declares (as the design's plan counts it), + the 1024-byte base pad."""
    up = lambda n: -(-n // 1024) * 1024  # noqa: E731
    stage = (cfg.tile_m + cfg.tile_n) * cfg.tile_k * 2
    return 1024 + up(2 * cfg.ab_stages * 8) + cfg.ab_stages * stage + up(cfg.epi_m * cfg.epi_n * cfg.epi_stages * 2)


def candidates(m) -> dict[str, object]:
    """Every "<role>@<name>" config, added to the module's TRAIN_CONFIGS."""
    out = {}
    for role in ROLES:
        for name, change in CANDIDATES.items():
            if role == "forward_pre" and name not in FORWARD_CANDIDATES:
                continue
            cfg = m.TRAIN_CONFIGS[role]._replace(**change)
            out[f"{role}@{name}"] = cfg._replace(smem_bytes=smem(cfg))
    m.TRAIN_CONFIGS.update(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x14336x4096", help="M x N x K (x: (M, K), w: (N, K))")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--step", action="store_true", help="then time the training step with the fastest candidates")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import generated.cute.linear_gelu_train_cute_bf16 as m

    cands = candidates(m)
    if args.compile_only:
        for key, cfg in cands.items():
            assert cfg.smem_bytes <= 232448, (key, cfg.smem_bytes)
            m._train_launcher.export(m._train_launcher.compile(key), key)
            print("compiled", key, cfg.smem_bytes, flush=True)
        return
    report = measure(m, cands, *map(int, args.shape.split("x")), args.rounds)
    if args.step:
        report["step"] = step(m, cands, report["best"], *map(int, args.shape.split("x")), max(5, args.rounds // 2))
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def measure(m, cands: dict, M: int, N: int, K: int, rounds: int) -> dict:
    import torch

    from specgen.bench.timing import kernel_cycle

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    g = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    out, pre = torch.empty(M, N, device="cuda", dtype=torch.bfloat16), torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    da, dwt = torch.empty(M, K, device="cuda", dtype=torch.bfloat16), torch.empty(N, K, device="cuda", dtype=torch.bfloat16)
    b = w.t()  # the kernel's B: nn.Linear's weight passed as w.t()

    def run(key: str):
        role = key.split("@")[0]
        if role == "forward_pre":
            return lambda: m._gemm(key, x, b, out, pre, bias)
        if role == "dgrad":  # dA = G @ B^T, B^T the weight (N, K)
            return lambda: m._gemm(key, *m._operands(key, g, b.t()), da)
        return lambda: m._gemm(key, *m._operands(key, g.t(), x), dwt)  # dB^T = G^T @ A

    peers = {"forward_pre": lambda: torch.addmm(bias, x, w.t()), "dgrad": lambda: torch.mm(g, w),
             "wgrad": lambda: torch.mm(g.t(), x)}
    errors = {}
    for key in cands:  # each candidate's result against cuBLAS's (relative to its largest magnitude)
        run(key)()
        role = key.split("@")[0]
        want = peers[role]().float()
        got = {"forward_pre": pre, "dgrad": da, "wgrad": dwt}[role].float()
        errors[key] = ((got - want).abs().max() / want.abs().max()).item()
    calls = {f"cublas:{r}": f for r, f in peers.items()} | {k: run(k) for k in cands}
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    best = {}
    for role in ROLES:
        ok = [k for k in cands if k.startswith(role + "@") and errors[k] < 1e-2]
        best[role] = min(ok, key=med.__getitem__)
    flops = 2 * M * N * K
    return {"shape": [M, N, K], "rounds": rounds, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"),
            "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
            "over_cublas": {k: med[f"cublas:{k.split('@')[0]}"] / v for k, v in med.items() if "@" in k},
            "rel_err_vs_cublas": errors, "best": best,
            "configs": {k: c._asdict() for k, c in cands.items()}}


def step(m, cands: dict, best: dict, M: int, N: int, K: int, rounds: int) -> dict:
    """The training step (train_step.py --layer gelu_cute) with the module's configs, then with each role's fastest
    candidate in its place (its compiled function under the role's key: what `_gemm(role)` launches)."""
    import torch

    import bench.train_step as ts

    before = ts.measure_cute(M, N, K, rounds, False)
    device = torch.cuda.current_device()
    for role, key in best.items():
        m._train_launcher.ready[(device, role)] = m._train_launcher.entry(device, key, cands[key])
    after = ts.measure_cute(M, N, K, rounds, False)
    return {"module_configs": before, "fastest_candidates": after, "candidates": best}


if __name__ == "__main__":
    main()
