"""The grouped Pallas Mosaic GPU kernel (pallas:gpu_sm90) against jax.lax.ragged_dot under jax.jit on the
issue's rows, with the project's paired CUPTI timer (`specgen.bench.timing.kernel_cycle`: every call once per
round in a rotating order, L2 flushed before each; a JAX call waits for torch's stream first and is waited for).

The kernel is the catalogue's `moe_bf16` module (B (G, N, K) K-major, as torch._grouped_mm callers pass it: "ours"
is its config for the row's total rows, the default or the decode variant, as a caller gets it; the configs named
by --configs are forced through `_call(..., config=)`, each "TMxTNxTKxSTAGES", optionally followed by "r<raster
dim>" and "g<group_m>", e.g. 128x256x64x4r1g16); ragged_dot takes its own
(G, K, N) layout. An A/A pair (the module against itself) shows the timer's spread; torch._grouped_mm on the same
sizes is printed beside it (the issue's peer), timed from torch, and the module's torch entry (`moe_bf16_torch`,
its direct launch at these aligned shapes). The rows and their group sizes are gpu/bench_grouped.py's (the
issue's workloads, even and Dirichlet(0.3) skewed sizes from the same seed), so every GPU backend is timed on the
same sizes; a markdown table with the geomean closes the run.

    python gpu/bench_grouped_mgpu.py --out out/gpu [--rounds 20] [--rows "decode:even,Mixtral up:skewed"] [--configs ...] [--split-ab]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import geomean, paired  # noqa: E402
from specgen.bench.timing import jax_call, kernel_cycle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped import WORKLOADS, group_sizes  # noqa: E402  (the bench's rows and distributions, not a copy)

SHAPES = {name: (experts, rows, n, k) for name, experts, rows, n, k in WORKLOADS}
ROWS = [f"{name}:{dist}" for name in SHAPES for dist in ("even", "skewed")]


def unsplit(mod, *args):
    """The module's jitted program at `args` with its split last wave off (its `_tail_splits` admitting none while
    it traces, the kernel cache cleared around it), compiled ahead: the A/B partner of "ours" (docs/grouped.md,
    the Mosaic GPU split last wave)."""
    splits, mod._tail_splits = mod._tail_splits, lambda *_: ()
    mod._build.cache_clear()
    try:
        return jax.jit(lambda *xs: mod._launch(*xs)).lower(*args).compile()  # a function of its own: no trace shared
    finally:
        mod._tail_splits = splits
        mod._build.cache_clear()


def row_problem(label: str):
    """A bench row's JAX problem ("WORKLOAD:DIST", gpu/bench_grouped.py's): (sizes, a (M, K), w (G, N, K) bf16 as
    torch._grouped_mm callers store it, offs (G,) int32), from one seed, the same data for every script timing it."""
    name, dist = label.split(":")
    experts, per_expert, n, k = SHAPES[name]
    sizes = group_sizes(dist, experts, per_expert)
    key = jax.random.key(0)
    a = jax.random.normal(key, (sum(sizes), k), jnp.bfloat16)
    w = jax.random.normal(jax.random.fold_in(key, 1), (experts, n, k), jnp.bfloat16) * 0.02
    return sizes, a, w, jnp.cumsum(jnp.asarray(sizes, jnp.int32)).astype(jnp.int32)


def forced_config(base, item: str):
    """A --configs item ("TMxTNxTKxSTAGES[r<raster dim>][g<group_m>]") as the module's Config row: the design's plan of
    moe_bf16's spec (specs/grouped.toml) at that tile, stages and visit order, one config for every size (what check
    resolves and `mgpu_config` renders: the warpgroup split, epilogue subtiles, swizzles and SMEM); None (the
    findings printed) where check refuses it."""
    import tomllib

    from specgen.check import check_spec
    from specgen.kinds.gemm.designs.pallas.design import mgpu_config
    from specgen.kinds.grouped.designs.pallas_mgpu.design import CONFIG_FIELDS
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    tm, tn, tk, st, r, gm = re.fullmatch(r"(\d+)x(\d+)x(\d+)x(\d+)(?:r(\d))?(?:g(\d+))?", item).groups()
    with open(Path(__file__).resolve().parents[1] / "specs" / "grouped.toml", "rb") as f:
        spec = next(k for k in tomllib.load(f)["kernels"] if k["name"] == "moe_bf16")
    schedule = {**spec.get("schedule", {}), **({"raster": ("along_m", "along_n")[int(r)]} if r else {}),
                **({"group_m": int(gm)} if gm else {})}
    spec = {**spec, "tile": {"m": int(tm), "n": int(tn), "k": int(tk)}, "pipeline": {"ab_stages": int(st)},
            "schedule": schedule, "targets": ["pallas:gpu_sm90"], "per_target": {}, "variants": []}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<bench {item}>", ".json")
    if errors := list(dict.fromkeys(f"{d.rule}: {d.message}" for d in check_spec(loaded) if d.severity == "error")):
        print(f"{item}: refused by check (not timed):", *errors, sep="\n    ", flush=True)
        return None
    cfg = mgpu_config(resolve(loaded.spec, loaded.spec.targets[0]))
    return base._replace(**{field: getattr(cfg, planned) for field, planned in CONFIG_FIELDS})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--configs", default="", help="forced configs: TMxTNxTKxSTAGES[r<raster dim>][g<group_m>], ...")
    parser.add_argument("--hlo", action="store_true", help="write ragged_dot's optimized HLO per row to --out")
    parser.add_argument("--split-ab", action="store_true",
                        help="also time the module with its split last wave off (ours_no_split, paired with ours)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help="the rows to time, comma-separated WORKLOAD:DIST pairs (gpu/bench_grouped.py's)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_bf16 as mod

    base = mod.CONFIG
    configs = {}
    for item in filter(None, args.configs.split(",")):
        if (cfg := forced_config(base, item)) is not None:  # (None: check refuses it, its findings printed)
            configs[item] = cfg
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__,
                                 "torch": torch.__version__, "rows": {}}
    ragged = jax.jit(lambda a, b, sizes: jax.lax.ragged_dot(a, b, sizes))
    table = []
    for label in args.rows.split(","):
        name, dist = label.split(":")
        experts, per_expert, n, k = SHAPES[name]
        sizes, a, w, offs = row_problem(label)
        rows = sum(sizes)
        w_kn = jnp.swapaxes(w, 1, 2).copy()  # ragged_dot's own (G, K, N) layout, materialized
        gs = jnp.asarray(sizes, jnp.int32)
        if args.hlo:  # what XLA runs for ragged_dot: its optimized HLO (fusions, custom calls)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"ragged_dot-{re.sub(r'[^a-z0-9]+', '-', label.lower())}.hlo.txt").write_text(ragged.lower(a, w_kn, gs).compile().as_text())
        calls = {"ours": jax_call(mod._call, a, w, offs), "ragged_dot": jax_call(ragged, a, w_kn, gs)}
        for name, cfg in configs.items():
            calls[name] = jax_call(lambda a, w, o, cfg=cfg: mod._call(a, w, o, None, config=cfg), a, w, offs)
        if args.split_ab:  # the split last wave's A/B in one run: the same program compiled with no split
            calls["ours_no_split"] = jax_call(unsplit(mod, a, w, offs), a, w, offs)
        calls["ours_again"] = calls["ours"]  # A/A
        ta = torch.from_dlpack(a)
        tw = torch.from_dlpack(w)
        toffs = torch.from_dlpack(offs)
        calls["torch_grouped_mm"] = lambda ta=ta, tw=tw, toffs=toffs: torch._grouped_mm(ta, tw.transpose(-2, -1), offs=toffs)
        # the torch entry (aligned shapes: its direct launch, the group metadata in torch ops), as torch callers get it
        calls["ours_torch_entry"] = lambda ta=ta, tw=tw, toffs=toffs: mod.moe_bf16_torch(ta, tw.transpose(-2, -1), toffs)
        cycle = kernel_cycle(calls, args.rounds)
        ours = cycle["ours"]["samples"]
        row = {"sizes": sizes, "config": mod._config_for(rows, n, k)._asdict(),
               "ours_us": paired(ours, ours).ours_us}
        for name in calls:
            if name != "ours":
                row[f"{name}_over_ours"] = paired(ours, cycle[name]["samples"]).model_dump()
        row["kernels"] = {name: cycle[name]["kernels"] for name in calls}
        result["rows"][label] = row
        print(label, json.dumps({k: (v["ratio"], v["peer_us"]) if isinstance(v, dict) and "ratio" in v else v
                                 for k, v in row.items() if k not in ("kernels", "sizes", "config")}), flush=True)
        print("  kernels (median us):", json.dumps({n: {k: round(t, 1) for k, t in row["kernels"][n].items()}
                                                    for n in ("ours", "ragged_dot", "torch_grouped_mm",
                                                              "ours_torch_entry")}), flush=True)
        table.append((label, row))
    print("| workload | sizes | ours us | torch._grouped_mm / ours (interval) | ragged_dot / ours | torch entry / ours "
          "| A/A |\n|---|---|---|---|---|---|---|")
    for label, row in table:
        peer, rd, te, aa = (row[f"{c}_over_ours"] for c in ("torch_grouped_mm", "ragged_dot", "ours_torch_entry",
                                                            "ours_again"))
        print(f"| {label.replace(':', ' | ')} | {row['ours_us']:.1f} | {peer['ratio']:.3f} ({peer['ratio_lo']:.3f}-"
              f"{peer['ratio_hi']:.3f}) | {rd['ratio']:.3f} | {te['ratio']:.3f} | {aa['ratio']:.3f} |")
    if table:
        print(f"| geomean | | | {geomean([r['torch_grouped_mm_over_ours']['ratio'] for _, r in table]):.3f} "
              f"| {geomean([r['ragged_dot_over_ours']['ratio'] for _, r in table]):.3f} | | |", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    tag = "" if args.rows == ",".join(ROWS) and not configs else "-" + re.sub(r"[^a-z0-9]+", "-", args.rows.lower())
    (Path(args.out) / f"bench-grouped-mgpu{tag}.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
