"""The CuTe sm90 training kernel's GEMMs (linear_gelu_train_cute_bf16: forward_pre, dgrad, wgrad) under candidate
configs, each beside its cuBLAS peer, timed with the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle:
every call once a round, rotating order, L2 flushed before each), each candidate's result checked against cuBLAS's.

    python3 bench/cute_train_tiles.py [--layer gelu|gated] [--shape 4096x14336x4096] [--rounds 20] [--compile-only] [--step]
                                      [--compile] [--json out.json]

A candidate is the role's TRAIN_CONFIGS row with fields replaced (CANDIDATES: tile, stages, cluster),
traced by the module's own kernel under the key "<role>@<name>" (so the CuTe disk cache keeps each apart):
`--compile-only` compiles them all into the disk cache on a machine without a GPU (SPECGEN_CUTE_CACHE), for a GPU
call to load. `--step` then times the whole training step (bench/train_step.py's --layer gelu_cute) twice: with the
module's configs, and with each role's fastest candidate put in its place (what the spec's `training` section would
render), eager side by side.

--layer gated: the gated up-projection (bench/train_step.py's GATED_CUTE: SwiGLU, halves, a 128x128x64 gated tile
over two consumer warpgroups, 2x1 clusters), its forward_pre role (save = "preact": pre's gate and up stored by TMA
beside out) and its recompute role (save = "recompute": G from dOut, stored element by element). A candidate is
GATED_CUTE with fields set (GATED_CANDIDATES: tile, pipeline stages, cluster), run through `specgen check`'s rules
first (a refused one is listed with its findings, neither compiled nor timed) and rendered: the role's row as that
spec renders it goes into the module's TRAIN_CONFIGS under "<role>@<name>" (the kernel code is the same for every
candidate: the renders differ in their Config rows only). Each is timed beside cuBLAS's torch.mm over the same
(M, 2N, K), its pre and out (forward_pre) or G (recompute) NaN-poisoned, then checked against values formed in f32
from cuBLAS's product. `--step` times the gated training step (train_step.py's measure_gated: eager, the cuBLAS GEMMs
alone, both CuTe save modes; `--compile` adds torch.compile) with the modules' configs, then with each role's fastest
candidate. `--compile-only` compiles every candidate and every kernel the step runs (specgen compile's per-config
hook: the compiler's SMEM beside the plan's, registers, spills) into the disk cache.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
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


def smem(cfg, gated: bool = False) -> int:
    """The SMEM a Config row declares (bf16 operands and output), as the design plans it: the CuTe sm90 kernel's
    SharedStorage struct `memory` counts (specgen/kinds/gemm/designs/cute_sm90/smem.py's `row_smem`: the row's tile,
    stages, epilogue subtiles, schedule and dOut ring, which every role traced at a recompute's config declares) + the
    1024-byte base pad; `gated`: a stage holds B's gate and up tiles."""
    from specgen.kinds.gemm.designs.cute_sm90.smem import row_smem
    from specgen.targets import TARGETS

    return row_smem(cfg, TARGETS["cute:sm90"].gpu.smem_per_block, gated=gated).total


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
    ap.add_argument("--layer", choices=("gelu", "gated"), default="gelu")
    ap.add_argument("--compile", action="store_true", help="gated --step: torch.compile's step beside eager")
    args = ap.parse_args()
    if args.layer == "gated":
        return main_gated(args)
    import generated.cute.linear_gelu_train_cute_bf16 as m
    from specgen.targets import TARGETS

    cands = candidates(m)
    if args.compile_only:
        for key, cfg in cands.items():
            assert cfg.smem_bytes <= TARGETS["cute:sm90"].gpu.smem_per_block, (key, cfg.smem_bytes)
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


# The gated layer's candidates by role: fields set over GATED_CUTE (a 128x128x64 gated tile over two cooperative
# warpgroups, 2x1 clusters, one epilogue stage; the GEMM that computes pre, `training.pre`, on its own ping-pong
# schedule at 64x128x64: a whole gated tile a warpgroup, 3 epilogue buffers each). A candidate's `training.pre`
# replaces GATED_CUTE's ({} is the forward's cooperative tile and schedule, its row before the ping-pong one), its
# `pipeline` the whole table ("coop_s3e2": the default's 3 A/B stages and 2 x 3 buffers, GATED_CUTE's row before
# session 32). Some are refused by check's rules (SMEM001, REG001, CUTE001) and listed as such: what was tried.
def _p(ab: int | None = None, epi: int | None = None) -> dict:
    return {"pipeline": {**({"ab_stages": ab} if ab else {}), **({"epilogue_stages": epi} if epi else {})}}


def _pre(m: int = 64, n: int = 128, pingpong: bool = True, **more: object) -> dict:
    return {"training": {"pre": {"tile": {"m": m, "n": n, "k": 64}, **({"schedule": "pingpong"} if pingpong else {}),
                                 **more}}}


C11, C12 = {"cluster": {"m": 1, "n": 1}}, {"cluster": {"m": 1, "n": 2}}
COOP = {"training": {"pre": {}}}
GATED_CANDIDATES: dict[str, dict[str, dict]] = {
    "forward_pre": {
        "coop": COOP, "coop_s3e2": {**COOP, **_p(3, 2)}, "coop_c1x1": {**COOP, **C11}, "pp128x64": _pre(128, 64),
        "pp64x128_c1x1": {**_pre(), **C11}, "pp64x128_e2": {**_pre(), **_p(None, 2)}, "pp64x128_s4": _pre(ab_stages=4),
        "coop_s4e2": {**COOP, **_p(4, 2)}, "pp64x256": _pre(64, 256), "coop_128x256": _pre(128, 256, False),
    },
    "recompute": {
        "coop": COOP, "coop_c1x2": {**COOP, **C12}, "pp128x64": _pre(128, 64), "pp64x128_c1x1": {**_pre(), **C11},
        "pp64x128_s4": _pre(ab_stages=4), "coop_s5": {**COOP, **_p(5)}, "coop_128x256": _pre(128, 256, False),
    },
}
GATED_ROLE = {"preact": "forward_pre", "recompute": "recompute"}
# bench/train_step.py --layer gated_cute's module names: the same renders, so the disk cache serves both scripts
GATED_NAMES = {"preact": "mlp_up_swiglu_train_cute_bench", "recompute": "mlp_up_swiglu_train_recompute_cute_bench"}


def config_row(m, text: str, role: str):
    """The role's TRAIN_CONFIGS row in a rendered module's text, as the module `m`'s Config."""
    found = re.search(rf'^    "{role}": Config\((.*)\),$', text, re.M)
    assert found, f"no {role} row in the rendered candidate"
    call = ast.parse(f"f({found.group(1)})", mode="eval").body
    return m.Config(**{kw.arg: ast.literal_eval(kw.value) for kw in call.keywords})


def gated_candidates(m, save: str, base: dict) -> tuple[dict, dict, list]:
    """({"<role>@<name>": Config}, added to m.TRAIN_CONFIGS; {refused key: check's errors}; the names whose row is
    the module's own), each candidate's fields set over `base` (GATED_CUTE)."""
    from specgen.check import check_spec
    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text

    role = GATED_ROLE[save]
    out, refused, same = {}, {}, []
    for name, change in GATED_CANDIDATES[role].items():
        spec = {**base, **change, "name": "mlp_up_swiglu_candidate",
                "training": {**base["training"], **change.get("training", {}), "save": save}}
        (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<candidate:{role}@{name}>", ".json")
        errors = list(dict.fromkeys(f"{d.rule}: {d.message}" for d in check_spec(ls) if d.severity == "error"))
        if errors:
            refused[f"{role}@{name}"] = errors
            continue
        ((_, text),) = render_modules(ls, ls.spec.targets).items()
        cfg = config_row(m, text, role)
        if cfg == m.TRAIN_CONFIGS[role]:
            same.append(name)
        else:
            out[f"{role}@{name}"] = cfg
    m.TRAIN_CONFIGS.update(out)
    return out, refused, same


def main_gated(args) -> None:
    import bench.train_step as ts

    mods = {save: ts.render_cute_module(ts.GATED_CUTE, GATED_NAMES[save], save) for save in GATED_NAMES}
    cands, refused, same = {}, {}, {}
    for save, m in mods.items():
        role = GATED_ROLE[save]
        cands[save], r, same[role] = gated_candidates(m, save, ts.GATED_CUTE)
        refused |= r
        print(f"{role} (the module's row): {m.TRAIN_CONFIGS[role]}; candidates giving the same row: "
              f"{same[role] or 'none'}", flush=True)
        for key, cfg in cands[save].items():
            print(f"  {key}: {cfg}", flush=True)
    for key, errors in refused.items():
        print(f"refused by check (not timed) {key}:", *errors, sep="\n    ", flush=True)
    if args.compile_only:
        compile_gated(mods, cands)
        return
    M, N, K = map(int, args.shape.split("x"))
    report = measure_gated(mods, cands, M, N, K, args.rounds) | {"refused": refused, "same_as_module": same}
    print(json.dumps(report, indent=1), flush=True)
    if args.step:
        report["step"] = gated_step(mods, report["best"], M, N, K, max(5, args.rounds // 2), args.compile)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def compile_gated(mods: dict, cands: dict) -> None:
    """Every candidate, then every kernel of both modules (what --step runs), into the CuTe disk cache, each
    with its compiler SMEM, registers and spills (specgen compile's hook); exits non-zero where one fails."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config, compile_module
    from specgen.targets import TARGETS

    target, rows = TARGETS["cute:sm90"], []
    for save, m in mods.items():
        kernel = m.METADATA["kernel"]
        rows += [compile_config(m._train_launcher, kernel, key, target, cfg.smem_bytes, False, True)
                 for key, cfg in cands[save].items()]
        rows += compile_module(m, target)
    bad = 0
    for r in rows:
        # a config that spills (check's register model passes it, ptxas does not) is still timed: it is not cached
        # (the hook refuses to), so the GPU compiles it at its first call
        spills = bool(r.spills and (r.spills.stores or r.spills.loads))
        wrong = (r.error and not spills) or (r.plan_smem and r.compiler_smem != r.plan_smem)
        bad += bool(wrong)
        state = "FAILED" if wrong else "SPILLS, not cached" if spills else "compiled" + (", cached" if r.cache else "")
        print(f"{state} {r.kernel}: {r.seconds:.1f} s, SMEM plan {r.plan_smem} compiler {r.compiler_smem}, registers "
              f"{r.registers}{', ' + r.error if r.error else ''}", flush=True)
    if bad:
        raise SystemExit(f"{bad} of {len(rows)} kernels failed")


def measure_gated(mods: dict, cands: dict, M: int, N: int, K: int, rounds: int) -> dict:
    import torch
    import torch.nn.functional as F

    from specgen.bench.timing import kernel_cycle

    assert N % 8 == 0, f"N = {N}: forward_pre stores pre in place only where N is a multiple of 8"
    mp, mr = mods["preact"], mods["recompute"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()  # gate_up weight (2N, K)
    dout = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    b = w.t()
    h = torch.empty(M, 2 * N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    pre, g = (torch.empty(M, 2 * N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    xp, yp = mp._operands("forward_pre", x, b)  # as _forward_pre and _backward pass them
    xr, yr = mr._operands("recompute", x, b)
    dout_ready = mr._tr.tma_ready(dout, 1)

    def run(key: str):
        if key.split("@")[0] == "forward_pre":
            return lambda: mp._gemm(key, xp, yp, out, pre)
        return lambda: mr._gemm(key, xr, yr, g, dout_ready)

    keys = ["forward_pre", *cands["preact"], "recompute", *cands["recompute"]]
    torch.mm(x, b, out=h)
    want = h.float().requires_grad_()  # cuBLAS's product; out and G formed from it in f32 (halves: gate, up)
    gate, up = want.chunk(2, dim=-1)
    act = F.silu(gate) * up
    (g_want,) = torch.autograd.grad(act, want, dout.float())
    act, want = act.detach(), want.detach()

    def rel(got, ref):
        return ((got.float() - ref).abs().max() / ref.abs().max()).item()  # NaN (unwritten) propagates

    errors = {}
    for key in keys:  # each candidate's outputs NaN-poisoned, then checked
        for t in (out, pre, g):
            t.fill_(float("nan"))
        run(key)()
        torch.cuda.synchronize()
        errors[key] = ({"pre": rel(pre, want), "out": rel(out, act)} if key.startswith("forward_pre")
                       else {"g": rel(g, g_want)})
    del want, act, g_want, gate, up
    calls = {"cublas:mm": lambda: torch.mm(x, b, out=h), "cublas:mm_aa": lambda: torch.mm(x, b, out=h)}
    calls |= {k: run(k) for k in keys}
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    paired = {k: statistics.median(c / s for c, s in zip(res["cublas:mm"]["samples"], v["samples"], strict=True))
              for k, v in res.items()}
    best = {}
    for role in GATED_ROLE.values():
        ok = [k for k in keys if k.split("@")[0] == role and all(e < 1e-2 for e in errors[k].values())]  # NaN fails
        best[role] = min(ok, key=med.__getitem__) if ok else role
    flops = 2 * M * 2 * N * K
    configs = {k: (mp if k.startswith("forward_pre") else mr).TRAIN_CONFIGS[k]._asdict() for k in keys}
    return {"layer": "gated (SwiGLU, halves) on CuTe sm90", "shape": [M, N, K], "rounds": rounds,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"),
            "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
            "paired_cublas_over": paired, "kernels_us": {k: v["kernels"] for k, v in res.items()},
            "rel_err_vs_cublas": errors, "best": best, "configs": configs}


def gated_step(mods: dict, best: dict, M: int, N: int, K: int, rounds: int, compiled: bool) -> dict:
    """The gated step (train_step.py's measure_gated: eager, the cuBLAS GEMMs alone, both CuTe save modes) with the
    modules' configs, then with each role's fastest candidate in its place (its compiled function under the role's
    key: what `_gemm(role)` launches)."""
    import torch

    import bench.train_step as ts

    entries = {f"specgen_cute_{save}": getattr(m, GATED_NAMES[save]) for save, m in mods.items()}
    before = ts.measure_gated(M, N, K, rounds, compiled, entries)
    device = torch.cuda.current_device()
    for save, m in mods.items():
        role = GATED_ROLE[save]
        if best[role] != role:
            m._train_launcher.ready[(device, role)] = m._train_launcher.entry(device, best[role], m.TRAIN_CONFIGS[best[role]])
    after = ts.measure_gated(M, N, K, rounds, compiled, entries)
    return {"module_configs": before, "fastest_candidates": after, "candidates": best}


if __name__ == "__main__":
    main()
